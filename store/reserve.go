package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// MaxReserve bounds the notifications one Reserve call hands out.
const MaxReserve = maxScriptBatch

// Head is the due time of the earliest notification left in a shard's queue
// after a reservation; zero when the queue is empty.
type Head struct {
	Shard int
	Due   time.Time
}

// Reserve reserves up to limit due notifications of queue, earliest first
// within each shard, from shards (those the caller knows to have due work),
// in one pipeline. The limit is shared among the shards; when it is smaller
// than their number, successive calls start at a different shard, so that
// none starves. Each notification comes back reserved with a Receipt and a
// Deadline (now + its ttr); nothing due later than now is ever returned.
// The heads tell the caller when each asked shard has work next: a head
// already due means the shard had more than its share.
//
// A reserved notification whose content cannot be decoded is quarantined
// (see Quarantined) and left out, so that it cannot stop the queue.
func (s *Store) Reserve(ctx context.Context, queue string, shards []int, limit int) ([]*notify.Notification, []Head, error) {
	if len(shards) == 0 || limit < 1 {
		return nil, nil, nil
	}
	limit = min(limit, MaxReserve)
	now := ms(s.Now())
	receipt := receiptPrefix()
	quotas := splitQuotas(shards, limit, int(s.rotate.Add(1)))
	groups := scriptGroups(s.oneNode, quotas, func(q quota) int { return q.max })
	calls := make([]*scriptCall, len(groups))
	k := s.keys
	for i, g := range groups {
		keyList := make([]string, 1, 1+4*len(g))
		keyList[0] = k.stats(s.counters(g[0].shard))
		args := make([]any, 1, 1+2*len(g))
		args[0] = now
		for _, q := range g {
			keyList = append(keyList, k.due(q.shard, queue), k.reserved(q.shard), k.job(q.shard), k.state(q.shard))
			args = append(args, q.max, receipt+strconv.Itoa(q.shard))
		}
		calls[i] = &scriptCall{script: reserveScript, keys: keyList, args: args}
	}
	if err := s.runScripts(ctx, calls); err != nil {
		return nil, nil, fmt.Errorf("reserve %s: %w", queue, err)
	}
	var out []*notify.Notification
	heads := make([]Head, 0, len(quotas))
	var firstErr error
	for i, c := range calls {
		v, err := c.cmd.Result()
		var replies []any
		if err == nil {
			replies, err = replyList(v, len(groups[i]))
		}
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		for j, q := range groups[i] {
			l, err := replyList(replies[j], 2)
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			h := Head{Shard: q.shard}
			if v, err := strconv.ParseInt(replyString(l[0]), 10, 64); err == nil {
				h.Due = fromMS(v)
			}
			heads = append(heads, h)
			items, _ := l[1].([]any)
			for x := 0; x+2 < len(items); x += 3 {
				id := replyString(items[x])
				n, _, err := decode(id, replyString(items[x+1]), replyString(items[x+2]), -1)
				if err != nil {
					s.quarantine(ctx, q.shard, id, replyString(items[x+1]), err)
					continue
				}
				out = append(out, n)
			}
		}
	}
	// Reserved notifications are returned even when another shard failed:
	// dropping them would strand them until their ttr.
	if firstErr != nil && len(out) == 0 {
		return nil, nil, fmt.Errorf("reserve %s: %w", queue, firstErr)
	}
	return out, heads, nil
}

// quota is one shard's share of a reservation.
type quota struct{ shard, max int }

// splitQuotas shares n reservations among shards; when there are fewer than
// shards, a rotating start keeps any shard from starving.
func splitQuotas(shards []int, n, rotate int) []quota {
	if n < len(shards) {
		out := make([]quota, n)
		for i := range out {
			out[i] = quota{shard: shards[(rotate+i)%len(shards)], max: 1}
		}
		return out
	}
	out := make([]quota, len(shards))
	for i, s := range shards {
		q := n / len(shards)
		if i < n%len(shards) {
			q++
		}
		out[i] = quota{shard: s, max: q}
	}
	return out
}

// scriptGroups cuts per-shard parts of a batch into script calls: each
// part alone on a Cluster, where a script touches one slot; on a single
// Redis as many parts together as maxScriptBatch items allow, so that a
// batch costs one script, not one per shard.
func scriptGroups[T any](oneNode bool, parts []T, size func(T) int) [][]T {
	var out [][]T
	n := 0
	for _, p := range parts {
		if len(out) == 0 || !oneNode || n+size(p) > maxScriptBatch {
			out, n = append(out, nil), 0
		}
		out[len(out)-1] = append(out[len(out)-1], p)
		n += size(p)
	}
	return out
}

// receiptPrefix is unique to one Reserve call; with the shard appended it
// is the receipt of every notification the call reserves in that shard,
// each named by its id.
func receiptPrefix() string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "."
}

// Heads returns, for every shard, when the earliest notification of queue
// is due (Due zero when the shard's queue is empty), in one pipeline. Pull
// consumers, which keep no state between requests, use it to reserve only
// from shards with due work and to sleep until the next due time.
func (s *Store) Heads(ctx context.Context, queue string) ([]Head, error) {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.ZSliceCmd, s.keys.shards)
	for shard := range cmds {
		cmds[shard] = pipe.ZRangeWithScores(ctx, s.keys.due(shard, queue), 0, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read heads of %s: %w", queue, err)
	}
	heads := make([]Head, len(cmds))
	for shard, c := range cmds {
		heads[shard].Shard = shard
		if zs := c.Val(); len(zs) > 0 {
			heads[shard].Due = fromMS(int64(zs[0].Score))
		}
	}
	return heads, nil
}

// Finish ends one reserved attempt.
type Finish struct {
	// Notification is the reserved notification: its ID, Receipt, Channel,
	// Topic and NextAttemptAt (the due time of this attempt) are used.
	Notification *notify.Notification
	Action       notify.Action
	// NextAt is when the next attempt is due, for notify.ActionRetry and
	// notify.ActionRelease; it is rounded up to the millisecond.
	NextAt time.Time
	// Attempt is appended to the history. An attempt with no Outcome is
	// not recorded: a release of a notification whose attempt never
	// started (a dispatcher giving back what it reserved ahead).
	Attempt notify.Attempt
}

// Finish ends a batch of attempts in one pipeline, one script per shard.
// The result holds one error per item: nil, or notify.ErrStaleReceipt when
// the receipt no longer holds the reservation (it expired and was taken
// over, or the notification was cancelled). The returned error is for a
// failure to reach Redis; the caller may retry the whole batch, as a finish
// that already applied answers ErrStaleReceipt the second time. With
// Config.WaitReplicas, notify.ErrNotReplicated comes with the per-item
// results: the finishes applied on the master, unconfirmed by replicas.
func (s *Store) Finish(ctx context.Context, items []Finish) ([]error, error) {
	errs := make([]error, len(items))
	byShard := map[int][]int{}
	for i, f := range items {
		if err := checkFinish(&f); err != nil {
			errs[i] = err
			continue
		}
		shard := s.keys.shardFor(f.Notification)
		byShard[shard] = append(byShard[shard], i)
	}
	now := s.Now()
	minute := now.Unix() / 60
	var shards []shardItems
	for _, shard := range sortedKeys(byShard) {
		for chunk := range slices.Chunk(byShard[shard], maxScriptBatch) {
			shards = append(shards, shardItems{shard: shard, idx: chunk})
		}
	}
	batches := scriptGroups(s.oneNode, shards, func(g shardItems) int { return len(g.idx) })
	calls := make([]*scriptCall, len(batches))
	order := make([][]int, len(batches))
	for c, b := range batches {
		calls[c] = s.finishCall(b, items, now, minute)
		for _, g := range b {
			order[c] = append(order[c], g.idx...)
		}
	}
	if len(calls) == 0 {
		return errs, nil
	}
	// Writes a WAIT found not replicated did apply on the master: their
	// codes are read, and the call reports notify.ErrNotReplicated.
	var failed error
	if err := s.runAcked(ctx, calls); err != nil {
		s.forgetActivityExpiry()
		if !errors.Is(err, notify.ErrNotReplicated) {
			return nil, fmt.Errorf("finish: %w", err)
		}
		failed = err
	}
	for c, call := range calls {
		codes, _, err := replyCodes(call, len(order[c]))
		if err != nil {
			s.forgetActivityExpiry()
		}
		for j, i := range order[c] {
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("finish: %w", err)
				failed = errs[i]
			case codes[j] == codeOK:
			case codes[j] == codeStale:
				errs[i] = notify.ErrStaleReceipt
			default:
				errs[i] = fmt.Errorf("finish: unexpected code %d", codes[j])
			}
		}
	}
	// A shard that could not be reached fails the whole call so the caller
	// retries; items that did apply answer ErrStaleReceipt next time.
	return errs, failed
}

func checkFinish(f *Finish) error {
	switch f.Action {
	case notify.ActionAck, notify.ActionDead:
	case notify.ActionRetry, notify.ActionRelease:
		if err := checkDue(f.NextAt); err != nil {
			return fmt.Errorf("finish %s: next attempt %w", f.Notification.ID, err)
		}
	default:
		return fmt.Errorf("finish %s: unknown action %q", f.Notification.ID, f.Action)
	}
	return nil
}

// shardItems are the indexes of the items of one shard in a call.
type shardItems struct {
	shard int
	idx   []int
}

// finishCall builds the script call that finishes the items of groups.
func (s *Store) finishCall(groups []shardItems, items []Finish, now time.Time, minute int64) *scriptCall {
	k := s.keys
	counter := s.counters(groups[0].shard)
	var dues, deads keyIndex
	total := 0
	keyList := []string{k.stats(counter), k.activity(counter, minute)}
	args := make([]any, 7, 7+2*len(groups))
	for _, g := range groups {
		keyList = append(keyList, k.state(g.shard), k.reserved(g.shard), k.hist(g.shard), k.finished(g.shard),
			k.deadAll(g.shard), k.order(g.shard), k.link(g.shard))
		args = append(args, g.shard, len(g.idx))
		total += len(g.idx)
	}
	args = slices.Grow(args, 12*total)
	for _, g := range groups {
		for _, i := range g.idx {
			f := items[i]
			n := f.Notification
			q, t := 0, 0
			next := ""
			switch f.Action {
			case notify.ActionRetry, notify.ActionRelease:
				q = dues.of(k.due(g.shard, queueOf(n.Channel, n.Topic)))
				next = strconv.FormatInt(dueMS(f.NextAt), 10)
			case notify.ActionDead:
				t = deads.of(k.dead(g.shard, n.Topic))
			}
			var entry []byte
			if f.Attempt.Outcome != "" {
				att := f.Attempt
				att.Error = notify.CutError(att.Error)
				entry, _ = json.Marshal(att)
			}
			bucket := ""
			if n.NextAttemptAt != nil && entry != nil && f.Action != notify.ActionRelease && f.Attempt.Outcome != notify.OutcomeTTRExpired {
				bucket = strconv.Itoa(latencyBucket(f.Attempt.StartedAt.Sub(*n.NextAttemptAt)))
			}
			push, pull := 0, 0
			if n.OrderKey != "" {
				push, pull = dues.of(k.due(g.shard, QueuePush)), dues.of(k.due(g.shard, PullQueue(n.Topic)))
			}
			args = append(args, n.ID, n.Receipt, string(f.Action), next, q, t, n.Topic, entry, bucket, n.OrderKey, push, pull)
		}
	}
	args[0], args[1], args[2], args[3] = ms(now), s.retentionMS(), k.wake(), len(groups)
	args[4], args[5], args[6] = len(dues), len(deads), s.activityExpiry(counter, minute)
	keyList = append(keyList, dues...)
	keyList = append(keyList, deads...)
	return &scriptCall{script: finishScript, keys: keyList, args: args}
}

// activityExpiry returns the expiry to give shard's activity hash of
// minute: its retention the first time this store writes it, 0 (leave it)
// after that, which saves an EXPIRE per finish.
func (s *Store) activityExpiry(shard int, minute int64) int {
	s.actMu.Lock()
	defer s.actMu.Unlock()
	if s.actMinute == nil {
		s.actMinute = map[int]int64{}
	}
	if s.actMinute[shard] == minute {
		return 0
	}
	s.actMinute[shard] = minute
	return int(ActivityRetention / time.Second)
}

// forgetActivityExpiry makes the next finish of every shard set its
// activity hash's expiry again, after a failed call may have left it unset.
func (s *Store) forgetActivityExpiry() {
	s.actMu.Lock()
	defer s.actMu.Unlock()
	clear(s.actMinute)
}
