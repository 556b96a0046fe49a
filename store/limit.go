package store

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldhq/herald/endpoint"
)

// Endpoint limits are held in Redis, so that every dispatcher together
// respects them. Both keys of an endpoint share its hash tag, so one script
// touches one slot:
//
//	herald:{ep:NAME}:inflight  ZSET    lease id -> lease expiry (ms, Redis time): attempts running now
//	herald:{ep:NAME}:rate      STRING  the earliest time (ms, Redis time) the next attempt may start, 1/rate after the last
//
// A lease is taken when an attempt starts and dropped when it ends; one
// whose dispatcher died (a SIGKILL) holds its place only until it expires.
// The scripts read Redis's clock, so dispatchers' clocks need not agree.
func (k *keys) inflight(name string) string { return k.ns + ":{ep:" + name + "}:inflight" }
func (k *keys) rate(name string) string     { return k.ns + ":{ep:" + name + "}:rate" }

// rateSlack is how late a rate slot may be taken and still count on its
// grid (see acquireScript): after a pause in its traffic, an endpoint can
// get rate × rateSlack attempts (rounded down) at once besides the one
// that ends the pause, so none below 4/s.
const rateSlack = 250 * time.Millisecond

// Limited reports whether e has a limit, and so whether its attempts cost
// an Acquire and a Release: endpoints without one cost nothing.
func Limited(e *endpoint.Endpoint) bool { return e.MaxInFlight > 0 || e.Rate > 0 }

// Acquire asks to start an attempt to endpoint name under e's limits,
// holding a lease on an in-flight place for at most lease. ok is true when
// the attempt may start; Release the lease when it ends. Otherwise wait
// says how long until a place under the rate frees, or is 0 when the
// endpoint is at max_in_flight (a place frees when an attempt ends).
func (s *Store) Acquire(ctx context.Context, name string, e *endpoint.Endpoint, leaseID string, lease time.Duration) (ok bool, wait time.Duration, err error) {
	if err := s.open(ctx); err != nil {
		return false, 0, err
	}
	interval := 0.0
	if e.Rate > 0 {
		interval = 1000 / e.Rate
	}
	v, err := s.runScript(ctx, acquireScript, []string{s.keys.inflight(name), s.keys.rate(name)},
		e.MaxInFlight, interval, leaseID, max(lease.Milliseconds(), 1))
	if err != nil {
		return false, 0, fmt.Errorf("store: acquire endpoint %q: %w", name, err)
	}
	n, _ := v.(int64)
	switch {
	case n == 0:
		return true, 0, nil
	case n < 0:
		return false, 0, nil
	}
	return false, time.Duration(n) * time.Millisecond, nil
}

// Release drops the lease Acquire granted.
func (s *Store) Release(ctx context.Context, name, leaseID string) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	if err := s.client.ZRem(ctx, s.keys.inflight(name), leaseID).Err(); err != nil {
		return fmt.Errorf("store: release endpoint %q: %w", name, err)
	}
	return nil
}

// acquireScript takes an in-flight lease and a rate slot of one endpoint,
// both or neither.
//
// KEYS[1] the endpoint's in-flight leases, KEYS[2] its next rate slot.
// ARGV: max in flight (0: none), the rate's interval in ms (0: none), the
// lease id, the lease's length in ms.
// Returns 0 when granted, -1 when at max in flight, else the ms until the
// next rate slot.
var acquireScript = newScript(fmt.Sprintf("local RATE_SLACK = %d\n", rateSlack.Milliseconds()) + `
local max, iv, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
if not max or not iv or not lease or max < 0 or iv < 0 or lease < 1 then return redis.error_reply('bad arguments') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if max > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= max then return -1 end
end
if iv > 0 then
  local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
  if nxt > now then return math.ceil(nxt - now) end
  -- Slots stay on their grid when taken up to RATE_SLACK ms late, so that
  -- waiters' round trips and scheduling delays do not slow the rate; a
  -- longer gap is not made up. Any window of w ms thus holds at most
  -- (w + RATE_SLACK) / iv + 1 attempts.
  redis.call('SET', KEYS[2], string.format('%.3f', math.max(nxt, now - RATE_SLACK) + iv), 'PX', math.ceil(RATE_SLACK + iv) + 1000)
end
if max > 0 then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
  -- Leases differ in length (each is its notification's ttr), so the
  -- set's expiry only grows: a short lease must not take longer ones with
  -- it. Extending to twice the need lets most grants only read it.
  if redis.call('PTTL', KEYS[1]) < lease + 1000 then
    redis.call('PEXPIRE', KEYS[1], 2 * (lease + 1000))
  end
end
return 0
`)
