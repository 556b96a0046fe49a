package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/store"
)

// TestEveryAcceptedRateRuns: a rate the endpoint's validation accepts (PUT
// /v1/endpoints/{name}, the policies file) is one the limiter can run: its
// first attempt starts, and the next waits about an interval. One it
// cannot run is refused up front, naming the field, rather than accepted
// and then failing every attempt's limit check in Redis, which leaves the
// endpoint's notifications waiting for ever behind a store error.
func TestEveryAcceptedRateRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	for i, rate := range []float64{5e-324, 1e-300, 1e-15, 1e-12, 1e-9, 1e-6, 1e-3, 0.5, 1e6} {
		e := &endpoint.Endpoint{URL: "https://m.example", Rate: rate}
		if err := e.Validate(); err != nil {
			require.ErrorContains(t, err, "rate", "rate %g", rate)
			continue
		}
		name := fmt.Sprint("m", i)
		ok, _, err := b.store.Acquire(ctx, name, e, "first", time.Minute)
		require.NoError(t, err, "rate %g is accepted but cannot run", rate)
		require.True(t, ok, "rate %g: the first attempt waits", rate)
		ok, wait, err := b.store.Acquire(ctx, name, e, "second", time.Minute)
		require.NoError(t, err, "rate %g", rate)
		if rate >= 1000 {
			continue // the next slot may have come already
		}
		require.False(t, ok, "rate %g: two attempts at once", rate)
		interval := 1 / rate // seconds
		require.Positive(t, wait, "rate %g", rate)
		require.InDelta(t, interval, wait.Seconds(), interval/10+0.3, "rate %g: waits %s", rate, wait)
	}
}
