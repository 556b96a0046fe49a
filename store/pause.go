package store

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// What can be paused.
const (
	PauseTopic    = "topic"
	PauseEndpoint = "endpoint"
)

// PausedViewAge is how old a process's view of what is paused may be:
// dispatchers read it this often, and clients trust a read this long
// before a pull reservation reads it again. A pause holds everywhere once
// it has passed (client.Client.Pause waits for that).
const PausedViewAge = 250 * time.Millisecond

// Pausing keeps a notification where every state change already knows to
// find it: a dispatcher that reserves one whose topic or endpoint is paused
// gives it back (a release, which counts no attempt) due at a parking time
// far beyond any real due time, in a band of its own per paused name. It
// stays scheduled, so cancel, replace, stats and the dead-letter paths all
// work unchanged; resume moves the band back to now.
//
//	herald:paused           HASH  "topic|T" or "endpoint|E" -> paused since (ms)
//
// Parking times start at parkBaseMS (2^52 ms, in the year 144683), one
// every parkBandMS, 2^31 of them, all below the largest score Redis holds
// exactly; a paused name parks at one of them, by hash. Two names sharing
// one only cost the second a needless unpark and park again.
const (
	parkBaseMS = 1 << 52
	parkBandMS = 1 << 10
	parkBands  = 1 << 31
)

func (k *keys) paused() string { return k.ns + ":paused" }

func pauseField(kind, name string) string { return kind + "|" + name }

// Pause pauses kind (PauseTopic or PauseEndpoint) name: from the next time
// a dispatcher refreshes its view of what is paused, no attempt of its
// notifications starts; attempts already running finish. Pausing what is
// paused changes nothing.
func (s *Store) Pause(ctx context.Context, kind, name string) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	if err := checkPause(kind, name); err != nil {
		return err
	}
	err := s.runAckedCmds(ctx, s.keys.paused(), func(p redis.Pipeliner) {
		p.HSetNX(ctx, s.keys.paused(), pauseField(kind, name), ms(s.Now()))
	})
	if err != nil {
		return fmt.Errorf("store: pause %s %q: %w", kind, name, err)
	}
	return nil
}

// Resume ends a pause and makes every notification parked under it due now,
// shard by shard; moved counts them. A notification also paused otherwise
// (its topic and its endpoint) is parked again by the dispatcher that
// reserves it.
func (s *Store) Resume(ctx context.Context, kind, name string) (moved int, err error) {
	if err := s.open(ctx); err != nil {
		return 0, err
	}
	if err := checkPause(kind, name); err != nil {
		return 0, err
	}
	// Only the end of the pause waits for the replicas: a failover that
	// loses the moves below leaves notifications parked under a pause that
	// is gone, which the dispatchers make due (UnparkStray).
	err = s.runAckedCmds(ctx, s.keys.paused(), func(p redis.Pipeliner) { p.HDel(ctx, s.keys.paused(), pauseField(kind, name)) })
	if err != nil {
		return 0, fmt.Errorf("store: resume %s %q: %w", kind, name, err)
	}
	band := ParkAt(kind, name).UnixMilli()
	queues := []string{QueuePush}
	if kind == PauseTopic {
		queues = append(queues, PullQueue(name))
	}
	// A shard that fails (its Cluster master down) does not stop the
	// others; its notifications stay parked until a dispatcher's look for
	// strays reaches them.
	var failed error
	for shard := range s.keys.shards {
		for _, q := range queues {
			n, err := s.unpark(ctx, shard, q, band)
			moved += n
			failed = cmp.Or(failed, err)
		}
	}
	if kind == PauseTopic {
		s.wakePull(ctx, name)
	}
	if failed != nil {
		return moved, fmt.Errorf("store: resume %s %q: %w", kind, name, failed)
	}
	return moved, nil
}

// wakePull tells the pull consumers of topic, in every process, that its
// due work may be reserved now: it was never parked, so the moves of a
// resume announce none of it, and consumers waiting on the paused topic
// would look again only at their next poll. One wake-up per shard, due
// now; a lost one costs a consumer that poll, as any lost wake-up does.
func (s *Store) wakePull(ctx context.Context, topic string) {
	queue, now := PullQueue(topic), strconv.FormatInt(ms(s.Now()), 10)
	pipe := s.client.Pipeline()
	for shard := range s.keys.shards {
		pipe.Publish(ctx, s.keys.wake(), queue+" "+strconv.Itoa(shard)+" "+now)
	}
	_, _ = s.exec(ctx, pipe)
}

// unpark makes every notification parked in band of a shard's queue due
// now.
func (s *Store) unpark(ctx context.Context, shard int, queue string, band int64) (moved int, err error) {
	for {
		v, err := s.runScript(ctx, unparkScript, []string{s.keys.state(shard), s.keys.due(shard, queue)},
			ms(s.Now()), band, band, maxScriptBatch, s.keys.wake(), shard, queue)
		if err != nil {
			return moved, err
		}
		n, _ := v.(int64)
		moved += int(n)
		if n < maxScriptBatch {
			return moved, nil
		}
	}
}

// UnparkStray makes due now the notifications parked under a pause that is
// no longer in paused (as Paused returns it): those a dispatcher parked
// while a resume ran, with its view of what is paused not yet refreshed.
// Dispatchers call it now and then for the queues they serve; it costs one
// command per shard and queue, and one more per band parked there.
func (s *Store) UnparkStray(ctx context.Context, queues []string, paused map[string]time.Time) (moved int, err error) {
	if err := s.open(ctx); err != nil {
		return 0, err
	}
	kept := make(map[int64]bool, len(paused))
	for f := range paused {
		kind, name, _ := strings.Cut(f, "|")
		kept[ParkAt(kind, name).UnixMilli()] = true
	}
	// A shard that fails (its Cluster master down) is left for the next
	// look, and the others looked at.
	var failed error
	for i := range s.keys.shards * len(queues) {
		shard, q := i/len(queues), queues[i%len(queues)]
		for lo := int64(parkBaseMS); ; {
			head, err := s.client.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.due(shard, q),
				Start: lo, Stop: "+inf", ByScore: true, Count: 1}).Result()
			if err != nil {
				failed = cmp.Or(failed, err)
				break
			}
			if len(head) == 0 {
				break
			}
			band := int64(head[0].Score)
			lo = band + 1
			if kept[band] || (band-parkBaseMS)%parkBandMS != 0 {
				continue // paused, or not parked: a (very) far due time
			}
			n, err := s.unpark(ctx, shard, q, band)
			moved += n
			if err != nil {
				failed = cmp.Or(failed, err)
				break
			}
		}
	}
	if failed != nil {
		return moved, fmt.Errorf("store: unpark: %w", failed)
	}
	return moved, nil
}

// Paused returns what is paused now: "topic|T" and "endpoint|E" fields,
// each with when it was paused.
func (s *Store) Paused(ctx context.Context) (map[string]time.Time, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	all, err := s.client.HGetAll(ctx, s.keys.paused()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: paused: %w", err)
	}
	out := make(map[string]time.Time, len(all))
	for f, v := range all {
		at, _ := strconv.ParseInt(v, 10, 64)
		out[f] = fromMS(at)
	}
	return out, nil
}

// IsPaused reports whether kind name is paused now.
func (s *Store) IsPaused(ctx context.Context, kind, name string) (bool, error) {
	if err := s.open(ctx); err != nil {
		return false, err
	}
	ok, err := s.client.HExists(ctx, s.keys.paused(), pauseField(kind, name)).Result()
	if err != nil {
		return false, fmt.Errorf("store: paused: %w", err)
	}
	return ok, nil
}

// PauseKey is the field Paused names kind name with.
func PauseKey(kind, name string) string { return pauseField(kind, name) }

// ParkAt is the due time a dispatcher gives back a notification with while
// kind name is paused (a release with this NextAt): the start of the
// name's band.
func ParkAt(kind, name string) time.Time {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pauseField(kind, name)))
	return time.UnixMilli(parkBaseMS + int64(h.Sum32()%parkBands)*parkBandMS).UTC()
}

// Parked reports whether n is parked by a pause, waiting for a resume
// rather than for a time.
func Parked(n *notify.Notification) bool {
	return n.State == notify.StateScheduled && n.NextAttemptAt != nil && ParkTime(*n.NextAttemptAt)
}

// ParkTime reports whether t is a due time ParkAt gives: one of a pause,
// not of a clock.
func ParkTime(t time.Time) bool { return t.UnixMilli() >= parkBaseMS }

func checkPause(kind, name string) error {
	switch {
	case kind == PauseTopic && !notify.ValidTopic(name):
		return notify.Errorf("topic", "must match [a-z0-9._-]{1,64}")
	case (kind == PauseEndpoint || kind == PauseDisabled) && !notify.ValidID(name):
		return notify.Errorf("name", "must match [A-Za-z0-9._:-]{1,128}")
	case kind != PauseTopic && kind != PauseEndpoint && kind != PauseDisabled:
		return fmt.Errorf("store: cannot pause a %q", kind)
	case strings.Contains(name, "|"):
		return notify.Errorf("name", "must not contain |")
	}
	return nil
}

// unparkScript makes the notifications parked in one band of a shard due
// now, a batch at a time.
//
// KEYS[1] state hash, KEYS[2] the due set of the shard's queue.
// ARGV: now (ms), the band's first and last score, the batch limit, the
// wake-up channel, the shard, the queue.
// Returns how many it moved; fewer than the limit means the band is empty.
var unparkScript = newScript(`
local now, lo, hi, limit = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
if not now or not limit or limit < 1 or limit > MAX_BATCH then return redis.error_reply('bad arguments') end
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], lo, hi, 'LIMIT', 0, limit)
if #ids == 0 then return 0 end
-- Out first, in again below: Redis at maxmemory refuses a script's first
-- write that may grow memory, and a resume takes none.
redis.call('ZREM', KEYS[2], unpack(ids))
local t = string.format('%d', now)
local zs, sts = {}, {}
local cur = redis.call('HMGET', KEYS[1], unpack(ids))
for i, id in ipairs(ids) do
  zs[#zs + 1] = t
  zs[#zs + 1] = id
  local o = st_parse(cur[i])
  if o and o.s == 'S' then
    o.na, o.ua = t, t
    sts[#sts + 1] = id
    sts[#sts + 1] = st_line(o)
  end
end
if #sts > 0 then redis.call('HSET', KEYS[1], unpack(sts)) end
schedule(KEYS[2], zs, now, ARGV[5], ARGV[7], ARGV[6])
return #ids
`)
