package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// PauseDisabled is what Paused names an endpoint disabled by its health
// with: "disabled|NAME". Its notifications are parked as under a pause, and
// EnableEndpoint resumes them.
const PauseDisabled = "disabled"

// An endpoint's health, for disable_after:
//
//	herald:{ep:NAME}:health  HASH  "failing_since" -> first failure (ms) since the last success; "disabled_at" -> ms
func (k *keys) health(name string) string { return k.ns + ":{ep:" + name + "}:health" }

// Health is an endpoint's health as its record shows it.
type Health struct {
	// FailingSince is when the endpoint's attempts started failing, every
	// one since; nil after a success, and while the endpoint has no
	// disable_after (PutEndpoint).
	FailingSince *time.Time `json:"failing_since,omitempty"`
	// DisabledAt is when the endpoint was disabled for failing longer than
	// its disable_after; nil while enabled.
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
}

// EndpointSucceeded records a successful attempt to name: it is no longer
// failing.
func (s *Store) EndpointSucceeded(ctx context.Context, name string) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	if err := s.client.HDel(ctx, s.keys.health(name), "failing_since").Err(); err != nil {
		return fmt.Errorf("store: endpoint %q health: %w", name, err)
	}
	return nil
}

// EndpointFailed records a failed attempt to name, at now. When every
// attempt has failed for disableAfter or longer the endpoint is disabled:
// disabled reports that it is, by this failure or before, so that the
// caller parks its notifications at once rather than at its next read of
// what is paused. They then wait, parked, until EnableEndpoint.
func (s *Store) EndpointFailed(ctx context.Context, name string, disableAfter time.Duration) (disabled bool, err error) {
	if err := checkPause(PauseDisabled, name); err != nil {
		return false, err
	}
	if err := s.open(ctx); err != nil {
		return false, err
	}
	// Rounded up: the record counts whole milliseconds, and a part of one
	// must not read as 0, which the script refuses.
	after := (disableAfter + time.Millisecond - 1) / time.Millisecond
	v, err := s.runScript(ctx, failedScript, []string{s.keys.health(name)}, ms(s.Now()), int64(after))
	if err != nil {
		return false, fmt.Errorf("store: endpoint %q health: %w", name, err)
	}
	code, _ := v.(int64)
	if code == 0 {
		return false, nil
	}
	// The pause lives in another slot than the health hash: set it after,
	// on every failure reported while disabled, so a crash in between is
	// made good by the next one.
	set, err := s.runScript(ctx, pauseDisabledScript, []string{s.keys.paused()}, pauseField(PauseDisabled, name), ms(s.Now()))
	if err != nil {
		return false, fmt.Errorf("store: disable endpoint %q: %w", name, err)
	}
	if set == int64(1) {
		// EnableEndpoint may have run since the script, and resumed before
		// this pause was set: then the endpoint is enabled, and the pause
		// goes again.
		still, err := s.client.HExists(ctx, s.keys.health(name), "disabled_at").Result()
		if err != nil {
			return false, fmt.Errorf("store: disable endpoint %q: %w", name, err)
		}
		if !still {
			_, err := s.Resume(ctx, PauseDisabled, name)
			return false, err
		}
	}
	return true, nil
}

// EnableEndpoint enables an endpoint its health disabled and makes its
// waiting notifications due at once; resumed counts them. Its health starts
// afresh. An endpoint not disabled keeps its failing streak: enabling it
// changes nothing.
func (s *Store) EnableEndpoint(ctx context.Context, name string) (resumed int, err error) {
	// Checked before the health record goes, which Resume would check
	// only after.
	if err := checkPause(PauseDisabled, name); err != nil {
		return 0, err
	}
	if err := s.open(ctx); err != nil {
		return 0, err
	}
	if _, err := s.runAckedScript(ctx, enableScript, []string{s.keys.health(name)}); err != nil {
		return 0, fmt.Errorf("store: enable endpoint %q: %w", name, err)
	}
	return s.Resume(ctx, PauseDisabled, name)
}

// EndpointHealth returns name's health.
func (s *Store) EndpointHealth(ctx context.Context, name string) (Health, error) {
	h, err := s.EndpointsHealth(ctx, []string{name})
	if err != nil {
		return Health{}, err
	}
	return h[0], nil
}

// EndpointsHealth returns the health of each endpoint names lists, in one
// round trip (one a node, on a Cluster).
func (s *Store) EndpointsHealth(ctx context.Context, names []string) ([]Health, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(names))
	for i, name := range names {
		cmds[i] = pipe.HMGet(ctx, s.keys.health(name), "failing_since", "disabled_at")
	}
	if _, err := s.exec(ctx, pipe); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: endpoint health: %w", err)
	}
	out := make([]Health, len(names))
	for i, cmd := range cmds {
		for j, dst := range []**time.Time{&out[i].FailingSince, &out[i].DisabledAt} {
			if str, ok := cmd.Val()[j].(string); ok {
				at, _ := strconv.ParseInt(str, 10, 64)
				t := fromMS(at)
				*dst = &t
			}
		}
	}
	return out, nil
}

// failedScript records a failed attempt to an endpoint.
//
// KEYS[1] the endpoint's health hash.
// ARGV: now (ms), disable_after (ms).
// Returns 0 while enabled, 1 when already disabled, 2 when this failure
// disabled it.
var failedScript = newScript(`
local now, after = tonumber(ARGV[1]), tonumber(ARGV[2])
if not now or not after or after < 1 then return redis.error_reply('bad arguments') end
if redis.call('HEXISTS', KEYS[1], 'disabled_at') == 1 then return 1 end
-- A streak start that is not a number (written by hand) starts anew,
-- rather than failing every failure's record. A streak going on writes
-- nothing.
local since = tonumber(redis.call('HGET', KEYS[1], 'failing_since') or '')
if since and now - since < after then return 0 end
-- A streak that starts, or that disables the endpoint: out first, in
-- again. Redis at maxmemory refuses a script's first write that may grow
-- memory (a delete of nothing counts as a write), and a streak must not
-- wait for memory, or the endpoint's notifications would burn their
-- attempts meanwhile rather than wait parked.
redis.call('HDEL', KEYS[1], 'failing_since')
if not since then
  redis.call('HSET', KEYS[1], 'failing_since', ARGV[1])
  return 0
end
redis.call('HSET', KEYS[1], 'failing_since', string.format('%d', since), 'disabled_at', ARGV[1])
return 2
`)

// pauseDisabledScript pauses a disabled endpoint's notifications unless
// they are paused already.
//
// KEYS[1] the paused hash.
// ARGV: the pause's field, now (ms).
// Returns 1 when it set the pause, 0 when it was set.
var pauseDisabledScript = newScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
-- A delete first, of nothing: Redis at maxmemory refuses a script's first
-- write that may grow memory, and the field is all a disable adds.
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// enableScript clears the health of a disabled endpoint, and leaves that
// of one not disabled alone.
//
// KEYS[1] the endpoint's health hash.
// Returns 1 when the endpoint was disabled, 0 otherwise.
var enableScript = newScript(`
if redis.call('HEXISTS', KEYS[1], 'disabled_at') == 0 then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)
