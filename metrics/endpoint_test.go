package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

func TestEndpointDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.New(&store.Config{Client: srv.Client(t), Namespace: redistest.Namespace(t), Shards: 2})
	require.NoError(t, err)
	m := metrics.New(&metrics.Config{Store: st})
	require.NotContains(t, scrape(t, m), metrics.EndpointDisabled+"{")

	_, err = st.EndpointFailed(ctx, "m42", time.Millisecond)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		disabled, err := st.EndpointFailed(ctx, "m42", time.Millisecond)
		return err == nil && disabled
	}, 5*time.Second, 2*time.Millisecond)
	require.Contains(t, scrape(t, m), metrics.EndpointDisabled+`{endpoint="m42"} 1`)

	_, err = st.EnableEndpoint(ctx, "m42")
	require.NoError(t, err)
	require.NotContains(t, scrape(t, m), metrics.EndpointDisabled+"{")
}

// TestPaused pauses a topic and an endpoint: the scrape says since when
// each is paused, so that an alert finds the pause someone forgot, which
// holds deliveries back without failing any; resuming removes it.
func TestPaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, err := store.New(&store.Config{Client: srv.Client(t), Namespace: redistest.Namespace(t), Shards: 2,
		TimeNowFunc: func() time.Time { return at }})
	require.NoError(t, err)
	m := metrics.New(&metrics.Config{Store: st})
	require.NotContains(t, scrape(t, m), "herald_paused_timestamp_seconds{")

	require.NoError(t, st.Pause(ctx, store.PauseTopic, "orders"))
	require.NoError(t, st.Pause(ctx, store.PauseEndpoint, "m42"))
	text := scrape(t, m)
	require.Contains(t, text, `herald_paused_timestamp_seconds{kind="topic",name="orders"} 1.7723664e+09`+"\n")
	require.Contains(t, text, `herald_paused_timestamp_seconds{kind="endpoint",name="m42"} 1.7723664e+09`+"\n")

	_, err = st.Resume(ctx, store.PauseTopic, "orders")
	require.NoError(t, err)
	text = scrape(t, m)
	require.NotContains(t, text, `name="orders"`)
	require.Contains(t, text, `name="m42"`)
}
