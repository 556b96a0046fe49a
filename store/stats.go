package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// TopicStats counts one topic's notifications.
type TopicStats struct {
	Scheduled int64 `json:"scheduled"`
	// Waiting counts the notifications held behind an earlier one of their
	// order key; they are not in Scheduled.
	Waiting             int64 `json:"waiting"`
	Reserved            int64 `json:"reserved"`
	Dead                int64 `json:"dead"`
	SucceededTotal      int64 `json:"succeeded_total"`
	FailedAttemptsTotal int64 `json:"failed_attempts_total"`
}

// Add adds o's counts to t's.
func (t *TopicStats) Add(o TopicStats) {
	t.Scheduled += o.Scheduled
	t.Waiting += o.Waiting
	t.Reserved += o.Reserved
	t.Dead += o.Dead
	t.SucceededTotal += o.SucceededTotal
	t.FailedAttemptsTotal += o.FailedAttemptsTotal
}

// Stats returns counts per topic, summed over the shards in one pipeline.
// The scripts keep them as they move notifications, one counter update per
// topic per batch.
func (s *Store) Stats(ctx context.Context) (map[string]TopicStats, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, s.keys.shards)
	for shard := range cmds {
		cmds[shard] = pipe.HGetAll(ctx, s.keys.stats(shard))
	}
	if _, err := s.exec(ctx, pipe); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	out := map[string]TopicStats{}
	for _, c := range cmds {
		for field, v := range c.Val() {
			topic, name, ok := strings.Cut(field, ":")
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil {
				continue
			}
			ts := out[topic]
			switch name {
			case "scheduled":
				ts.Scheduled += n
			case "waiting":
				ts.Waiting += n
			case "reserved":
				ts.Reserved += n
			case "dead":
				ts.Dead += n
			case "succeeded_total":
				ts.SucceededTotal += n
			case "failed_attempts_total":
				ts.FailedAttemptsTotal += n
			}
			out[topic] = ts
		}
	}
	return out, nil
}

// Topics returns every topic that has ever had a notification, sorted: the
// topics the statistics count.
func (s *Store) Topics(ctx context.Context) ([]string, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	stats, err := s.Stats(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(stats))
	for t := range stats {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// ActivityRetention is how long the per-minute attempt counts behind
// Activity are kept.
const ActivityRetention = 2 * time.Hour

// latencyBounds are the upper bounds of the lateness buckets Activity
// counts in; the last bucket holds everything later.
var latencyBounds = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, LatenessLastBound,
}

// LatenessLastBound is the bound of Activity's last lateness bucket, and
// LatenessBeyond the LatenessP99 of attempts whose 99th percentile lies
// past it: attempts an hour late, after an outage, are not "at most 5m".
const (
	LatenessLastBound = 5 * time.Minute
	LatenessBeyond    = time.Duration(math.MaxInt64)
)

// latencyBucket returns the index of the bucket that counts lateness d.
func latencyBucket(d time.Duration) int {
	i, _ := slices.BinarySearch(latencyBounds, d)
	return i
}

// endpointActivity starts the act hash's names of endpoints, which no
// topic starts with: "@E|ok" beside the topic's "T|ok".
const endpointActivity = "@"

// MinuteActivity is what one topic's attempts, or one endpoint's, did in
// one minute, across every dispatcher and pull consumer.
type MinuteActivity struct {
	Minute time.Time
	// Topic names the topic; Endpoint, set instead, names the endpoint,
	// whose attempts their topics' rows count too.
	Topic, Endpoint string
	// Succeeded and Failed count finished attempts; released ones (given
	// back at a shutdown) are not counted.
	Succeeded, Failed int64
	// LatenessP99 is the 99th percentile of how late attempts started after
	// their due time, as the upper bound of its bucket (1ms, 2ms, 5ms, ...,
	// 5m), or LatenessBeyond; zero when no attempt recorded its lateness.
	// Reaped attempts (ttr expired) have none.
	LatenessP99 time.Duration
}

// Activity returns the attempts of each topic, and of each endpoint, and
// minute from since (at most ActivityRetention ago) to now, oldest first,
// in one pipeline.
func (s *Store) Activity(ctx context.Context, since time.Time) ([]MinuteActivity, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	now := s.Now()
	if oldest := now.Add(-ActivityRetention); since.Before(oldest) {
		since = oldest
	}
	first, last := since.Unix()/60, now.Unix()/60
	pipe := s.client.Pipeline()
	var cmds []*redis.MapStringStringCmd
	for m := first; m <= last; m++ {
		for shard := range s.keys.shards {
			cmds = append(cmds, pipe.HGetAll(ctx, s.keys.activity(shard, m)))
		}
	}
	if _, err := s.exec(ctx, pipe); err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	type acc struct {
		MinuteActivity
		buckets []int64
	}
	var out []MinuteActivity
	for m := first; m <= last; m++ {
		byName := map[string]*acc{}
		for shard := range s.keys.shards {
			for field, v := range cmds[int(m-first)*s.keys.shards+shard].Val() {
				parts := strings.Split(field, "|")
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || len(parts) < 2 {
					continue
				}
				a := byName[parts[0]]
				if a == nil {
					a = &acc{MinuteActivity: MinuteActivity{Minute: time.Unix(m*60, 0).UTC(), Topic: parts[0]},
						buckets: make([]int64, len(latencyBounds)+1)}
					if e, ok := strings.CutPrefix(parts[0], endpointActivity); ok {
						a.Topic, a.Endpoint = "", e
					}
					byName[parts[0]] = a
				}
				switch {
				case parts[1] == "ok":
					a.Succeeded += n
				case parts[1] == "fail":
					a.Failed += n
				case parts[1] == "lat" && len(parts) == 3:
					if b, err := strconv.Atoi(parts[2]); err == nil && b >= 0 && b < len(a.buckets) {
						a.buckets[b] += n
					}
				}
			}
		}
		for _, t := range slices.Sorted(maps.Keys(byName)) {
			a := byName[t]
			a.LatenessP99 = p99(a.buckets)
			out = append(out, a.MinuteActivity)
		}
	}
	return out, nil
}

// p99 returns the upper bound of the bucket holding the 99th percentile.
func p99(buckets []int64) time.Duration {
	var total int64
	for _, n := range buckets {
		total += n
	}
	if total == 0 {
		return 0
	}
	want := (total*99 + 99) / 100
	var seen int64
	for i, n := range buckets {
		if seen += n; seen >= want && i < len(latencyBounds) {
			return latencyBounds[i]
		}
	}
	return LatenessBeyond
}

// Recount counts the scheduled, waiting, reserved and dead notifications of
// each topic afresh from the sets, for audits and tests: it reads every due,
// reserved and state entry, a pass over the whole namespace. Stats keeps the same
// counts as the scripts move notifications.
func (s *Store) Recount(ctx context.Context) (map[string]TopicStats, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	topics, err := s.Topics(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]TopicStats{}
	add := func(topic string, f func(*TopicStats)) {
		ts := out[topic]
		f(&ts)
		out[topic] = ts
	}
	for shard := range s.keys.shards {
		for _, t := range topics {
			pull, err := s.client.ZCard(ctx, s.keys.due(shard, PullQueue(t))).Result()
			if err != nil {
				return nil, fmt.Errorf("recount: %w", err)
			}
			ready, err := s.readyCounts(ctx, shard, PullQueue(t))
			if err != nil {
				return nil, fmt.Errorf("recount: %w", err)
			}
			pull += ready[t]
			dead, err := s.client.ZCard(ctx, s.keys.dead(shard, t)).Result()
			if err != nil {
				return nil, fmt.Errorf("recount: %w", err)
			}
			add(t, func(ts *TopicStats) { ts.Scheduled += pull; ts.Dead += dead })
		}
		count := func(ids []string, inc func(*TopicStats)) error {
			for chunk := range slices.Chunk(ids, maxScriptBatch) {
				args := make([]any, len(chunk))
				for i, id := range chunk {
					args[i] = id
				}
				v, err := s.runScript(ctx, headersScript, []string{s.keys.job(shard)}, args...)
				if err != nil {
					return err
				}
				l, _ := v.([]any)
				for _, t := range l {
					add(replyString(t), inc)
				}
			}
			return nil
		}
		ready, err := s.readyCounts(ctx, shard, QueuePush)
		if err != nil {
			return nil, fmt.Errorf("recount: %w", err)
		}
		for t, n := range ready {
			add(t, func(ts *TopicStats) { ts.Scheduled += n })
		}
		for _, set := range []struct {
			key string
			inc func(*TopicStats)
		}{
			{s.keys.due(shard, QueuePush), func(ts *TopicStats) { ts.Scheduled++ }},
			{s.keys.reserved(shard), func(ts *TopicStats) { ts.Reserved++ }},
		} {
			ids, err := s.client.ZRange(ctx, set.key, 0, -1).Result()
			if err == nil {
				err = count(ids, set.inc)
			}
			if err != nil {
				return nil, fmt.Errorf("recount: %w", err)
			}
		}
		var waiting []string
		iter := s.client.HScan(ctx, s.keys.state(shard), 0, "", 1000).Iterator()
		for iter.Next(ctx) {
			id := iter.Val()
			if !iter.Next(ctx) {
				break
			}
			if strings.HasPrefix(iter.Val(), waitingLetter) {
				waiting = append(waiting, id)
			}
		}
		err = iter.Err()
		if err == nil {
			err = count(waiting, func(ts *TopicStats) { ts.Waiting++ })
		}
		if err != nil {
			return nil, fmt.Errorf("recount: %w", err)
		}
	}
	return out, nil
}

// readyCounts counts, by topic, the entries of a shard's ready list for
// queue that stand for a scheduled notification, each once, as the
// reservation script decides: its record is there, still of queue, with no
// state line since, and it is not in the due set too. The topic comes from
// the header it reads for that check.
func (s *Store) readyCounts(ctx context.Context, shard int, queue string) (map[string]int64, error) {
	ids, err := s.client.LRange(ctx, s.keys.ready(shard, queue), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	live := map[string]int64{}
	seen := map[string]bool{}
	for chunk := range slices.Chunk(ids, maxScriptBatch) {
		pipe := s.client.Pipeline()
		contents := pipe.HMGet(ctx, s.keys.job(shard), chunk...)
		states := pipe.HMGet(ctx, s.keys.state(shard), chunk...)
		// ZMSCORE through Do, whose answer keeps a missing member nil:
		// ZMScore's reads it as 0, a due time a notification can have.
		zargs := []any{"ZMSCORE", s.keys.due(shard, queue)}
		for _, id := range chunk {
			zargs = append(zargs, id)
		}
		scores := pipe.Do(ctx, zargs...)
		if _, err := s.exec(ctx, pipe); err != nil {
			return nil, err
		}
		inDue, err := scores.Slice()
		if err != nil || len(inDue) != len(chunk) {
			return nil, fmt.Errorf("ready list %s: ZMSCORE answered %d of %d (%v)", queue, len(inDue), len(chunk), err)
		}
		for i, id := range chunk {
			c, _ := contents.Val()[i].(string)
			h, _, err := parseHeader(c)
			if err == nil && queueOf(h.channel, h.topic) == queue && states.Val()[i] == nil && inDue[i] == nil && !seen[id] {
				seen[id] = true
				live[h.topic]++
			}
		}
	}
	return live, nil
}

// OldestDue returns, for each of queues, when its earliest notification
// that is due and not yet reserved (by a dispatcher, or by a pull worker)
// was due, or the zero time when none is: how far behind the queue's
// consumers are, which no attempt's lateness shows while nothing is
// attempted. It reads the head of every shard's due set and the first
// oldestDueLook entries of its ready list in one pipeline, then the
// records of those entries, whose due times the list does not hold, in
// another, and takes the first one still scheduled: an entry can be a hint
// gone stale, its notification cancelled or moved since it was listed.
func (s *Store) OldestDue(ctx context.Context, queues []string) (map[string]time.Time, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	type head struct {
		queue            string
		shard            int
		due              *redis.ZSliceCmd
		ready            *redis.StringSliceCmd
		contents, states *redis.SliceCmd
	}
	heads := make([]head, 0, len(queues)*s.keys.shards)
	pipe := s.client.Pipeline()
	for _, q := range queues {
		for shard := range s.keys.shards {
			heads = append(heads, head{queue: q, shard: shard,
				due: pipe.ZRangeWithScores(ctx, s.keys.due(shard, q), 0, 0), ready: pipe.LRange(ctx, s.keys.ready(shard, q), 0, oldestDueLook-1)})
		}
	}
	if _, err := s.exec(ctx, pipe); err != nil {
		return nil, fmt.Errorf("read the heads of the queues: %w", err)
	}
	// The records the ready lists' first entries name, in one more round
	// trip: their due times are in them.
	pipe = s.client.Pipeline()
	for i := range heads {
		if ids := heads[i].ready.Val(); len(ids) > 0 {
			heads[i].contents = pipe.HMGet(ctx, s.keys.job(heads[i].shard), ids...)
			heads[i].states = pipe.HMGet(ctx, s.keys.state(heads[i].shard), ids...)
		}
	}
	if _, err := s.exec(ctx, pipe); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the heads of the ready lists: %w", err)
	}
	now := s.Now()
	out := make(map[string]time.Time, len(queues))
	due := func(queue string, at time.Time) {
		if cur := out[queue]; !at.After(now) && (cur.IsZero() || at.Before(cur)) {
			out[queue] = at
		}
	}
	for _, h := range heads {
		if _, ok := out[h.queue]; !ok {
			out[h.queue] = time.Time{}
		}
		if zs := h.due.Val(); len(zs) > 0 {
			due(h.queue, fromMS(int64(zs[0].Score)))
		}
		for i, id := range h.ready.Val() {
			content, _ := h.contents.Val()[i].(string)
			state, _ := h.states.Val()[i].(string)
			n, _, err := decode(id, content, state)
			if err == nil && n.State == notify.StateScheduled && n.NextAttemptAt != nil && !n.NextAttemptAt.After(now) {
				due(h.queue, *n.NextAttemptAt)
				break
			}
		}
	}
	return out, nil
}

// oldestDueLook is how many entries of a ready list OldestDue reads past
// stale ones.
const oldestDueLook = 10
