package store_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// A notification due at its enqueue waits on its queue's ready list; what
// happens to it before it is reserved must leave it attempted once, never
// early, in the queue it now belongs to. Each test's cleanup also checks
// that the kept counts match the sets counted afresh.
func TestReadyList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ids := func(ns []*notify.Notification) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.ID)
		}
		return out
	}
	// replace stores n over the notification of its id.
	replace := func(t *testing.T, b *testBundle, n *notify.Notification) {
		t.Helper()
		_, status, err := b.store.Enqueue(ctx, n, true)
		require.NoError(t, err)
		require.Equal(t, store.Replaced, status)
	}

	t.Run("ReplacedLaterIsNotEarly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0))
		replace(t, b, b.newNotification(t, "a", time.Hour))
		require.Empty(t, b.reserveAll(t), "moved an hour on")
		b.clock.Advance(time.Hour)
		require.Equal(t, []string{"a"}, ids(b.reserveAll(t)))
		require.Empty(t, b.reserveAll(t))
	})

	t.Run("ReplacedNowIsReservedOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0))
		replace(t, b, heraldtest.Notification(t, "a", b.clock.Now(), heraldtest.Payload(`{"n":2}`)))
		heraldtest.RequireStatsMatch(t, b.store) // in the list and the due set, counted once
		got := b.reserveAll(t)
		require.Equal(t, []string{"a"}, ids(got))
		require.JSONEq(t, `{"n":2}`, string(got[0].Payload))
		require.Empty(t, b.reserveAll(t), "its two entries make one attempt")
	})

	t.Run("CancelledThenEnqueuedAgainIsReservedOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0))
		_, err := b.store.Cancel(ctx, "a")
		require.NoError(t, err)
		// Its content must differ, or the enqueue repeats the cancelled one.
		replace(t, b, heraldtest.Notification(t, "a", b.clock.Now(), heraldtest.Payload(`{"n":2}`)))
		require.Equal(t, []string{"a"}, ids(b.reserveAll(t)))
		require.Empty(t, b.reserveAll(t))
	})

	t.Run("CancelledIsNotReserved", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0))
		b.enqueue(t, b.newNotification(t, "b", 0))
		_, err := b.store.Cancel(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, ids(b.reserveAll(t)))
	})

	t.Run("ReplacedIntoAnotherQueueIsNotReservedFromTheOld", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0))
		replace(t, b, heraldtest.Notification(t, "a", b.clock.Now(), heraldtest.Channel(notify.ChannelWebhook, "https://example.test/hook")))
		require.Empty(t, b.reserveAll(t))
		got, _, err := b.store.Reserve(ctx, store.QueuePush, heraldtest.AllShards(t, b.store), store.MaxReserve)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, ids(got))
	})

	t.Run("RoundedUpIsNotEarly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		// Due half a millisecond on: rounded up to the next millisecond,
		// which a reservation in this one must not take.
		at := b.clock.Now().Add(500 * time.Microsecond)
		b.enqueue(t, heraldtest.Notification(t, "a", b.clock.Now(), heraldtest.SendAt(at)))
		require.Empty(t, b.reserveAll(t))
		b.clock.Advance(time.Millisecond)
		got := b.reserveAll(t)
		require.Equal(t, []string{"a"}, ids(got))
		require.False(t, got[0].NextAttemptAt.Before(at), "due %v, asked for %v", got[0].NextAttemptAt, at)
	})

	t.Run("DueSetComesFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		// All in one shard, the one a reservation of one then takes from:
		// the store places an id by FNV-1a over its shard count.
		shardOf := func(id string) int {
			h := fnv.New32a()
			_, _ = h.Write([]byte(id))
			return int(h.Sum32() % uint32(len(heraldtest.AllShards(t, b.store))))
		}
		b.enqueue(t, b.newNotification(t, "scheduled", time.Second))
		b.clock.Advance(time.Second)
		added := 0
		for i := 0; added < 3; i++ {
			if id := fmt.Sprintf("new%d", i); shardOf(id) == shardOf("scheduled") {
				b.enqueue(t, b.newNotification(t, id, 0))
				added++
			}
		}
		got, _, err := b.store.Reserve(ctx, store.PullQueue("jobs"), []int{shardOf("scheduled")}, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"scheduled"}, ids(got), "what was due before is not held back by what came since")
		require.Len(t, b.reserveAll(t), 3)
	})

	t.Run("RecountSeesBothLists", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "pulled", 0))
		b.enqueue(t, heraldtest.Notification(t, "pushed", b.clock.Now(), heraldtest.Channel(notify.ChannelWebhook, "https://example.test/hook")))
		counted, err := b.store.Recount(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), counted["jobs"].Scheduled, "one on the pull queue's list, one on the push queue's")
	})

	t.Run("HeadsSeeTheList", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0))
		heads, err := b.store.Heads(ctx, store.PullQueue("jobs"))
		require.NoError(t, err)
		var due int
		for _, h := range heads {
			if !h.Due.IsZero() && !h.Due.After(b.clock.Now()) {
				due++
			}
		}
		require.Equal(t, 1, due, "one shard has work due: %+v", heads)
		require.Len(t, b.reserveAll(t), 1)
	})
}
