package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestRandomOperations runs random sequences of what producers, dispatchers,
// the reaper, the sweeper and operators do to eight ids over two order keys,
// two topics and four shards (enqueue, with and without replace, key,
// delay or webhook channel; reserve; ack, retry, dead and release; cancel;
// replay and purge by topic and by id; sweep; reap), and checks after every
// step what ordering per key promises and what the counters say:
//
//   - each key's line of live notifications has exactly one head, and
//     every other notification in it waits for a live one of the same key;
//   - the stats counters equal what the records hold;
//   - in the end, with time moving on and every reservation finished,
//     nothing stays scheduled or reserved for ever.
//
// A failure logs the steps that led to it; each seed replays the same
// sequence.
func TestRandomOperations(t *testing.T) {
	t.Parallel()
	for seed := range 20 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			randomOperations(t, uint64(seed))
		})
	}
}

// randomOperations runs the sequence of seed; see TestRandomOperations.
func randomOperations(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	b := setup(t, store.Config{Shards: 4, Retention: 2 * time.Second})
	pool := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	keys := []string{"k1", "k2"}
	topics := []string{"jobs", "jobs2"}
	held := map[string]*notify.Notification{}
	var log []string
	logf := func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }
	defer func() {
		if t.Failed() {
			for _, l := range log {
				t.Log(l)
			}
		}
	}()
	check := func() {
		t.Helper()
		live := map[string][]*notify.Notification{}
		byID := map[string]*notify.Notification{}
		for _, id := range pool {
			n, err := b.store.Get(ctx, id)
			if errors.Is(err, notify.ErrNotFound) {
				continue
			}
			require.NoError(t, err)
			byID[id] = n
			if n.OrderKey == "" {
				continue
			}
			if n.State == notify.StateScheduled || n.State == notify.StateReserved {
				f := n.Topic + "|" + n.OrderKey
				live[f] = append(live[f], n)
			}
		}
		for f, ns := range live {
			heads := 0
			for _, n := range ns {
				if n.WaitingFor == "" {
					heads++
				} else {
					p := byID[n.WaitingFor]
					require.NotNil(t, p, "%s waits for %s, which is gone", n.ID, n.WaitingFor)
					require.Contains(t, []notify.State{notify.StateScheduled, notify.StateReserved}, p.State, "%s waits for %s in state %s", n.ID, p.ID, p.State)
					require.Equal(t, n.OrderKey, p.OrderKey)
				}
			}
			require.Equal(t, 1, heads, "line %s has %d heads: %v", f, heads, ns)
		}
		heraldtest.RequireStatsMatch(t, b.store)
	}
	reserve := func() {
		for _, q := range []string{store.PullQueue(topics[0]), store.PullQueue(topics[1]), store.QueuePush} {
			items, _, err := b.store.Reserve(ctx, q, heraldtest.AllShards(t, b.store), store.MaxReserve)
			require.NoError(t, err)
			for _, n := range items {
				held[n.ID] = n
				logf("reserved %s", n.ID)
			}
		}
	}
	for step := 0; step < 150; step++ {
		id := pool[rng.IntN(len(pool))]
		switch op := rng.IntN(11); op {
		case 0, 1, 2:
			key := keys[rng.IntN(len(keys))]
			if rng.IntN(4) == 0 {
				key = ""
			}
			topic := topics[0]
			if rng.IntN(5) == 0 {
				topic = topics[1]
			}
			replace := rng.IntN(2) == 0
			opts := []heraldtest.NotificationOption{heraldtest.Topic(topic), heraldtest.Payload(fmt.Sprintf(`{"v":%d}`, rng.IntN(3))),
				heraldtest.Backoff(0, time.Second)}
			if key != "" {
				opts = append(opts, heraldtest.OrderKey(key))
			}
			if rng.IntN(3) == 0 {
				opts = append(opts, heraldtest.Channel(notify.ChannelWebhook, "https://example.com/x"))
			}
			if rng.IntN(4) == 0 {
				opts = append(opts, heraldtest.Delay(time.Duration(rng.IntN(3))*time.Second))
			}
			n := heraldtest.Notification(t, id, b.clock.Now(), opts...)
			_, st, err := b.store.Enqueue(ctx, n, replace)
			logf("enqueue %s key=%q topic=%s replace=%v -> %v %v", id, key, topic, replace, st, err)
		case 3, 4:
			reserve()
		case 5, 6:
			for hid, n := range held {
				if rng.IntN(2) == 0 {
					continue
				}
				action := []notify.Action{notify.ActionAck, notify.ActionRetry, notify.ActionDead, notify.ActionRelease}[rng.IntN(4)]
				f := b.finish(action, n, b.clock.Now().Add(time.Duration(rng.IntN(2))*time.Second))
				errs, err := b.store.Finish(ctx, []store.Finish{f})
				require.NoError(t, err)
				logf("finish %s %s -> %v", hid, action, errs[0])
				delete(held, hid)
			}
		case 7:
			_, err := b.store.Cancel(ctx, id)
			logf("cancel %s -> %v", id, err)
		case 8:
			if rng.IntN(3) == 0 {
				topic := topics[rng.IntN(2)]
				if rng.IntN(2) == 0 {
					m, r, err := b.store.Replay(ctx, store.DeadFilter{Topic: topic}, store.DeadOptions{Reset: rng.IntN(2) == 0})
					require.NoError(t, err)
					logf("replay topic %s -> %d %d", topic, m, r)
				} else {
					m, r, err := b.store.Purge(ctx, store.DeadFilter{Topic: topic}, store.DeadOptions{})
					require.NoError(t, err)
					logf("purge topic %s -> %d %d", topic, m, r)
				}
			} else if rng.IntN(2) == 0 {
				m, r, err := b.store.Replay(ctx, store.DeadFilter{IDs: []string{id}}, store.DeadOptions{Reset: rng.IntN(2) == 0})
				require.NoError(t, err)
				logf("replay %s -> %d %d", id, m, r)
			} else {
				m, r, err := b.store.Purge(ctx, store.DeadFilter{IDs: []string{id}}, store.DeadOptions{})
				require.NoError(t, err)
				logf("purge %s -> %d %d", id, m, r)
			}
		case 9:
			b.clock.Advance(time.Duration(rng.IntN(3)) * time.Second)
			d, _, err := b.store.Sweep(ctx, 100)
			require.NoError(t, err)
			logf("advance+sweep -> %d", d)
		case 10:
			b.clock.Advance(time.Minute)
			exp, err := b.store.Expired(ctx, 0, 100)
			require.NoError(t, err)
			for _, n := range exp {
				f := b.finish(notify.ActionRetry, n, b.clock.Now())
				f.Attempt.Outcome = notify.OutcomeTTRExpired
				errs, err := b.store.Finish(ctx, []store.Finish{f})
				require.NoError(t, err)
				logf("reap %s -> %v", n.ID, errs[0])
				delete(held, n.ID)
			}
		}
		check()
	}
	// Drain: nothing may stay waiting forever.
	for range 40 {
		b.clock.Advance(2 * time.Second)
		exp, err := b.store.Expired(ctx, 0, 100)
		require.NoError(t, err)
		for _, n := range exp {
			delete(held, n.ID)
			_, _ = b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, n, time.Time{})})
		}
		reserve()
		for hid, n := range held {
			_, _ = b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, n, time.Time{})})
			delete(held, hid)
		}
	}
	for _, id := range pool {
		n, err := b.store.Get(ctx, id)
		if err == nil {
			require.NotEqual(t, notify.StateScheduled, n.State, "%s stuck: waiting for %q", id, n.WaitingFor)
			require.NotEqual(t, notify.StateReserved, n.State, "%s stuck reserved", id)
		}
	}
	check()
	// Once the dead are purged and retention has passed, nothing is left.
	for _, topic := range topics {
		_, _, err := b.store.Purge(ctx, store.DeadFilter{Topic: topic}, store.DeadOptions{})
		require.NoError(t, err)
	}
	b.clock.Advance(3 * time.Second)
	for more := true; more; {
		var err error
		_, more, err = b.store.Sweep(ctx, 100)
		require.NoError(t, err)
	}
	requireNothingLeft(t, server.Client(t), b.store)
}
