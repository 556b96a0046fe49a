package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// MaxReserve bounds the notifications one Reserve call hands out.
const MaxReserve = 1000

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
func (s *Store) Reserve(ctx context.Context, queue string, shards []int, limit int) ([]*notify.Notification, []Head, error) {
	if len(shards) == 0 || limit < 1 {
		return nil, nil, nil
	}
	limit = min(limit, MaxReserve)
	now := ms(s.Now())
	prefix := receiptPrefix()
	quotas := splitQuotas(shards, limit, int(s.rotate.Add(1)))
	calls := make([]*scriptCall, len(quotas))
	for i, q := range quotas {
		k := s.keys
		calls[i] = &scriptCall{
			script: reserveScript,
			keys:   []string{k.due(q.shard, queue), k.reserved(q.shard), k.meta(q.shard), k.payload(q.shard), k.stats(q.shard)},
			args:   []any{now, q.max, prefix + strconv.Itoa(q.shard)},
		}
	}
	if err := s.runScripts(ctx, calls); err != nil {
		return nil, nil, fmt.Errorf("reserve %s: %w", queue, err)
	}
	var out []*notify.Notification
	heads := make([]Head, 0, len(quotas))
	var firstErr error
	for i, c := range calls {
		l, err := s.listReply(c)
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		items, _ := l[0].([]any)
		h := Head{Shard: quotas[i].shard}
		for j := 0; j+1 < len(items); j += 2 {
			n, err := decodeNotification(replyString(items[j]), replyString(items[j+1]), "")
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			out = append(out, n)
		}
		if v, err := strconv.ParseInt(replyString(l[1]), 10, 64); err == nil {
			h.Due = fromMS(v)
		}
		heads = append(heads, h)
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

func (s *Store) listReply(c *scriptCall) ([]any, error) {
	v, err := c.cmd.Result()
	if err != nil {
		return nil, err
	}
	return replyList(v, 2)
}

// receiptPrefix is unique to one Reserve call; the script appends the
// shard and the item's position.
func receiptPrefix() string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "."
}

// Finish ends one reserved attempt.
type Finish struct {
	// Notification is the reserved notification: its ID, Receipt, Channel
	// and Topic are used.
	Notification *notify.Notification
	Action       notify.Action
	// NextAt is when the next attempt is due, for ActionRetry and
	// ActionRelease.
	NextAt time.Time
	// Attempt is appended to the history.
	Attempt notify.Attempt
}

// Finish ends a batch of attempts in one pipeline, one script per shard.
// The result holds one error per item: nil, notify.ErrStaleReceipt when the
// receipt no longer holds the reservation (it expired and was taken over, or
// the notification was cancelled), or notify.ErrNotFound. The returned error
// is for a failure to reach Redis; the caller may retry the whole batch, as a
// finish that already applied answers ErrStaleReceipt the second time.
func (s *Store) Finish(ctx context.Context, items []Finish) ([]error, error) {
	byShard := map[int][]int{}
	for i, f := range items {
		shard := s.keys.shardOf(f.Notification.ID)
		byShard[shard] = append(byShard[shard], i)
	}
	now := ms(s.Now())
	calls := make([]*scriptCall, 0, len(byShard))
	order := make([][]int, 0, len(byShard))
	k := s.keys
	for shard, idx := range byShard {
		keys := []string{k.meta(shard), k.hist(shard), k.reserved(shard), k.finished(shard), k.stats(shard)}
		args := []any{now, s.retentionMS(), k.wake(), shard}
		for _, i := range idx {
			f := items[i]
			n := f.Notification
			keys = append(keys, k.due(shard, queueOf(n.Channel, n.Topic)), k.dead(shard, n.Topic))
			att := f.Attempt
			att.Error = notify.CutError(att.Error)
			attJSON, _ := json.Marshal(att)
			args = append(args, n.ID, n.Receipt, string(f.Action), dueMS(f.NextAt), string(attJSON))
		}
		calls = append(calls, &scriptCall{script: finishScript, keys: keys, args: args})
		order = append(order, idx)
	}
	if err := s.runScripts(ctx, calls); err != nil {
		return nil, fmt.Errorf("finish: %w", err)
	}
	errs := make([]error, len(items))
	var failed error
	for c, call := range calls {
		v, err := call.cmd.Result()
		var codes []any
		if err == nil {
			codes, err = replyList(v, len(order[c]))
		}
		for j, i := range order[c] {
			if err != nil {
				errs[i] = fmt.Errorf("finish: %w", err)
				failed = errs[i]
				continue
			}
			switch code, _ := replyInt(codes[j]); code {
			case codeOK:
			case codeStale:
				errs[i] = notify.ErrStaleReceipt
			case codeNotFound:
				errs[i] = notify.ErrNotFound
			default:
				errs[i] = fmt.Errorf("finish: unexpected code %d", code)
			}
		}
	}
	// A shard that could not be reached fails the whole call so the caller
	// retries; items that did apply answer ErrStaleReceipt next time.
	if failed != nil {
		return errs, failed
	}
	return errs, nil
}

// Expired returns up to limit reserved notifications per shard whose
// deadline passed before now-grace, with their current receipt: their
// attempt counts as failed (ttr expired), and the caller finishes them with
// Finish. grace absorbs clock skew between dispatchers.
func (s *Store) Expired(ctx context.Context, grace time.Duration, limit int) ([]*notify.Notification, error) {
	cutoff := strconv.FormatInt(ms(s.Now().Add(-grace)), 10)
	pipe := s.client.Pipeline()
	cmds := make([]*redis.StringSliceCmd, s.keys.shards)
	for shard := range cmds {
		cmds[shard] = pipe.ZRangeByScore(ctx, s.keys.reserved(shard), &redis.ZRangeBy{Min: "-inf", Max: cutoff, Count: int64(limit)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("find expired reservations: %w", err)
	}
	pipe = s.client.Pipeline()
	var metas []*redis.SliceCmd
	for shard, c := range cmds {
		if ids := c.Val(); len(ids) > 0 {
			metas = append(metas, pipe.HMGet(ctx, s.keys.meta(shard), ids...))
		}
	}
	if len(metas) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read expired reservations: %w", err)
	}
	var out []*notify.Notification
	for _, c := range metas {
		for _, v := range c.Val() {
			raw, ok := v.(string)
			if !ok {
				continue
			}
			n, err := decodeNotification(raw, "", "")
			if err != nil {
				return nil, err
			}
			if n.State == notify.StateReserved {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// Sweep deletes up to limit records per shard whose retention has passed,
// and returns how many it deleted.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	now := ms(s.Now())
	calls := make([]*scriptCall, s.keys.shards)
	k := s.keys
	for shard := range calls {
		calls[shard] = &scriptCall{
			script: sweepScript,
			keys:   []string{k.finished(shard), k.meta(shard), k.payload(shard), k.hist(shard)},
			args:   []any{now, limit},
		}
	}
	if err := s.runScripts(ctx, calls); err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	total := 0
	for _, c := range calls {
		n, _ := c.cmd.Int()
		total += n
	}
	return total, nil
}

// Wake tells that a shard's queue has work due at Due, earlier than its
// previous head.
type Wake struct {
	Queue string
	Shard int
	Due   time.Time
}

// Subscribe delivers wake-ups published by enqueues, retries and replays
// until ctx ends. Messages lost while the connection is down are not
// replayed, so subscribers must still poll now and then. ready is closed
// once the subscription is confirmed.
func (s *Store) Subscribe(ctx context.Context) (wakes <-chan Wake, ready <-chan struct{}) {
	out := make(chan Wake, 256)
	rdy := make(chan struct{})
	go func() {
		defer close(out)
		ps := s.client.Subscribe(ctx, s.keys.wake())
		defer ps.Close()
		for {
			_, err := ps.Receive(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.cfg.Logger.WarnContext(ctx, "store: subscribe to wake-ups failed; retrying", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		close(rdy)
		ch := ps.Channel(redis.WithChannelSize(256))
		for {
			select {
			case <-ctx.Done():
				return
			case msg, ok := <-ch:
				if !ok {
					return
				}
				if w, err := parseWake(msg.Payload); err == nil {
					select {
					case out <- w:
					default: // a slow reader only loses hints, never work
					}
				}
			}
		}
	}()
	return out, rdy
}

func parseWake(s string) (Wake, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Wake{}, errors.New("bad wake message")
	}
	shard, err1 := strconv.Atoi(f[1])
	due, err2 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Wake{}, err
	}
	return Wake{Queue: f[0], Shard: shard, Due: fromMS(due)}, nil
}
