package store

import (
	"context"
	"fmt"
	"time"
)

// A dashboard session is a signed cookie that each API process checks on
// its own, so a sign-out reaches the other processes only through Redis: a
// session signed out before its end is recorded until that end, one key per
// session. A check is then one EXISTS on a key of its own, which a Redis
// Cluster serves from whichever slot it falls in, and nothing is left once
// the session would have expired anyway.
//
//	herald:signedout:ID     STRING  "1": session ID was signed out; expires when the session would have
func (k *keys) signedOut(id string) string { return k.ns + ":signedout:" + id }

// SignOut records that the dashboard session id was signed out, for ttl:
// what is left of its life. A ttl under a millisecond records nothing, since
// such a session is over anyway.
func (s *Store) SignOut(ctx context.Context, id string, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return nil
	}
	// Written while Redis is full too: a sign-out refused would leave the
	// session open on every API process until its end.
	if _, err := s.runAckedScript(ctx, markScript, []string{s.keys.signedOut(id)}, ttl.Milliseconds()); err != nil {
		return fmt.Errorf("store: record a sign-out: %w", err)
	}
	return nil
}

// SignedOut reports whether SignOut recorded the session id and its ttl has
// not passed.
func (s *Store) SignedOut(ctx context.Context, id string) (bool, error) {
	n, err := s.client.Exists(ctx, s.keys.signedOut(id)).Result()
	if err != nil {
		return false, fmt.Errorf("store: check a sign-out: %w", err)
	}
	return n > 0, nil
}
