package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/store"
)

// TestSignOutWhenRedisIsFullWithWaitReplicas: a sign-out goes through a
// full Redis when every write waits for a replica too, and a ttl of a
// millisecond and a half is kept as at least one.
func TestSignOutWhenRedisIsFullWithWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t, redistest.Options{})
	redistest.StartReplica(t, master)
	c := master.Client(t)
	st, err := store.New(&store.Config{Client: c, Namespace: redistest.Namespace(t), WaitReplicas: 1, WaitTimeout: 2 * time.Second, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	_, err = st.Shards(ctx)
	require.NoError(t, err)
	redistest.Fill(t, c)

	require.NoError(t, st.SignOut(ctx, "session", time.Hour))
	out, err := st.SignedOut(ctx, "session")
	require.NoError(t, err)
	require.True(t, out)
	require.NoError(t, st.SignOut(ctx, "brief", 1500*time.Microsecond))
}

// TestSignOutWhenAClusterIsFull: the same on a Cluster whose master of the
// session's slot is full.
func TestSignOutWhenAClusterIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	st, err := store.New(&store.Config{Client: cc, Namespace: redistest.Namespace(t), Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	_, err = st.Shards(ctx)
	require.NoError(t, err)
	// Fill cannot fill a master of a Cluster (its fillers' slots live
	// elsewhere): a limit far below what each uses refuses every write
	// that may grow memory all the same.
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.ConfigSet(ctx, "maxmemory", "1").Err()
	}))
	require.ErrorContains(t, cc.Set(ctx, "{x}probe", "1", 0).Err(), "OOM")
	require.NoError(t, st.SignOut(ctx, "session", time.Hour))
	out, err := st.SignedOut(ctx, "session")
	require.NoError(t, err)
	require.True(t, out)
}
