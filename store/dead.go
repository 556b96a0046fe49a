package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// deadBatch bounds the ids one replay or purge script moves.
const deadBatch = 500

// DeadFilter selects dead notifications: by IDs, or by Topic and the time
// they died (Since inclusive, Until exclusive; zero means unbounded).
type DeadFilter struct {
	IDs   []string
	Topic string
	Since time.Time
	Until time.Time
}

func (f *DeadFilter) validate() error {
	if len(f.IDs) == 0 && f.Topic == "" {
		return notify.Errorf("topic", "give ids, or a topic with an optional since and until")
	}
	if len(f.IDs) > 0 && f.Topic != "" {
		return notify.Errorf("ids", "give ids or a topic, not both")
	}
	if f.Topic != "" && !notify.ValidTopic(f.Topic) {
		return notify.Errorf("topic", "must match [a-z0-9._-]{1,64}")
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return notify.Errorf("until", "must be after since")
	}
	return nil
}

// deadCursor is where a dead listing stopped: the last returned entry.
type deadCursor struct {
	Topic string `json:"t"`
	Shard int    `json:"s"`
	Score int64  `json:"c"`
	ID    string `json:"i"`
}

// ListDead returns up to limit dead notifications (all topics when topic is
// empty), ordered by topic, shard and time of death, and the cursor of the
// next page ("" when there is none). Pass "" to start.
func (s *Store) ListDead(ctx context.Context, topic string, limit int, cursor string) ([]*notify.Notification, string, error) {
	limit = min(max(limit, 1), MaxBatch)
	var cur *deadCursor
	if cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		cur = &deadCursor{}
		if err != nil || json.Unmarshal(b, cur) != nil {
			return nil, "", notify.Errorf("cursor", "is not a cursor this server returned")
		}
	}
	topics, err := s.deadTopics(ctx, topic)
	if err != nil {
		return nil, "", err
	}
	type entry struct {
		shard int
		z     redis.Z
	}
	var page []entry
	var last deadCursor
	more := false
scan:
	for _, t := range topics {
		if cur != nil && t < cur.Topic {
			continue
		}
		for shard := 0; shard < s.keys.shards; shard++ {
			if cur != nil && t == cur.Topic && shard < cur.Shard {
				continue
			}
			from := "-inf"
			resume := cur != nil && t == cur.Topic && shard == cur.Shard
			if resume {
				from = strconv.FormatInt(cur.Score, 10)
			}
			for off := int64(0); ; {
				want := int64(limit - len(page) + 1)
				zs, err := s.client.ZRangeByScoreWithScores(ctx, s.keys.dead(shard, t),
					&redis.ZRangeBy{Min: from, Max: "+inf", Offset: off, Count: want}).Result()
				if err != nil {
					return nil, "", fmt.Errorf("list dead: %w", err)
				}
				for _, z := range zs {
					id := z.Member.(string)
					if resume && int64(z.Score) == cur.Score && id <= cur.ID {
						continue
					}
					if len(page) == limit {
						more = true
						break scan
					}
					page = append(page, entry{shard, z})
					last = deadCursor{Topic: t, Shard: shard, Score: int64(z.Score), ID: id}
				}
				if int64(len(zs)) < want {
					break
				}
				off += want
			}
		}
	}
	pipe := s.client.Pipeline()
	cmds := make([][3]*redis.StringCmd, len(page))
	for i, e := range page {
		id := e.z.Member.(string)
		cmds[i] = [3]*redis.StringCmd{
			pipe.HGet(ctx, s.keys.meta(e.shard), id),
			pipe.HGet(ctx, s.keys.payload(e.shard), id),
			pipe.HGet(ctx, s.keys.hist(e.shard), id),
		}
	}
	if len(page) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, "", fmt.Errorf("list dead: %w", err)
		}
	}
	out := make([]*notify.Notification, 0, len(page))
	for _, c := range cmds {
		if c[0].Err() != nil {
			continue
		}
		n, err := decodeNotification(c[0].Val(), c[1].Val(), c[2].Val())
		if err != nil {
			return nil, "", err
		}
		out = append(out, n)
	}
	next := ""
	if more {
		b, _ := json.Marshal(last)
		next = base64.RawURLEncoding.EncodeToString(b)
	}
	return out, next, nil
}

// deadTopics returns [topic], or every topic seen in any shard, sorted.
func (s *Store) deadTopics(ctx context.Context, topic string) ([]string, error) {
	if topic != "" {
		return []string{topic}, nil
	}
	return s.Topics(ctx)
}

// Topics returns every topic that has ever had a notification, sorted.
func (s *Store) Topics(ctx context.Context) ([]string, error) {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.StringSliceCmd, s.keys.shards)
	for shard := range cmds {
		cmds[shard] = pipe.SMembers(ctx, s.keys.topics(shard))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	seen := map[string]bool{}
	for _, c := range cmds {
		for _, t := range c.Val() {
			seen[t] = true
		}
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// DeadOptions tune Replay and Purge.
type DeadOptions struct {
	// Reset, for Replay, runs the whole backoff array again; without it each
	// notification gets one more attempt.
	Reset bool
	// DryRun changes nothing: only what matches is counted.
	DryRun bool
	// Progress, when set, is called after each batch with the running
	// totals, so a long replay can show how far it got.
	Progress func(matched, done int)
}

// Replay moves the dead notifications f selects back to their queue, due
// now, and returns how many matched and how many it moved.
func (s *Store) Replay(ctx context.Context, f DeadFilter, opts DeadOptions) (matched, replayed int, err error) {
	flag := "0"
	if opts.Reset {
		flag = "1"
	}
	now := ms(s.Now())
	return s.eachDead(ctx, f, opts, func(shard int, topic string) *scriptCall {
		k := s.keys
		return &scriptCall{
			script: replayScript,
			keys:   []string{k.meta(shard), k.dead(shard, topic), k.due(shard, QueuePush), k.due(shard, PullQueue(topic)), k.stats(shard)},
			args:   []any{now, flag, k.wake(), shard},
		}
	})
}

// Purge deletes the dead notifications f selects, for good, and returns
// how many matched and how many it deleted.
func (s *Store) Purge(ctx context.Context, f DeadFilter, opts DeadOptions) (matched, purged int, err error) {
	return s.eachDead(ctx, f, opts, func(shard int, topic string) *scriptCall {
		k := s.keys
		return &scriptCall{
			script: purgeScript,
			keys:   []string{k.meta(shard), k.payload(shard), k.hist(shard), k.dead(shard, topic), k.stats(shard)},
		}
	})
}

// eachDead finds the dead notifications f selects in bounded batches and runs
// the script newCall builds on each batch (its ids appended to the args).
func (s *Store) eachDead(ctx context.Context, f DeadFilter, opts DeadOptions, newCall func(shard int, topic string) *scriptCall) (matched, done int, err error) {
	if err := f.validate(); err != nil {
		return 0, 0, err
	}
	dryRun := opts.DryRun
	run := func(shard int, topic string, ids []string) error {
		matched += len(ids)
		if opts.Progress != nil && len(ids) > 0 {
			defer func() { opts.Progress(matched, done) }()
		}
		if dryRun || len(ids) == 0 {
			return nil
		}
		c := newCall(shard, topic)
		for _, id := range ids {
			c.args = append(c.args, id)
		}
		v, err := s.runScript(ctx, c.script, c.keys, c.args...)
		if err != nil {
			return err
		}
		n, err := replyInt(v)
		done += int(n)
		return err
	}
	if len(f.IDs) > 0 {
		groups, err := s.deadByID(ctx, f.IDs)
		if err != nil {
			return 0, 0, err
		}
		for g, ids := range groups {
			for chunk := range slices.Chunk(ids, deadBatch) {
				if err := run(g.shard, g.topic, chunk); err != nil {
					return matched, done, fmt.Errorf("dead-letter batch: %w", err)
				}
			}
		}
		return matched, done, nil
	}
	minScore, maxScore := "-inf", strconv.FormatInt(ms(s.Now()), 10)
	if !f.Since.IsZero() {
		minScore = strconv.FormatInt(ms(f.Since), 10)
	}
	if !f.Until.IsZero() {
		// Until is exclusive; a replayed notification that dies again during
		// the run gets a later score and is not picked up twice, because an
		// open range is closed at the start time.
		maxScore = "(" + strconv.FormatInt(ms(f.Until), 10)
	}
	for shard := 0; shard < s.keys.shards; shard++ {
		key := s.keys.dead(shard, f.Topic)
		for off := int64(0); ; {
			ids, err := s.client.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: minScore, Max: maxScore, Offset: off, Count: deadBatch}).Result()
			if err != nil {
				return matched, done, fmt.Errorf("dead-letter batch: %w", err)
			}
			if err := run(shard, f.Topic, ids); err != nil {
				return matched, done, fmt.Errorf("dead-letter batch: %w", err)
			}
			if len(ids) < deadBatch {
				break
			}
			if dryRun {
				off += deadBatch // nothing moved, so page on
			}
		}
	}
	return matched, done, nil
}

type shardTopic struct {
	shard int
	topic string
}

// deadByID reads the records of ids and groups the dead ones by shard and
// topic, the keys their scripts need.
func (s *Store) deadByID(ctx context.Context, ids []string) (map[shardTopic][]string, error) {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, s.keys.meta(s.keys.shardOf(id)), id)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read dead notifications: %w", err)
	}
	groups := map[shardTopic][]string{}
	for i, c := range cmds {
		if c.Err() != nil {
			continue
		}
		var r record
		if json.Unmarshal([]byte(c.Val()), &r) != nil || r.State != notify.StateDead {
			continue
		}
		g := shardTopic{s.keys.shardOf(ids[i]), r.Topic}
		groups[g] = append(groups[g], ids[i])
	}
	return groups, nil
}

// TopicStats counts one topic's notifications.
type TopicStats struct {
	Scheduled           int64 `json:"scheduled"`
	Reserved            int64 `json:"reserved"`
	Dead                int64 `json:"dead"`
	SucceededTotal      int64 `json:"succeeded_total"`
	FailedAttemptsTotal int64 `json:"failed_attempts_total"`
}

// Stats returns counts per topic, summed over the shards in one pipeline.
func (s *Store) Stats(ctx context.Context) (map[string]TopicStats, error) {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, s.keys.shards)
	for shard := range cmds {
		cmds[shard] = pipe.HGetAll(ctx, s.keys.stats(shard))
	}
	if _, err := pipe.Exec(ctx); err != nil {
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
