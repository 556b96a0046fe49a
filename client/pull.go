package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// ErrNacked is the error recorded for a Nack that gave none.
var ErrNacked = errors.New("nacked")

// Reserve reserves up to limit due notifications of a pull topic, earliest
// first: the answer is in due order, and when more are due than limit, the
// shards share the limit, each giving its earliest. When none is due it
// waits up to wait for one to become due and returns as soon as one does;
// it returns an empty slice when the wait ends first. Each notification
// comes with a Receipt and a Deadline (now + its ttr) before which it must
// be acknowledged or failed.
//
// A waiting Reserve sleeps until the earliest due time it knows of, wakes
// early when an enqueue, a retry or a replay makes something due sooner, and
// asks Redis at least every PollInterval. When ctx ends as Redis reserves,
// the notifications are given back, with no attempt counted, and Reserve
// returns ctx.Err(). What a reservation whose answer was lost reserved, or
// such a give-back, when Redis could not be reached for it, is given back
// by the client's next look that Redis answers, on any topic.
func (c *Client) Reserve(ctx context.Context, topic string, limit int, wait time.Duration) ([]*notify.Notification, error) {
	switch {
	case !notify.ValidTopic(topic):
		return nil, notify.Errorf("topic", "must match [a-z0-9._-]{1,64}")
	case limit < 1 || limit > MaxReserve:
		return nil, notify.Errorf("max", "must be between 1 and %d", MaxReserve)
	case wait < 0:
		return nil, notify.Errorf("wait", "must not be negative")
	}
	// A misspelt topic would wait for ever.
	if err := c.checkStrict(c.cfg.PoliciesFunc(), topic); err != nil {
		return nil, err
	}
	queue := store.PullQueue(topic)
	var wakes <-chan store.Wake
	// ready is closed once the subscription is confirmed, nil once that is
	// known: a wake-up published before then is never heard.
	var ready <-chan struct{}
	if wait > 0 {
		// Listen before the first look, so that nothing enqueued between the
		// look and the sleep goes unnoticed.
		ch, rdy := c.hub.add(queue)
		defer c.hub.remove(queue, ch)
		wakes = ch
		select {
		case <-rdy:
		default:
			ready = rdy
		}
	}
	end := time.Now().Add(wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		var items []*notify.Notification
		var next time.Time
		var err error
		paused := c.topicPaused(ctx, topic)
		if !paused {
			items, next, err = c.reserveDue(ctx, queue, limit)
		}
		if len(items) > 0 && ctx.Err() != nil {
			// The caller has gone (an HTTP consumer hung up) while Redis
			// reserved these: no one would work on them, and they would
			// wait out their ttr and burn an attempt.
			c.release(ctx, items)
			return nil, ctx.Err()
		}
		if err != nil || len(items) > 0 {
			return items, err
		}
		left := time.Until(end)
		if left <= 0 {
			return []*notify.Notification{}, nil
		}
		sleep := min(left, c.cfg.PollInterval)
		if !next.IsZero() {
			sleep = min(sleep, max(next.Sub(c.store.Now()), 0))
		}
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		case <-ready:
			// The first waiter's subscription is confirmed only now: what
			// was enqueued since its look may have gone unheard, so it
			// looks again. A look that finds work at once never waits
			// for this.
			ready = nil
		case <-wakes: // Reset above discards a stale tick (Go 1.23 timers)
			if paused {
				// Most likely a resume, made elsewhere: what was read of
				// the pauses may be older than it.
				c.pausedCache.forget()
			}
		}
	}
}

// maxReservePasses bounds the Reserve calls of one look. A pass takes up
// to its limit of entries off each shard's ready list, and entries gone
// stale (cancelled, or moved later) take nothing but count against it: a
// pass that reserved fewer than asked while a shard is still due is
// followed by another, so that due work behind them is reached, not
// answered as nothing. Each pass is one round trip and clears what it
// took, so 16 of them reach a due notification behind up to 16 times the
// limit of stale entries; one further behind waits for the next look.
const maxReservePasses = 16

// reserveDue looks at the heads of queue's shards and reserves up to limit
// notifications from those with due work. next is the earliest due time
// still ahead (zero when every shard is empty; now or earlier when a shard
// still has due work).
func (c *Client) reserveDue(ctx context.Context, queue string, limit int) (items []*notify.Notification, next time.Time, err error) {
	heads, err := c.store.Heads(ctx, queue)
	if err == nil && c.giveBackUnanswered(ctx)[queue] > 0 {
		// What came back may be due now.
		heads, err = c.store.Heads(ctx, queue)
	}
	if err != nil {
		c.storeError("reserve", err)
		return nil, time.Time{}, err
	}
	due, next := dueShards(heads, c.store.Now(), time.Time{})
	for pass := 1; len(due) > 0; pass++ {
		got, after, err := c.store.Reserve(ctx, queue, due, limit-len(items))
		if err != nil {
			c.unanswered.Keep(err)
			c.storeError("reserve", err)
			if len(items) == 0 {
				return nil, time.Time{}, err
			}
			// What the earlier passes reserved is the caller's: dropped,
			// it would wait out its ttr. The next look finds the rest.
			next = c.store.Now()
			break
		}
		items = append(items, got...)
		// A pass asks at most as many shards as it has room for, and
		// answers the heads of those alone: the rest are due still.
		unasked := slices.DeleteFunc(due, func(shard int) bool {
			return slices.ContainsFunc(after, func(h store.Head) bool { return h.Shard == shard })
		})
		due, next = dueShards(after, c.store.Now(), next)
		due = append(due, unasked...)
		if len(due) > 0 && (len(items) >= limit || pass == maxReservePasses) {
			next = c.store.Now() // more is due, for the next look
			break
		}
	}
	// The store answers shard by shard; a consumer works through the list
	// in order, so the earliest due comes first.
	slices.SortStableFunc(items, func(a, b *notify.Notification) int {
		return a.DueAt(time.Time{}).Compare(b.DueAt(time.Time{}))
	})
	return items, next, nil
}

// dueShards returns the shards of heads with work due at now, and the
// earliest due time after now of the others and next (zero for none).
func dueShards(heads []store.Head, now, next time.Time) (due []int, _ time.Time) {
	for _, h := range heads {
		switch {
		case h.Due.IsZero():
		case !h.Due.After(now):
			due = append(due, h.Shard)
		case next.IsZero() || h.Due.Before(next):
			next = h.Due
		}
	}
	return due, next
}

// giveBackUnanswered gives back what this client's reservations whose
// answers were lost still hold, once Redis answers again, and returns how
// many per queue.
func (c *Client) giveBackUnanswered(ctx context.Context) map[string]int {
	given, err := c.unanswered.GiveBack(ctx, c.store)
	c.storeError("reserve", err)
	return given
}

// releaseTimeout bounds giving back reservations whose caller has gone.
const releaseTimeout = 5 * time.Second

// release gives back reserved notifications whose attempts never started:
// each is due again when it was, keeps its place and counts no attempt.
// ctx may have ended: the release outlives it, up to releaseTimeout.
func (c *Client) release(ctx context.Context, items []*notify.Notification) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, err := c.store.GiveBackUnstarted(ctx, items); err != nil {
		// Given back by a later look that Redis answers, as the
		// reservations whose answers were lost are: left alone they
		// would wait out their ttr and burn an attempt.
		c.unanswered.KeepUnstarted(items)
		c.storeError("release", err)
	}
}

// Ack records that the attempt of reservation receipt succeeded. It is
// notify.ErrStaleReceipt when the receipt no longer holds the reservation
// and notify.ErrNotFound for an unknown id.
func (c *Client) Ack(ctx context.Context, id, receipt string) error {
	return c.finish(ctx, id, receipt, nil)
}

// Nack records that the attempt of reservation receipt failed with cause.
// The next step follows the notification's backoff array and policy, as for
// a push attempt: wrap cause with notify.Permanent to send the notification
// straight to the dead-letter set, or with notify.Retry to ask for a later
// retry (honoured when the policy honours Retry-After). A nil cause is
// recorded as ErrNacked. Errors are as for Ack.
func (c *Client) Nack(ctx context.Context, id, receipt string, cause error) error {
	if cause == nil {
		cause = ErrNacked
	}
	return c.finish(ctx, id, receipt, cause)
}

// Release gives back, unstarted, the notification reserved with receipt: it
// is due again at once, counts no attempt and adds nothing to the history,
// as a Go worker's reservations go back when it stops. It is for a consumer
// that reserved more than it will start, such as one shutting down, whose
// reservations would otherwise wait out their ttr and then count as failed
// attempts. Errors are as for Ack.
func (c *Client) Release(ctx context.Context, id, receipt string) error {
	n, err := c.held(ctx, id, receipt, "release")
	if err != nil {
		return err
	}
	if n.State != notify.StateReserved {
		// Cancelled: nothing was started, so nothing is left to record.
		return notify.ErrStaleReceipt
	}
	errs, err := c.store.GiveBackUnstarted(ctx, []*notify.Notification{n})
	if err != nil {
		c.storeError("release", err)
		return err
	}
	return errs[0]
}

// held returns the notification id as reservation receipt holds it:
// reserved, or cancelled during the attempt, which keeps the receipt until
// the attempt is recorded (notify.ErrCancelledMeanwhile).
func (c *Client) held(ctx context.Context, id, receipt, op string) (*notify.Notification, error) {
	if !notify.ValidID(id) {
		return nil, notify.ErrNotFound
	}
	if receipt == "" {
		return nil, notify.Errorf("receipt", "is required")
	}
	n, err := c.store.GetState(ctx, id)
	if err != nil {
		c.storeError(op, err)
		return nil, err
	}
	if (n.State != notify.StateReserved && n.State != notify.StateCancelled) || n.Receipt != receipt {
		return nil, notify.ErrStaleReceipt
	}
	return n, nil
}

// finish ends a consumer's attempt: nil cause acks, any other fails.
func (c *Client) finish(ctx context.Context, id, receipt string, cause error) error {
	n, err := c.held(ctx, id, receipt, "finish")
	if err != nil {
		return err
	}
	p := c.cfg.PoliciesFunc().PolicyFor(n)
	now := c.store.Now()
	started := now
	if n.Deadline != nil {
		started = n.Deadline.Add(-time.Duration(n.TTR))
	}
	step := p.Decide(n, now, cause, rand.Float64())
	f := store.Finish{Notification: n, Action: step.Action, NextAt: step.NextAt,
		Attempt: notify.NewAttempt(n, started, now, notify.Response{}, cause, step.Outcome)}
	errs, err := c.store.Finish(ctx, []store.Finish{f})
	if err != nil {
		c.storeError("finish", err)
		return err
	}
	if errors.Is(errs[0], notify.ErrCancelledMeanwhile) {
		f.Action = notify.ActionCancelled
	} else if errs[0] != nil {
		return errs[0]
	}
	var lateness time.Duration
	if n.NextAttemptAt != nil {
		lateness = started.Sub(*n.NextAttemptAt)
	}
	c.obs.AttemptFinished(n, f.Attempt, f.Action, lateness)
	if c.cfg.Tracer != nil {
		c.cfg.Tracer.AttemptRecorded(ctx, &f)
	}
	return errs[0]
}

// hub shares one wake-up subscription among the waiting Reserve calls of a
// client: it starts with the first waiter and runs until close.
type hub struct {
	store *store.Store

	mu      sync.Mutex // guards the fields below
	waiters map[string]map[chan store.Wake]struct{}
	started bool
	closed  bool
	// ready is the subscription's, closed once it is confirmed.
	ready <-chan struct{}
	stop  context.CancelFunc
	done  chan struct{}
}

func newHub(st *store.Store) *hub {
	return &hub{store: st, waiters: map[string]map[chan store.Wake]struct{}{}, done: make(chan struct{})}
}

// add registers a waiter for queue's wake-ups. Its channel holds one
// wake-up: a waiter that has not yet looked again needs no second one.
// ready is closed once the shared subscription is confirmed (nil when the
// hub is closed): wake-ups published before then are not heard.
func (h *hub) add(queue string) (_ chan store.Wake, ready <-chan struct{}) {
	ch := make(chan store.Wake, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters[queue] == nil {
		h.waiters[queue] = map[chan store.Wake]struct{}{}
	}
	h.waiters[queue][ch] = struct{}{}
	if !h.started && !h.closed {
		h.started = true
		ctx, stop := context.WithCancel(context.Background())
		h.stop = stop
		sub := h.store.Subscribe(ctx, nil)
		h.ready = sub.Ready
		go h.fanOut(sub.Wakes)
	}
	return ch, h.ready
}

func (h *hub) remove(queue string, ch chan store.Wake) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.waiters[queue], ch)
	if len(h.waiters[queue]) == 0 {
		delete(h.waiters, queue)
	}
}

// fanOut passes each wake-up to the waiters of its queue until the
// subscription ends.
func (h *hub) fanOut(wakes <-chan store.Wake) {
	defer close(h.done)
	for w := range wakes {
		h.wake(w)
	}
}

// wake passes w to the waiters of its queue.
func (h *hub) wake(w store.Wake) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[w.Queue] {
		select {
		case ch <- w:
		default:
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	started := h.started && !h.closed
	h.closed = true
	stop := h.stop
	h.mu.Unlock()
	if started {
		stop()
		<-h.done
	}
}
