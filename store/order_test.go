package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// keyed resolves a notification of topic jobs with order key key.
func (b *testBundle) keyed(t *testing.T, id, key string, backoff ...time.Duration) *notify.Notification {
	t.Helper()
	opts := []heraldtest.NotificationOption{heraldtest.OrderKey(key)}
	if len(backoff) > 0 {
		opts = append(opts, heraldtest.Backoff(backoff...))
	}
	return heraldtest.Notification(t, id, b.clock.Now(), opts...)
}

func ids(ns []*notify.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

func TestOrderKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OneAtATimeInEnqueueOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		for _, id := range []string{"paid", "refunded", "closed"} {
			b.enqueue(t, b.keyed(t, id, "trade-1", 0, time.Minute))
		}
		b.enqueue(t, b.keyed(t, "other", "trade-2"))
		b.enqueue(t, b.newNotification(t, "plain", 0, 0))
		got := b.reserveAll(t)
		require.ElementsMatch(t, []string{"paid", "other", "plain"}, ids(got), "only each key's head is due")
		st, err := b.store.Stats(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, st["jobs"].Waiting)

		rec, err := b.store.Get(ctx, "refunded")
		require.NoError(t, err)
		require.Equal(t, notify.StateScheduled, rec.State)
		require.Equal(t, "paid", rec.WaitingFor)
		require.Equal(t, "trade-1", rec.OrderKey)

		paid := got[0]
		for _, n := range got {
			if n.ID == "paid" {
				paid = n
			}
		}
		// A retry keeps the head: nothing behind it moves.
		b.finishOne(t, b.finish(notify.ActionRetry, paid, b.clock.Now().Add(time.Minute)))
		require.Empty(t, b.reserveAll(t))
		b.clock.Advance(time.Minute)
		again := b.reserveAll(t)
		require.Equal(t, []string{"paid"}, ids(again))
		b.finishOne(t, b.finish(notify.ActionAck, again[0], time.Time{}))

		next := b.reserveAll(t)
		require.Equal(t, []string{"refunded"}, ids(next), "the next one starts once the earlier succeeded")
		b.finishOne(t, b.finish(notify.ActionDead, next[0], time.Time{}))
		last := b.reserveAll(t)
		require.Equal(t, []string{"closed"}, ids(last), "a dead one unblocks the next")
		rec, err = b.store.Get(ctx, "closed")
		require.NoError(t, err)
		require.Empty(t, rec.WaitingFor)
	})

	t.Run("CancelUnblocks", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		for _, id := range []string{"a", "b", "c", "d"} {
			b.enqueue(t, b.keyed(t, id, "k"))
		}
		_, err := b.store.Cancel(ctx, "b") // from the middle of the line
		require.NoError(t, err)
		rec, err := b.store.Get(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, "a", rec.WaitingFor, "c moved up behind a")
		_, err = b.store.Cancel(ctx, "a") // the head, before it started
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, ids(b.reserveAll(t)))
		_, err = b.store.Cancel(ctx, "d") // the tail
		require.NoError(t, err)
		b.enqueue(t, b.keyed(t, "e", "k"))
		rec, err = b.store.Get(ctx, "e")
		require.NoError(t, err)
		require.Equal(t, "c", rec.WaitingFor, "a new one waits behind the line's last live one")
	})

	t.Run("ReplayGoesToTheBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.keyed(t, "first", "k"))
		b.enqueue(t, b.keyed(t, "second", "k"))
		first := b.reserveAll(t)
		b.finishOne(t, b.finish(notify.ActionDead, first[0], time.Time{}))
		_, replayed, err := b.store.Replay(ctx, store.DeadFilter{IDs: []string{"first"}}, store.DeadOptions{Reset: true})
		require.NoError(t, err)
		require.Equal(t, 1, replayed)
		rec, err := b.store.Get(ctx, "first")
		require.NoError(t, err)
		require.Equal(t, "second", rec.WaitingFor, "a replayed one joins the back of its line")
		second := b.reserveAll(t)
		require.Equal(t, []string{"second"}, ids(second))
		b.finishOne(t, b.finish(notify.ActionAck, second[0], time.Time{}))
		require.Equal(t, []string{"first"}, ids(b.reserveAll(t)))
	})

	t.Run("ReplaceInTheLineRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.keyed(t, "a", "k"))
		b.enqueue(t, b.keyed(t, "b", "k"))
		moved := b.keyed(t, "b", "k", time.Hour)
		_, _, err := b.store.Enqueue(ctx, moved, true)
		require.ErrorIs(t, err, notify.ErrOrdered)
	})

	t.Run("IDsAcrossShards", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{Shards: 16, Retention: time.Minute})
		// Many ids on one key: most of their ids belong to other shards
		// than the key, so they are reached through stubs.
		var want []string
		for i := range 20 {
			id := fmt.Sprintf("n%02d", i)
			want = append(want, id)
			b.enqueue(t, b.keyed(t, id, "one-key"))
		}
		_, _, err := b.store.Enqueue(ctx, b.newNotification(t, "n05", 0, 0), false)
		require.ErrorIs(t, err, notify.ErrConflict, "an id taken by a keyed notification")
		_, _, err = b.store.Enqueue(ctx, b.keyed(t, "n05", "another-key"), false)
		require.ErrorIs(t, err, notify.ErrConflict, "an id taken with another key")
		b.enqueue(t, b.newNotification(t, "plain", 0, 0))
		_, _, err = b.store.Enqueue(ctx, b.keyed(t, "plain", "k"), false)
		require.ErrorIs(t, err, notify.ErrConflict, "an id taken without a key")

		var order []string
		for range want {
			got := b.reserveAll(t)
			var keyed []*notify.Notification
			for _, n := range got {
				if n.OrderKey != "" {
					keyed = append(keyed, n)
				}
			}
			require.Len(t, keyed, 1)
			order = append(order, keyed[0].ID)
			rec, err := b.store.Get(ctx, keyed[0].ID)
			require.NoError(t, err)
			require.Equal(t, notify.StateReserved, rec.State)
			b.finishOne(t, b.finish(notify.ActionAck, keyed[0], time.Time{}))
		}
		require.Equal(t, want, order)
		b.clock.Advance(2 * time.Minute)
		for {
			_, more, err := b.store.Sweep(ctx, 100)
			require.NoError(t, err)
			if !more {
				break
			}
		}
		for _, id := range want {
			_, err := b.store.Get(ctx, id)
			require.ErrorIs(t, err, notify.ErrNotFound, id)
		}
		// Swept with their stubs: the ids are free again, for anyone.
		b.enqueue(t, b.newNotification(t, "n05", 0, 0))
	})
}

func (b *testBundle) finishOne(t *testing.T, f store.Finish) {
	t.Helper()
	errs, err := b.store.Finish(context.Background(), []store.Finish{f})
	require.NoError(t, err)
	require.NoError(t, errs[0])
}

// TestStubsOutliveASweep: a keyed notification whose id belongs to another
// shard than its key is found through a stub in its id's shard. When its
// record is swept and the same id is enqueued again with the same key, the
// enqueue finds the old stub in place and keeps it, while the sweep deletes
// the stubs of what it swept in a second step: whichever way the two
// interleave, the new notification stays reachable, so that Get shows it
// and Cancel stops it.
func TestStubsOutliveASweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 16 ids on one key over 16 shards: most ids belong to other shards
	// than their key.
	var want []string
	for i := range 16 {
		want = append(want, fmt.Sprintf("s%02d", i))
	}
	// setupSwept enqueues and cancels the ids, and lets their retention
	// pass.
	setupSwept := func(t *testing.T) (*testBundle, *afterPipeline) {
		b, between := setupHooked(t, store.Config{Shards: 16, Retention: time.Minute})
		for _, id := range want {
			b.enqueue(t, b.keyed(t, id, "k", time.Hour))
			_, err := b.store.Cancel(ctx, id)
			require.NoError(t, err)
		}
		// Redis now has the sweep's script, so the sweep's first pipeline
		// is the one that deletes.
		_, _, err := b.store.Sweep(ctx, 100)
		require.NoError(t, err)
		b.clock.Advance(2 * time.Minute)
		return b, between
	}
	enqueueAgain := func(t *testing.T, b *testBundle) {
		reqs := make([]store.EnqueueRequest, len(want))
		for i, id := range want {
			reqs[i] = store.EnqueueRequest{Notification: b.keyed(t, id, "k", time.Hour)}
		}
		results, err := b.store.EnqueueBatch(ctx, reqs)
		require.NoError(t, err)
		for _, r := range results {
			require.NoError(t, r.Err)
			require.Equal(t, store.Created, r.Status, r.Notification.ID)
		}
	}
	sweep := func(t *testing.T, b *testBundle) {
		deleted, more, err := b.store.Sweep(ctx, 100)
		require.NoError(t, err)
		require.Equal(t, len(want), deleted)
		require.False(t, more)
	}
	reachable := func(t *testing.T, b *testBundle) {
		for _, id := range want {
			n, err := b.store.Get(ctx, id)
			require.NoError(t, err, id)
			require.Equal(t, notify.StateScheduled, n.State, id)
			_, err = b.store.Cancel(ctx, id)
			require.NoError(t, err, id)
		}
		require.Empty(t, b.reserveAll(t), "all cancelled")
	}

	for _, tc := range []struct {
		name string
		// between runs after call's first round trip: the sweep's
		// deletion of records, or the enqueue's placing of stubs.
		call, between func(*testing.T, *testBundle)
	}{
		{name: "EnqueuedBetweenTheSweepsSteps", call: sweep, between: enqueueAgain},
		{name: "SweptBetweenTheEnqueuesSteps", call: enqueueAgain, between: sweep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, hook := setupSwept(t)
			hook.arm(func() { tc.between(t, b) })
			tc.call(t, b)
			reachable(t, b)
		})
	}
}

// TestReplaceIntoAnotherShard: a replace that gives a notification an order
// key, another key, or none, moves it where its new key leads. Within one
// shard it is replaced; into another shard, which one step cannot do, it
// is refused as ErrOtherShard, a conflict that says why, and the
// notification is left as it was. A keyed notification still holding its
// place in its line is refused as ErrOrdered on any store.
func TestReplaceIntoAnotherShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, shards := range []int{1, 16} {
		t.Run(fmt.Sprint(shards, "Shards"), func(t *testing.T) {
			t.Parallel()
			b := setup(t, store.Config{Shards: shards})
			refused := map[string]int{}
			for i := range 8 {
				for _, c := range []struct {
					name, from, to string
					cancelled      bool // out of its line, if it had one
					err            error
				}{
					{name: "KeyGiven", to: "new"},
					{name: "KeyChanged", from: "old", to: "new", cancelled: true},
					{name: "KeyDropped", from: "old", cancelled: true},
					{name: "InItsLine", from: "old", to: "new", err: notify.ErrOrdered},
				} {
					id := fmt.Sprintf("%s-%d", c.name, i)
					from, to := c.from, c.to // a key of its own per id, so none waits behind another
					if from != "" {
						from += fmt.Sprint(i)
					}
					if to != "" {
						to += fmt.Sprint(i)
					}
					b.enqueue(t, heraldtest.Notification(t, id, b.clock.Now(), heraldtest.OrderKey(from), heraldtest.Delay(time.Hour)))
					if c.cancelled {
						_, err := b.store.Cancel(ctx, id)
						require.NoError(t, err)
					}
					_, status, err := b.store.Enqueue(ctx, heraldtest.Notification(t, id, b.clock.Now(),
						heraldtest.OrderKey(to), heraldtest.Delay(2*time.Hour)), true)
					got, gerr := b.store.Get(ctx, id)
					require.NoError(t, gerr)
					switch {
					case c.err != nil:
						require.ErrorIs(t, err, c.err, id)
					case err == nil:
						require.Equal(t, store.Replaced, status, id)
						require.Equal(t, to, got.OrderKey, id)
						continue
					default:
						require.ErrorIs(t, err, notify.ErrOtherShard, id)
						require.ErrorIs(t, err, notify.ErrConflict, id)
						refused[c.name]++
					}
					require.Equal(t, from, got.OrderKey, "%s is left as it was", id)
				}
			}
			if shards == 1 {
				require.Empty(t, refused)
			} else {
				require.Len(t, refused, 3, "each kind of move crossed shards at least once: %v", refused)
			}
		})
	}
}
