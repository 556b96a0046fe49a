package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestEndpointsOnCluster runs every endpoint, pause, limit and health call
// on a 3-master Redis Cluster: each script touches one slot.
func TestEndpointsOnCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3)
	st, err := store.New(&store.Config{Client: cluster.Client(t), Namespace: redistest.Namespace(t), Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	n, err := st.Shards(ctx)
	require.NoError(t, err)
	require.Equal(t, store.ShardsDefault, n, "a new namespace on a Cluster spreads over 16 shards")

	e := &endpoint.Endpoint{URL: "https://m.example", MaxInFlight: 1, Rate: 1000}
	_, err = st.PutEndpoint(ctx, "m", e)
	require.NoError(t, err)
	_, err = st.Endpoint(ctx, "m")
	require.NoError(t, err)
	ok, _, err := st.Acquire(ctx, "m", e, "l1", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, st.Release(ctx, "m", "l1"))

	for _, id := range []string{"a", "b", "c", "d"} {
		n := heraldtest.Notification(t, id, time.Now(), heraldtest.Channel(notify.ChannelWebhook, "https://m.example"))
		_, _, err := st.Enqueue(ctx, n, false)
		require.NoError(t, err)
	}
	require.NoError(t, st.Pause(ctx, store.PauseTopic, "jobs"))
	var parked []store.Finish
	shards := heraldtest.AllShards(t, st)
	var items []*notify.Notification
	require.Eventually(t, func() bool { // due a millisecond after now, rounded up
		got, _, err := st.Reserve(ctx, store.QueuePush, shards, 10)
		require.NoError(t, err)
		items = append(items, got...)
		return len(items) == 4
	}, 5*time.Second, 5*time.Millisecond)
	for _, n := range items {
		parked = append(parked, store.Finish{Notification: n, Action: notify.ActionRelease, NextAt: store.ParkAt(store.PauseTopic, "jobs")})
	}
	_, err = st.Finish(ctx, parked)
	require.NoError(t, err)
	moved, err := st.UnparkStray(ctx, []string{store.QueuePush}, nil)
	require.NoError(t, err)
	require.Equal(t, 4, moved)

	_, err = st.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	_, err = st.EnableEndpoint(ctx, "m")
	require.NoError(t, err)
	require.NoError(t, st.DeleteEndpoint(ctx, "m"))
}
