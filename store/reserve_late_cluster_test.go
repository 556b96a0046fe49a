package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestReservationArrivingAfterItsGiveBackOnACluster: on a Cluster, where a
// Reserve sends one call per shard to the shards' masters, a call held up
// on its way while the others answer is given back, and when it reaches
// its master it reserves nothing: its mark is in the slot its script
// reads. What the others reserved comes back; the rest is due,
// unattempted, and handed out once asked again.
func TestReservationArrivingAfterItsGiveBackOnACluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	held := &heldWrite{}
	client := cl.Client(t, func(o *redis.ClusterOptions) { o.ReadTimeout, o.Dialer = 200*time.Millisecond, held.dial })
	st, err := store.New(&store.Config{Client: client, Namespace: redistest.Namespace(t), Shards: 4, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	const n = 32 // in every shard
	for i := range n {
		_, _, err := st.Enqueue(ctx, heraldtest.Notification(t, fmt.Sprint("n", i), time.Now().Add(-time.Second)), false)
		require.NoError(t, err)
	}
	_, _, err = st.Reserve(ctx, store.PullQueue("other"), heraldtest.AllShards(t, st), 1) // loads the script
	require.NoError(t, err)

	held.armed.Store(true)
	items, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), 100)
	require.NoError(t, err, "what the other masters reserved comes back")
	require.Less(t, len(items), n, "one master's answer never came")
	releaseLate(t, held)

	taken := map[string]bool{}
	for _, it := range items {
		taken[it.ID] = true
	}
	for i := range n {
		got, err := st.Get(ctx, fmt.Sprint("n", i))
		require.NoError(t, err)
		if !taken[got.ID] {
			require.Equal(t, notify.StateScheduled, got.State, "%s is not reserved for no one", got.ID)
		}
	}
	got, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), 100)
	require.NoError(t, err)
	require.Len(t, got, n-len(items))
	for _, g := range got {
		require.False(t, taken[g.ID], g.ID)
		require.Zero(t, g.Attempts, g.ID)
	}
}
