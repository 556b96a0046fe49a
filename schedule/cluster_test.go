package schedule_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// TestRedisCluster runs the whole life of notifications on a three-master
// Redis Cluster: every script touches one slot, or the cluster would refuse
// it with CROSSSLOT.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	newStore := func() *store.Store {
		st, err := store.New(&store.Config{Client: cluster.Client(t), Shards: 16, Logger: heraldtest.Logger(t)})
		require.NoError(t, err)
		return st
	}
	b := &testBundle{store: newStore()}
	set, err := policy.NewSet(map[string]policy.Policy{"fast": {Backoff: ms(0, 5, 5)}}, nil)
	require.NoError(t, err)
	b.policies = set

	const count = 2000
	b.enqueueMany(t, count, nil, 0)
	rec := newRecorder(func(_ context.Context, n *notify.Notification) error {
		if n.ID == "id7" {
			return notify.Permanent(fmt.Errorf("410 gone"))
		}
		return nil
	})
	for range 2 {
		d, err := schedule.New(&schedule.Config{Store: newStore(), Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
			PoliciesFunc: func() *policy.Set { return set }, Logger: heraldtest.Logger(t), ReapInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		t.Cleanup(d.Stop)
	}
	st := b.waitIdle(t, time.Minute)
	require.Equal(t, int64(count-1), st.SucceededTotal)
	require.Equal(t, int64(1), st.Dead)
	rec.mu.Lock()
	require.Zero(t, rec.overlaps)
	require.Equal(t, count, rec.total)
	rec.mu.Unlock()

	for _, node := range cluster.Nodes {
		keys, err := node.Client(t).DBSize(ctx).Result()
		require.NoError(t, err)
		require.Positive(t, keys, "the shards spread over every master")
	}

	dead, next, err := b.store.ListDead(ctx, "orders", 10, "")
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, dead, 1)
	matched, replayed, err := b.store.Replay(ctx, store.DeadFilter{Topic: "orders"}, store.DeadOptions{Reset: true})
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 1}, [2]int{matched, replayed})
	got := b.waitState(t, "id7", notify.StateDead)
	require.Len(t, got.History, 2, "replayed once, failed permanently again")

	b.enqueue(t, "later", ms(0), time.Hour)
	_, err = b.store.Cancel(ctx, "later")
	require.NoError(t, err)
	_, _, err = b.store.Sweep(ctx, 100)
	require.NoError(t, err)
}
