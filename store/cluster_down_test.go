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

// TestClusterMasterDown: while one master of a Cluster is down (killed,
// before its replica takes over, or for good), the other masters' shards
// are served: Reserve did, but Heads, which pull consumers read before
// they reserve, and Expired, the reaper's read, failed for every shard.
func TestClusterMasterDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3)
	// One dial a try, as herald's own cluster client: with more, the calls
	// outlast the node timeout and the whole Cluster refuses.
	cc := cluster.Client(t, func(o *redis.ClusterOptions) { o.DialerRetries = 1 })
	clock := heraldtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	st, err := store.New(&store.Config{Client: cc, Namespace: redistest.Namespace(t), Shards: 16,
		TimeNowFunc: clock.Now, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	enqueue := func(prefix string) {
		var reqs []store.EnqueueRequest
		for i := range 48 {
			reqs = append(reqs, store.EnqueueRequest{Notification: heraldtest.Notification(t, fmt.Sprint(prefix, i), clock.Now())})
		}
		_, err := st.EnqueueBatch(ctx, reqs)
		require.NoError(t, err)
	}
	enqueue("n")
	clock.Advance(time.Second)
	all := heraldtest.AllShards(t, st)
	got, _, err := st.Reserve(ctx, store.PullQueue("jobs"), all, store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, got, 48)
	// Half are parked under a pause of the topic, as a dispatcher parks
	// them; the other half stay reserved, for the reaper.
	require.NoError(t, st.Pause(ctx, store.PauseTopic, "jobs"))
	var parks []store.Finish
	for _, n := range got[:24] {
		parks = append(parks, store.Finish{Notification: n, Action: notify.ActionRelease, NextAt: store.ParkAt(store.PauseTopic, "jobs")})
	}
	errs, err := st.Finish(ctx, parks)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
	enqueue("m")

	// A master other than the one holding what is paused, which a resume
	// must reach first.
	pausedOn, err := cc.MasterForKey(ctx, st.Namespace()+":paused")
	require.NoError(t, err)
	var down *redis.Client
	for _, shard := range all {
		m, err := cc.MasterForKey(ctx, fmt.Sprintf("%s:{%d}:job", st.Namespace(), shard))
		require.NoError(t, err)
		if m.Options().Addr != pausedOn.Options().Addr {
			down = m
			break
		}
	}
	require.NotNil(t, down)
	for _, m := range cluster.Nodes {
		if m.Addr == down.Options().Addr {
			m.Kill()
		}
	}
	clock.Advance(time.Hour) // every reservation's ttr has run out

	heads, err := st.Heads(ctx, store.PullQueue("jobs"))
	require.NoError(t, err, "pull consumers read the heads before they reserve")
	require.NotEmpty(t, heads)
	for _, h := range heads {
		m, err := cc.MasterForKey(ctx, fmt.Sprintf("%s:{%d}:job", st.Namespace(), h.Shard))
		require.NoError(t, err)
		require.NotEqual(t, down.Options().Addr, m.Options().Addr, "shard %d is on the master down", h.Shard)
	}
	expired, err := st.Expired(ctx, 0, 100)
	require.NoError(t, err, "the reaper reaps the masters that answer")
	require.NotEmpty(t, expired)

	// A resume unparks the shards that answer, and says one did not.
	moved, err := st.Resume(ctx, store.PauseTopic, "jobs")
	require.Error(t, err)
	require.Positive(t, moved, "the shards after the one that failed too")
	reached := 0
	for _, f := range parks {
		n, err := st.Get(ctx, f.Notification.ID)
		if err != nil {
			continue // on the master down
		}
		reached++
		require.False(t, store.Parked(n), "%s is still parked", n.ID)
	}
	require.Equal(t, reached, moved)
}
