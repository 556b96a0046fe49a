package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
)

// Endpoints registered over the API live in one hash, apart from the
// notifications' shards: they are few (one per merchant), read through a
// cache (endpoint.Registry), and each command touches one key, so a Redis
// Cluster needs no hash tag for them.
//
//	herald:endpoints        HASH  name -> the endpoint as JSON (endpoint.Endpoint, secrets included)
func (k *keys) endpoints() string { return k.ns + ":endpoints" }

var _ endpoint.Lookup = (*Store)(nil)

// PutEndpoint stores e, validated, under name, replacing any endpoint of
// that name; created reports a new name. The endpoint's failing streak
// goes on only when it had a disable_after and keeps one: a new name starts
// with none, whatever an endpoint deleted under it left, and an endpoint
// without a disable_after has none, since its attempts are not recorded
// (one that recovered meanwhile would be disabled at its first failure
// once disable_after is back, for a streak begun days before).
func (s *Store) PutEndpoint(ctx context.Context, name string, e *endpoint.Endpoint) (created bool, err error) {
	if err := s.open(ctx); err != nil {
		return false, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return false, fmt.Errorf("store: put endpoint %q: %w", name, err)
	}
	// The streak lives in another slot than the endpoint, so a delete
	// cannot end both at once, and a dispatcher that still holds the
	// endpoint as it was (deleted, or with a disable_after) may record a
	// failure after the change: a stale streak is ended here, before the
	// endpoint is written, so that a retry after a failure ends it again.
	old, err := s.client.HGet(ctx, s.keys.endpoints(), name).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("store: put endpoint %q: %w", name, err)
	}
	var was endpoint.Endpoint
	var ended string // the streak ended here, written again if Redis refuses the endpoint
	if err != nil || json.Unmarshal(old, &was) != nil || was.DisableAfter <= 0 || e.DisableAfter <= 0 {
		pipe := s.client.Pipeline()
		since := pipe.HGet(ctx, s.keys.health(name), "failing_since")
		pipe.HDel(ctx, s.keys.health(name), "failing_since")
		if _, err := s.exec(ctx, pipe); err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("store: put endpoint %q: end its failing streak: %w", name, err)
		}
		ended = since.Val()
	}
	var set *redis.IntCmd
	err = s.runAckedCmds(ctx, s.keys.endpoints(), func(p redis.Pipeliner) { set = p.HSet(ctx, s.keys.endpoints(), name, b) })
	if err != nil {
		// A full Redis refused the endpoint but let the delete through:
		// the put changes nothing, as its error says, so the streak is
		// written back (a delete first, as Redis lets a full one write).
		if ended != "" && errors.Is(err, notify.ErrOutOfMemory) {
			if _, rerr := s.runScript(ctx, setFieldScript, []string{s.keys.health(name)}, "failing_since", ended); rerr != nil {
				err = errors.Join(err, fmt.Errorf("write back its failing streak: %w", rerr))
			}
		}
		return false, fmt.Errorf("store: put endpoint %q: %w", name, err)
	}
	return set.Val() == 1, nil
}

// Endpoint returns the endpoint stored under name, or endpoint.ErrNotFound.
func (s *Store) Endpoint(ctx context.Context, name string) (*endpoint.Endpoint, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	b, err := s.client.HGet(ctx, s.keys.endpoints(), name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, endpoint.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get endpoint %q: %w", name, err)
	}
	var e endpoint.Endpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("store: decode endpoint %q: %w", name, err)
	}
	return &e, nil
}

// DeleteEndpoint removes the endpoint stored under name, or returns
// endpoint.ErrNotFound. Notifications naming it fail permanently at their
// next attempt unless an endpoint of that name exists again by then. Its
// failing streak ends with it, or at the latest when PutEndpoint registers
// the name again, so that the endpoint registered then is not disabled at
// its first failure for the failures of this one; a disabling stays until
// EnableEndpoint. notify.ErrNotReplicated (Config.WaitReplicas) means the
// endpoint is deleted, but its replicas may not know it yet.
func (s *Store) DeleteEndpoint(ctx context.Context, name string) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	var del *redis.IntCmd
	err := s.runAckedCmds(ctx, s.keys.endpoints(), func(p redis.Pipeliner) { del = p.HDel(ctx, s.keys.endpoints(), name) })
	if del == nil || del.Err() != nil {
		return fmt.Errorf("store: delete endpoint %q: %w", name, err)
	}
	if del.Val() == 0 {
		return endpoint.ErrNotFound
	}
	if err != nil {
		// Deleted on the master: its streak goes too, and the caller
		// hears that the replicas may not have the deletion.
		err = fmt.Errorf("store: delete endpoint %q: %w", name, err)
	}
	// The endpoint is gone: failing here must not fail the call, whose
	// caller goes on to end the endpoint's pauses, and whose retry would
	// find nothing to delete. The streak left then ends when the name is
	// registered again.
	if herr := s.client.HDel(ctx, s.keys.health(name), "failing_since").Err(); herr != nil {
		s.cfg.Logger.WarnContext(ctx, "store: deleted an endpoint but not its failing streak", "endpoint", name, "error", herr)
	}
	return err
}

// Endpoints returns every stored endpoint by name. An entry that does not
// decode is an error naming it rather than a silent omission.
func (s *Store) Endpoints(ctx context.Context) (map[string]endpoint.Endpoint, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	all, err := s.client.HGetAll(ctx, s.keys.endpoints()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: list endpoints: %w", err)
	}
	out := make(map[string]endpoint.Endpoint, len(all))
	for name, b := range all {
		var e endpoint.Endpoint
		if err := json.Unmarshal([]byte(b), &e); err != nil {
			return nil, fmt.Errorf("store: decode endpoint %q: %w", name, err)
		}
		out[name] = e
	}
	return out, nil
}
