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

// TestClusterNodeLosesAReservation: on a Cluster, a reservation over two
// shards whose answer comes back for one and is lost for the other returns
// what came back and gives back at once what the other reserved, where
// that waited out its ttr and then counted an attempt never made.
func TestClusterNodeLosesAReservation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cc := redistest.StartCluster(t, 3).Client(t)
	lose := &heraldtest.LoseReservation{Only: "{1}:"}
	cc.AddHook(lose)
	st, err := store.New(&store.Config{Client: cc, Namespace: redistest.Namespace(t), Shards: 2, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	const count = 16 // n0..n15 fall in both shards
	for i := range count {
		_, _, err := st.Enqueue(ctx, heraldtest.Notification(t, fmt.Sprint("n", i), time.Now().Add(-time.Second),
			heraldtest.Backoff(0), func(r *notify.Request) { ttr := notify.Duration(time.Minute); r.TTR = &ttr }), false)
		require.NoError(t, err)
	}
	lose.Armed.Store(true)
	first, _, err := st.Reserve(ctx, store.PullQueue("jobs"), []int{0, 1}, count)
	require.NoError(t, err, "what came back is returned")
	require.True(t, lose.Lost.Load(), "shard 1's answer was lost")
	require.NotEmpty(t, first)
	require.Less(t, len(first), count)

	again, _, err := st.Reserve(ctx, store.PullQueue("jobs"), []int{0, 1}, count)
	require.NoError(t, err)
	require.Len(t, again, count-len(first), "what shard 1 reserved was given back")
	for _, n := range again {
		require.Zero(t, n.Attempts, n.ID)
		require.Empty(t, n.History, n.ID)
	}
}
