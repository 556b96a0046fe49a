package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestLostReservationAheadIsGivenBackWhole: a reservation ahead of the
// workers whose answer is lost in an outage that goes on is given back
// whole once Redis answers again: what it reserved comes back with no
// attempt counted rather than wait out its ttr.
func TestLostReservationAheadIsGivenBackWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := server.Client(t)
	lose := &heraldtest.LoseReservation{ThenDown: true}
	client.AddHook(lose)
	st, err := store.New(&store.Config{Client: client, Namespace: redistest.Namespace(t), Shards: 4, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	const count = 6
	for i := range count {
		_, _, err := st.Enqueue(ctx, heraldtest.Notification(t, fmt.Sprint("n", i), time.Now().Add(-time.Second),
			heraldtest.Backoff(0), func(r *notify.Request) { ttr := notify.Duration(time.Minute); r.TTR = &ttr }), false)
		require.NoError(t, err)
	}
	lose.Armed.Store(true)
	_, _, err = st.ReserveAhead(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), count)
	var lost *store.ReserveError
	require.ErrorAs(t, err, &lost, "the answer was lost and could not be given back at once")
	require.True(t, lose.Lost.Load())

	lose.Down.Store(false)
	stats, err := st.Stats(ctx)
	require.NoError(t, err)
	reserved := int(stats["jobs"].Reserved)
	require.Greater(t, reserved, 1, "several reserved ahead")
	given, err := st.GiveBack(ctx, lost.Lost)
	require.NoError(t, err)
	require.Equal(t, reserved, given, "all reserved ahead")
	stats, err = st.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, stats["jobs"].Reserved)

	for i := range count {
		n, err := st.Get(ctx, fmt.Sprint("n", i))
		require.NoError(t, err)
		require.Equal(t, notify.StateScheduled, n.State, n.ID)
		require.Zero(t, n.Attempts, n.ID)
		require.Empty(t, n.History, n.ID)
	}
	heraldtest.RequireStatsMatch(t, st)
}
