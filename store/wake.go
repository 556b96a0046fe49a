package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// HeardWithin is how long a cancel takes to reach every dispatcher. A
// dispatcher may hold a notification reserved ahead of its busy workers,
// and must not attempt one whose cancel was answered: Redis announces the
// cancel to the dispatchers, the cancel answers this long after its script
// ran (client.Client.Cancel), and a dispatcher starts a notification it
// reserved this long ago or longer only once it has heard everything Redis
// published until this long ago (Subscription.Heard). An announcement
// that is slow to arrive therefore holds the attempt back, rather than
// letting it start unheard. On a Cluster the announcement crosses the
// cluster bus from the node that ran the cancel to the subscriber's, which
// the subscriber's PING does not wait for: there HeardWithin is the bus's
// margin, not a bound that holds whatever its delay. (Redis 7's sharded
// pub/sub, SPUBLISH inside the cancel's script to subscribers of its own
// node, would make it one.)
const HeardWithin = 250 * time.Millisecond

// heardEvery is how often a subscription asks Redis how far it has heard
// (a PING on its own connection, answered after every message published
// before it): often enough that the answer is fresh when a notification
// that waited HeardWithin starts, so that it need not wait for one.
const heardEvery = HeardWithin / 5

// Wake tells that a shard's queue has work due at Due, earlier than its
// previous head.
type Wake struct {
	Queue string
	Shard int
	Due   time.Time
}

// Subscription is a subscription to the wake-ups that enqueues, retries
// and replays publish, and to the cancels of reserved notifications.
// Messages published while its connection is down are lost, so a
// subscriber must still poll now and then; Heard tells whether any may
// have been.
type Subscription struct {
	// Wakes delivers the wake-ups. A reader that falls behind loses some:
	// they are hints, never work.
	Wakes <-chan Wake
	// Ready is closed once the subscription is confirmed.
	Ready <-chan struct{}

	mu sync.Mutex // guards the fields below
	// conn counts the connections the subscription has had; connected is
	// set while the current one is subscribed.
	conn      uint64
	connected bool
	// heard is when the last PING answered was sent: every message Redis
	// published before then has been heard on connection conn. pings are
	// the PINGs sent and not yet answered, oldest first.
	heard time.Time
	pings []ping
	// changed is closed, and replaced, when heard or conn changes.
	changed chan struct{}
}

// maxPings bounds the PINGs a subscription waits for the answers of, 3 s
// of them; the answer to one dropped is ignored.
const maxPings = 60

// ping is a PING sent on a subscription's connection.
type ping struct {
	seq  uint64
	conn uint64
	sent time.Time
}

// Subscribe subscribes to the wake-ups and the cancels of reserved
// notifications until ctx ends, or until the Store's Redis client is
// closed; Wakes is closed then. onCancel, unless nil, is called with the
// id and receipt of each cancelled reservation, in the order Redis
// published them and before Heard counts them heard; it must not block.
// Without onCancel nothing needs Heard, which is then always false: the
// subscription does not ask Redis how far it has heard.
func (s *Store) Subscribe(ctx context.Context, onCancel func(id, receipt string)) *Subscription {
	out := make(chan Wake, 256)
	rdy := make(chan struct{})
	sub := &Subscription{Wakes: out, Ready: rdy, changed: make(chan struct{})}
	go func() {
		defer close(out)
		// The first dial is made here, not in the caller, which may hold a
		// lock: Ready says when it is done.
		ps := s.client.Subscribe(ctx, s.keys.wake())
		defer ps.Close()
		// Receive does not watch ctx; closing the subscription ends it.
		defer context.AfterFunc(ctx, func() { _ = ps.Close() })()
		if onCancel != nil {
			pingCtx, stopPing := context.WithCancel(ctx)
			defer stopPing()
			go sub.ping(pingCtx, ps)
		}
		// failing is set from a failure until the next subscription: an
		// outage is logged as it starts and as it ends, not each second.
		ready, failing := false, false
		for {
			msg, err := ps.Receive(ctx)
			if ctx.Err() != nil {
				return
			}
			switch m := msg.(type) {
			case nil:
				sub.lost()
				if errors.Is(err, redis.ErrClosed) {
					// The caller closed the Redis client first: no retry can
					// reconnect, and one a second would outlive everything.
					s.cfg.Logger.WarnContext(ctx, "store: subscription to wake-ups ended: its Redis client is closed")
					return
				}
				if !failing {
					failing = true
					s.cfg.Logger.WarnContext(ctx, "store: subscription to wake-ups failed; retrying every second", "error", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			case *redis.Subscription:
				sub.subscribed()
				if failing {
					failing = false
					s.cfg.Logger.InfoContext(ctx, "store: subscription to wake-ups recovered")
				}
				if !ready {
					ready = true
					close(rdy)
				}
			case *redis.Pong:
				sub.answered(m.Payload)
			case *redis.Message:
				w, id, receipt, ok := parseMessage(m.Payload)
				switch {
				case !ok:
				case id != "":
					if onCancel != nil {
						onCancel(id, receipt)
					}
				default:
					select {
					case out <- w:
					default:
					}
				}
			}
		}
	}()
	return sub
}

// ping sends a PING on ps every heardEvery until ctx ends.
func (sub *Subscription) ping(ctx context.Context, ps *redis.PubSub) {
	t := time.NewTicker(heardEvery)
	defer t.Stop()
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seq++
		sub.mu.Lock()
		ok := sub.connected
		if ok {
			// A connection that stays open but answers nothing (a frozen
			// Redis) keeps the last maxPings.
			sub.pings = append(sub.pings[max(len(sub.pings)-maxPings+1, 0):], ping{seq: seq, conn: sub.conn, sent: time.Now()})
		}
		sub.mu.Unlock()
		// A failed PING reconnects, which the receiving loop hears as a
		// failed read.
		if ok {
			_ = ps.Ping(ctx, strconv.FormatUint(seq, 10))
		}
	}
}

// subscribed records that a connection's subscription was confirmed: a
// new connection every time, since go-redis also reconnects where the
// receiving loop does not see it fail (a PING whose write failed), and
// what was published before the new one subscribed was lost.
func (sub *Subscription) subscribed() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.conn++
	sub.connected = true
	sub.pings = nil
	sub.notify()
}

// lost records that the connection failed: what is published until the
// next one subscribes is not heard.
func (sub *Subscription) lost() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.connected = false
	sub.pings = nil
	sub.notify()
}

// answered records the answer to the PING payload names.
func (sub *Subscription) answered(payload string) {
	seq, err := strconv.ParseUint(payload, 10, 64)
	if err != nil {
		return
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for i, p := range sub.pings {
		if p.seq == seq {
			if p.conn == sub.conn && sub.connected {
				sub.heard = p.sent
				sub.notify()
			}
			sub.pings = sub.pings[i+1:]
			return
		}
	}
}

// notify wakes those waiting in Heard. sub.mu is held.
func (sub *Subscription) notify() {
	close(sub.changed)
	sub.changed = make(chan struct{})
}

// Mark names the subscription's connection, for Heard: 0 while none is
// subscribed.
func (sub *Subscription) Mark() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.connected {
		return 0
	}
	return sub.conn
}

// Heard reports whether everything Redis published until HeardWithin ago
// has been heard, on the connection mark names (Mark, taken before what
// the answer is about happened), waiting up to wait for it. It is false
// when mark is 0 or the connection has changed since: what was published
// between the two was lost.
func (sub *Subscription) Heard(ctx context.Context, mark uint64, wait time.Duration) bool {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		sub.mu.Lock()
		gone := mark == 0 || sub.conn != mark || !sub.connected
		heard := !sub.heard.Before(time.Now().Add(-HeardWithin))
		changed := sub.changed
		sub.mu.Unlock()
		switch {
		case gone:
			return false
		case heard:
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-changed:
		}
	}
}

// cancelWake starts the message of a cancelled reservation, "cancel <id>
// <receipt>", which no queue's name is.
const cancelWake = "cancel"

// parseMessage reads a message published on the wake channel: a wake-up,
// "<queue> <shard> <due ms>", or the cancel of a reservation, with id set.
// ok is false for neither.
func parseMessage(s string) (w Wake, id, receipt string, ok bool) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Wake{}, "", "", false
	}
	if f[0] == cancelWake {
		return Wake{}, f[1], f[2], true
	}
	shard, err1 := strconv.Atoi(f[1])
	due, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return Wake{}, "", "", false
	}
	return Wake{Queue: f[0], Shard: shard, Due: fromMS(due)}, "", "", true
}
