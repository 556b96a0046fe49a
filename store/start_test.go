package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// reserveAhead reserves count due notifications of the bundle's pull
// topic ahead of the workers, none started at once, in the order a
// dispatcher hands them to its workers.
func (b *testBundle) reserveAhead(t *testing.T, count int) []*notify.Notification {
	t.Helper()
	items, _, err := b.store.ReserveAhead(context.Background(), store.PullQueue("jobs"), []int{0}, count)
	require.NoError(t, err)
	require.Len(t, items, count)
	for _, n := range items {
		require.True(t, store.Ahead(n), n.ID)
	}
	return items
}

// expired runs the reaper's read once every reservation ran out, and
// returns what it counts as attempts that ran out.
func (b *testBundle) expired(t *testing.T) []*notify.Notification {
	t.Helper()
	b.clock.Advance(time.Hour)
	expired, err := b.store.Expired(context.Background(), 0, 100)
	require.NoError(t, err)
	return expired
}

// expire is expired's ids.
func (b *testBundle) expire(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, n := range b.expired(t) {
		out[n.ID] = true
	}
	return out
}

// requireGivenBack checks that id waits for its first attempt again, with
// none counted.
func (b *testBundle) requireGivenBack(t *testing.T, id string) {
	t.Helper()
	got, err := b.store.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, got.State, id)
	require.Zero(t, got.Attempts, id)
	require.Empty(t, got.History, id)
}

// TestStartAhead: of what a dispatcher reserved ahead of its workers and
// then left to run out (it was killed), the reaper counts the attempts
// whose start was recorded, those the workers took before them included,
// and gives back uncounted the ones after, which no worker took.
func TestStartAhead(t *testing.T) {
	t.Parallel()
	onEachDeployment(t, func(t *testing.T, client redis.UniversalClient, shards int) {
		ctx := context.Background()
		b := setup(t, store.Config{Client: client, Shards: shards})
		const count = 5
		for i := range count {
			b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0))
		}
		items, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), store.MaxReserve)
		require.NoError(t, err)
		require.Len(t, items, count)
		for _, n := range items {
			require.True(t, store.Ahead(n), n.ID)
		}
		// The workers took items[0] to items[2], in that order, and
		// started them as the scheduler let them.
		b.store.Start(items[0])
		b.store.Start(items[2])
		b.store.Start(items[1])
		require.NoError(t, b.store.Started(ctx))

		counted := b.expire(t)
		require.Equal(t, map[string]bool{items[0].ID: true, items[1].ID: true, items[2].ID: true}, counted)
		for _, n := range items[3:] {
			b.requireGivenBack(t, n.ID)
		}
		heraldtest.RequireStatsMatch(t, b.store)
	})
}

// TestStartsOfOneStore: one Store's starts count none of what another
// reserved ahead, and starts noted at the same time are all recorded.
func TestStartsOfOneStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Shards: 1})
	other, err := store.New(&store.Config{Client: server.Client(t), Namespace: b.store.Namespace(), TimeNowFunc: b.clock.Now})
	require.NoError(t, err)
	const count = 40
	for i := range count {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0))
	}
	mine := b.reserveAhead(t, count/2)
	theirs, _, err := other.ReserveAhead(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, other), store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, theirs, count/2, "the rest")

	var wg sync.WaitGroup
	for _, n := range mine {
		wg.Go(func() { b.store.Start(n) })
	}
	wg.Wait()
	require.NoError(t, b.store.Started(ctx))
	counted := b.expire(t)
	require.Len(t, counted, len(mine))
	for _, n := range mine {
		require.True(t, counted[n.ID], n.ID)
	}
	for _, n := range theirs {
		b.requireGivenBack(t, n.ID)
	}
	heraldtest.RequireStatsMatch(t, b.store)
}

// TestStartedUnderLoad: Started waits for the starts noted before it, not
// for those that keep coming, so that a reaper is not held up while the
// workers go on starting attempts.
func TestStartedUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Shards: 1})
	const count = store.MaxReserve
	reqs := make([]store.EnqueueRequest, count)
	for i := range reqs {
		reqs[i].Notification = b.newNotification(t, fmt.Sprint("n", i), 0)
	}
	_, err := b.store.EnqueueBatch(ctx, reqs)
	require.NoError(t, err)
	items := b.reserveAhead(t, count)

	b.store.Start(items[0])
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() { // a start every 2ms for 2s
		for _, n := range items[1:] {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				b.store.Start(n)
			}
		}
	})
	wait, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	require.NoError(t, b.store.Started(wait), "the first start is written while others come")
}
