package cli

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/cmd/herald/config"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/store"
)

// TestEmbeddedExpiry: what the store keeps for a while on the embedded
// Redis, a dashboard sign-out, an endpoint's rate slot and lease set (and,
// alike, a minute's activity counts), is gone once its time has passed, as
// on a redis-server; otherwise a long-running herald serve would keep
// every one, and its memory would grow for as long as it runs.
func TestEmbeddedExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc, err := openRedis(ctx, &config.RedisConfig{Mode: config.RedisModeStandalone}, slog.New(slog.DiscardHandler), true, "test", nil)
	require.NoError(t, err)
	t.Cleanup(rc.close)
	st, err := store.New(&store.Config{Client: rc.client, Namespace: "expiry"})
	require.NoError(t, err)

	keys := func() []string {
		got, err := rc.client.Keys(ctx, "expiry:*").Result()
		require.NoError(t, err)
		slices.Sort(got)
		return got
	}
	require.NoError(t, st.SignOut(ctx, "session-1", time.Second))
	out, err := st.SignedOut(ctx, "session-1")
	require.NoError(t, err)
	require.True(t, out)
	limits := &endpoint.Endpoint{MaxInFlight: 1, Rate: 100}
	ok, _, err := st.Acquire(ctx, "ep", limits, "lease-1", 100*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"expiry:meta", "expiry:signedout:session-1", "expiry:{ep:ep}:inflight", "expiry:{ep:ep}:rate"}, keys())

	// A lease never released (its dispatcher died) holds its place until it
	// runs out.
	ok, _, err = st.Acquire(ctx, "ep", limits, "lease-2", 100*time.Millisecond)
	require.NoError(t, err)
	require.False(t, ok)
	waitFor(t, 10*time.Second, "the lease to run out", func() bool {
		ok, _, err := st.Acquire(ctx, "ep", limits, "lease-2", 100*time.Millisecond)
		require.NoError(t, err)
		return ok
	})

	waitFor(t, 10*time.Second, "the keys to expire", func() bool { return slices.Equal(keys(), []string{"expiry:meta"}) })
	out, err = st.SignedOut(ctx, "session-1")
	require.NoError(t, err)
	require.False(t, out, "the session would have ended by now")
}
