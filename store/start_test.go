package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestStartAhead: a reservation that starts only its first notification at
// once reserves the others ahead. Start records the start of one of those
// once, and its attempt then finishes as any other; the start of one
// cancelled, or given back by a reaper, while it waited is refused and
// changes nothing, so that its attempt is not made.
func TestStartAhead(t *testing.T) {
	t.Parallel()
	onEachDeployment(t, func(t *testing.T, client redis.UniversalClient, shards int) {
		ctx := context.Background()
		b := setup(t, store.Config{Client: client, Shards: shards})
		const count = 4
		for i := range count {
			b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0))
		}
		items, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), count, 1)
		require.NoError(t, err)
		require.Len(t, items, count)
		var ahead []*notify.Notification
		for _, n := range items {
			if store.Ahead(n) {
				ahead = append(ahead, n)
			} else {
				require.NoError(t, b.store.Start(ctx, n), "one started at once needs no start")
			}
		}
		require.Len(t, ahead, count-1)

		started, cancelled, reaped := ahead[0], ahead[1], ahead[2]
		receipt := started.Receipt
		require.NoError(t, b.store.Start(ctx, started))
		require.False(t, store.Ahead(started))
		require.NotEqual(t, receipt, started.Receipt)
		require.NoError(t, b.store.Start(ctx, started), "a second start is none")
		errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, started, time.Time{})})
		require.NoError(t, err)
		require.NoError(t, errs[0], "the started attempt finishes")

		_, err = b.store.Cancel(ctx, cancelled.ID)
		require.NoError(t, err)
		require.ErrorIs(t, b.store.Start(ctx, cancelled), notify.ErrStaleReceipt)
		got, err := b.store.Get(ctx, cancelled.ID)
		require.NoError(t, err)
		require.Equal(t, notify.StateCancelled, got.State)
		require.Zero(t, got.Attempts)

		errs, err = b.store.GiveBackUnstarted(ctx, []*notify.Notification{reaped})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		require.ErrorIs(t, b.store.Start(ctx, reaped), notify.ErrStaleReceipt)
		got, err = b.store.Get(ctx, reaped.ID)
		require.NoError(t, err)
		require.Equal(t, notify.StateScheduled, got.State, "given back, not started")
		require.Zero(t, got.Attempts)
		require.Empty(t, got.History)
		heraldtest.RequireStatsMatch(t, b.store)
	})
}

// TestStartsTogether: starts made at the same time, of notifications in
// several shards, are written together and each answered for itself.
func TestStartsTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Shards: 4})
	const count = 40
	for i := range count {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0))
	}
	var items []*notify.Notification
	for len(items) < count { // the shards hold unequal shares
		got, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), count, 0)
		require.NoError(t, err)
		require.NotEmpty(t, got)
		items = append(items, got...)
	}
	_, err := b.store.Cancel(ctx, items[0].ID)
	require.NoError(t, err)
	errs := make(chan error, count)
	for _, n := range items {
		go func() { errs <- b.store.Start(ctx, n) }()
	}
	stale := 0
	for range count {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, notify.ErrStaleReceipt)
			stale++
		}
	}
	require.Equal(t, 1, stale, "the one cancelled")
	for _, n := range items[1:] {
		require.False(t, store.Ahead(n), n.ID)
		errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, n, time.Time{})})
		require.NoError(t, err)
		require.NoError(t, errs[0], n.ID)
	}
	heraldtest.RequireStatsMatch(t, b.store)
}
