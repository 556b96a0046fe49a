package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// Expired returns up to limit reserved notifications per shard whose
// deadline is before now-grace, with their current receipt: their
// attempt counts as failed (ttr expired), and the caller finishes them with
// Finish. grace absorbs clock skew between dispatchers. One whose content
// cannot be decoded is quarantined instead of returned.
//
// One reserved ahead of a dispatcher's workers whose start its holder never
// recorded (Start) is given back uncounted instead, due when it was: no
// attempt of it was made, and its dispatcher ended without giving it back
// (killed outright).
func (s *Store) Expired(ctx context.Context, grace time.Duration, limit int) ([]*notify.Notification, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	// This Store's own starts not written yet (Redis was away) are written
	// first, so that its reaper does not give back an attempt it made.
	ownPending := s.Started(ctx) != nil
	cutoff := ms(s.Now().Add(-grace))
	pipe := s.client.Pipeline()
	cmds := make([]*redis.StringSliceCmd, s.keys.shards)
	for shard := range cmds {
		cmds[shard] = pipe.ZRangeByScore(ctx, s.keys.reserved(shard),
			&redis.ZRangeBy{Min: "-inf", Max: "(" + strconv.FormatInt(cutoff, 10), Count: int64(limit)})
	}
	// A shard that does not answer (its Cluster master down) is left for
	// a later reap, and the others reaped meanwhile: an error only when
	// none answers.
	_, err := s.exec(ctx, pipe)
	answered := 0
	type read struct {
		shard             int
		ids               []string
		contents, records *redis.SliceCmd
	}
	var reads []read
	pipe = s.client.Pipeline()
	for shard, c := range cmds {
		if c.Err() != nil {
			continue
		}
		answered++
		if ids := c.Val(); len(ids) > 0 {
			reads = append(reads, read{shard, ids,
				pipe.HMGet(ctx, s.keys.job(shard), ids...), pipe.HMGet(ctx, s.keys.state(shard), ids...)})
		}
	}
	if answered == 0 && err != nil {
		return nil, fmt.Errorf("find expired reservations: %w", err)
	}
	if len(reads) == 0 {
		return nil, nil
	}
	_, err = s.exec(ctx, pipe)
	var out []*notify.Notification
	answered = 0
	for _, r := range reads {
		if r.contents.Err() != nil || r.records.Err() != nil {
			continue
		}
		answered++
		for i, id := range r.ids {
			content, _ := r.contents.Val()[i].(string)
			state, _ := r.records.Val()[i].(string)
			n, _, err := decode(id, content, state)
			switch {
			case err == nil && content != "" && state == "":
				// Reserving writes a state line: without one the record
				// reads as scheduled, and would stay in the reserved set,
				// first at every reap, and never be due again.
				err = errors.New("reserved, but its state line is missing")
			case err == nil && n.State == notify.StateReserved && n.Deadline == nil:
				err = errors.New("reserved, but without a deadline")
			}
			if err != nil {
				s.quarantine(ctx, r.shard, id, content, state, err)
				continue
			}
			// Between the two reads the reservation may have been finished
			// and the notification reserved again: that reservation is
			// someone's attempt under way, not an expired one.
			if n.State == notify.StateReserved && ms(*n.Deadline) < cutoff {
				out = append(out, n)
			}
		}
	}
	if answered == 0 && err != nil {
		return nil, fmt.Errorf("read expired reservations: %w", err)
	}
	unstarted, out := s.unstarted(ctx, out, ownPending)
	if len(unstarted) == 0 {
		return out, nil
	}
	errs, err := s.GiveBackUnstarted(ctx, unstarted)
	if err != nil {
		return nil, err
	}
	given := 0
	for _, e := range errs {
		if e == nil {
			given++
		}
	}
	if given > 0 {
		s.cfg.Logger.WarnContext(ctx, "store: gave back, uncounted, notifications a dispatcher had reserved ahead and never started; it ended without giving them back (killed?)",
			"notifications", given)
	}
	return out, nil
}

// quarantine moves a reserved notification that cannot be decoded aside,
// so that it stops neither reservations nor reaping, logs it and counts it
// (see Quarantined). An operator finds it in the shard's quarantine hash
// with the reason, for Config.Retention after the last one moved there:
// it holds the payload, which is a customer's data. content and state are
// what was read: a record changed since is left for the next reap, and a
// reservation whose record is gone is dropped.
func (s *Store) quarantine(ctx context.Context, shard int, id, content, state string, why error) {
	k := &s.keys
	// The topic, when the header survived; the script reads it more
	// leniently than parseHeader, and says so when it finds another.
	h, _, _ := parseHeader(content)
	topic := h.topic
	var v any
	var err error
	for range 2 {
		v, err = s.runScript(ctx, quarantineScript,
			[]string{k.job(shard), k.state(shard), k.quarantine(shard), k.reserved(shard), k.stats(shard),
				k.order(shard), k.link(shard), k.due(shard, QueuePush), k.due(shard, PullQueue(topic)), k.hist(shard)},
			id, why.Error(), ms(s.Now()), k.wake(), shard, s.retentionMS(), content, state, topic)
		reply, _ := v.([]any)
		if err != nil || len(reply) != 2 {
			break
		}
		topic, _ = reply[1].(string)
	}
	reply, _ := v.([]any)
	var code int64
	if len(reply) > 0 {
		code, _ = reply[0].(int64)
	}
	switch {
	case err != nil || code == 3:
		s.cfg.Logger.ErrorContext(ctx, "store: could not quarantine an undecodable notification", "id", id, "reason", why, "error", err)
	case code == 1:
		// One of an order key that lives away from its id's shard leaves a
		// stub there, which leads nowhere now.
		s.dropStubs(ctx, shard, []string{id})
		s.quarantined.Add(1)
		s.cfg.Logger.ErrorContext(ctx, "store: quarantined an undecodable notification", "id", id, "reason", why,
			"key", k.quarantine(shard))
	case code == 2:
		s.cfg.Logger.WarnContext(ctx, "store: dropped a reservation whose record is gone", "id", id, "key", k.reserved(shard))
	}
}

// Quarantined returns how many notifications this Store has moved to
// quarantine because their record could not be decoded.
func (s *Store) Quarantined() int64 { return s.quarantined.Load() }

// Sweep deletes about limit records per shard whose retention has passed,
// and up to limit dead notifications per shard dead longer than
// Config.DeadRetention, and returns how many it deleted and whether any
// shard may hold more that have: the count alone cannot tell, as records
// replaced since they were finished are kept. It records the namespace's
// shard count again where it is missing.
func (s *Store) Sweep(ctx context.Context, limit int) (deleted int, more bool, err error) {
	if err := s.open(ctx); err != nil {
		return 0, false, err
	}
	limit = min(max(limit, 1), maxScriptBatch)
	now := ms(s.Now())
	calls := make([]*scriptCall, s.keys.shards)
	k := &s.keys
	for shard := range calls {
		calls[shard] = &scriptCall{
			script: sweepScript,
			keys:   []string{k.finished(shard), k.job(shard), k.state(shard), k.hist(shard)},
			args:   []any{now, limit},
		}
	}
	if err := s.runScripts(ctx, calls); err != nil {
		return 0, false, fmt.Errorf("sweep: %w", err)
	}
	// Redis may have restarted without its data, the shard count with it,
	// while this store kept writing with the count it read: recorded again,
	// it is what the next store to open the namespace reads. A full Redis
	// refuses HSETNX even where the count is there: that fails nothing,
	// as the sweep is what frees memory, and a later sweep records it.
	var firstErr error
	if err := s.client.HSetNX(ctx, k.meta(), "shards", k.shards).Err(); !refusedFull(err) {
		firstErr = err
	}
	for shard, c := range calls {
		n, left, keyed, err := replySwept(c.cmd.Result())
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			continue
		}
		deleted += n
		more = more || left
		s.dropStubs(ctx, shard, keyed)
	}
	n, left, err := s.sweepDead(ctx, limit)
	deleted += n
	more = more || left
	firstErr = errors.Join(firstErr, err)
	if firstErr != nil {
		return deleted, more, fmt.Errorf("sweep: %w", firstErr)
	}
	return deleted, more, nil
}

// sweepDead deletes up to limit dead notifications per shard that died
// longer than Config.DeadRetention ago, with the purge script: it reads the
// oldest entries of each shard's dead-letter set, their topics from their
// records' headers, and deletes them by topic, each only if it is still
// dead from that time. An entry whose record is gone is deleted alone. It
// says more may be due where a shard's batch was full and deleted some: a
// batch that deleted none would come back the same.
func (s *Store) sweepDead(ctx context.Context, limit int) (deleted int, more bool, err error) {
	if s.cfg.DeadRetention < 0 {
		return 0, false, nil
	}
	k := &s.keys
	upto := strconv.FormatInt(ms(s.Now())-s.cfg.DeadRetention.Milliseconds(), 10)
	pipe := s.client.Pipeline()
	cmds := make([]*redis.StringSliceCmd, k.shards)
	for shard := range cmds {
		cmds[shard] = pipe.ZRangeByScore(ctx, k.deadAll(shard), &redis.ZRangeBy{Min: "-inf", Max: upto, Count: int64(limit)})
	}
	if _, err := s.exec(ctx, pipe); err != nil {
		return 0, false, fmt.Errorf("find expired dead letters: %w", err)
	}
	var at []located
	for shard, c := range cmds {
		for _, id := range c.Val() {
			at = append(at, located{id: id, shard: shard})
		}
	}
	if len(at) == 0 {
		return 0, false, nil
	}
	found, err := s.locate(ctx, at)
	if err != nil {
		return 0, false, fmt.Errorf("read expired dead letters: %w", err)
	}
	// A dead notification's record lives in the shard of its entry: one
	// found elsewhere, through a stub, is another's, and the entry's
	// record is gone.
	type entry struct {
		id    string
		shard int
	}
	topics := map[entry]string{}
	for _, l := range found {
		topics[entry{l.id, l.shard}] = l.topic
	}
	calls := make([]*scriptCall, 0, k.shards)
	var shards []int
	for shard, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		byTopic := map[string][]string{}
		var orphans []string
		for _, id := range c.Val() {
			if topic, ok := topics[entry{id, shard}]; ok {
				byTopic[topic] = append(byTopic[topic], id)
			} else {
				orphans = append(orphans, id)
			}
		}
		calls = append(calls, s.purgeCall(shard, upto, byTopic, orphans))
		shards = append(shards, shard)
	}
	if err := s.runScripts(ctx, calls); err != nil {
		return 0, false, fmt.Errorf("delete expired dead letters: %w", err)
	}
	var firstErr error
	for i, c := range calls {
		v, err := c.cmd.Result()
		var n int
		var keyed []string
		if err == nil {
			n, keyed, err = replyDeleted(v)
		}
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			continue
		}
		deleted += n
		more = more || (n > 0 && len(cmds[shards[i]].Val()) == limit)
		s.dropStubs(ctx, shards[i], keyed)
	}
	if firstErr != nil {
		return deleted, more, fmt.Errorf("delete expired dead letters: %w", firstErr)
	}
	return deleted, more, nil
}

// replySwept reads a sweep script's reply: how many it deleted, whether due
// entries may be left, and the deleted ids with an order key.
func replySwept(v any, err error) (int, bool, []string, error) {
	if err != nil {
		return 0, false, nil, err
	}
	l, err := replyList(v, 2)
	if err != nil {
		return 0, false, nil, err
	}
	more, err := replyInt(l[0])
	if err != nil {
		return 0, false, nil, err
	}
	n, keyed, err := replyDeleted(l[1:])
	return n, more == 1, keyed, err
}
