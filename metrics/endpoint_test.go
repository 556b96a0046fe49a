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
