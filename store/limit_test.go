package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/store"
)

func TestLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MaxInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		e := &endpoint.Endpoint{MaxInFlight: 2}
		for i := range 2 {
			ok, _, err := b.store.Acquire(ctx, "m", e, fmt.Sprint("lease-", i), time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
		}
		ok, wait, err := b.store.Acquire(ctx, "m", e, "lease-2", time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "a third attempt started under max_in_flight 2")
		require.Zero(t, wait)
		ok, _, err = b.store.Acquire(ctx, "other", e, "lease-x", time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "another endpoint's limit was taken")

		require.NoError(t, b.store.Release(ctx, "m", "lease-0"))
		ok, _, err = b.store.Acquire(ctx, "m", e, "lease-2", time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "a released place was not given")
	})

	t.Run("LeaseOfADeadDispatcherExpires", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		e := &endpoint.Endpoint{MaxInFlight: 1}
		const lease = 300 * time.Millisecond
		ok, _, err := b.store.Acquire(ctx, "m", e, "killed", lease)
		require.NoError(t, err)
		require.True(t, ok)
		taken := time.Now()
		// Its holder never releases it, as a SIGKILLed dispatcher would not.
		ok, _, err = b.store.Acquire(ctx, "m", e, "next", lease)
		require.NoError(t, err)
		require.False(t, ok)
		require.Eventually(t, func() bool {
			ok, _, err := b.store.Acquire(ctx, "m", e, "next", lease)
			return err == nil && ok
		}, 5*time.Second, 10*time.Millisecond)
		held := time.Since(taken)
		require.GreaterOrEqual(t, held, lease-20*time.Millisecond, "the place came back before its lease ended")
		require.Less(t, held, lease+time.Second, "the place stayed lost well past its lease")
	})

	t.Run("ShortLeaseKeepsLongerOnes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		e := &endpoint.Endpoint{MaxInFlight: 2}
		ok, _, err := b.store.Acquire(ctx, "m", e, "long", time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		ok, _, err = b.store.Acquire(ctx, "m", e, "short", 10*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, b.store.Release(ctx, "m", "short"))
		// Past the short lease's second of grace, when the leases' set
		// once expired, taking the minute-long lease with it.
		time.Sleep(1500 * time.Millisecond)
		ok, _, err = b.store.Acquire(ctx, "m", e, "next", time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "the short lease's place was not given")
		ok, _, err = b.store.Acquire(ctx, "m", e, "third", time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "a third attempt started under max_in_flight 2 while the long lease runs")
	})

	t.Run("RateAcrossClients", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		e := &endpoint.Endpoint{Rate: 100}
		var granted atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(2 * time.Second)
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(deadline); i++ {
					ok, wait, err := b.store.Acquire(ctx, "m", e, fmt.Sprint(w, "-", i), time.Minute)
					if err != nil {
						return
					}
					if ok {
						granted.Add(1)
						continue
					}
					time.Sleep(wait)
				}
			}()
		}
		wg.Wait()
		// Never more than the rate allows (2s at 100/s, plus the 250ms of
		// slack and the first slot); the lower bound depends on how soon
		// the waiters run again, which the dispatchers' test measures.
		require.LessOrEqual(t, granted.Load(), int64(200+25+1), "more than 100/s")
		require.Greater(t, granted.Load(), int64(100), "far below 100/s")
	})

	t.Run("BurstAfterIdleness", func(t *testing.T) {
		t.Parallel()
		// After a pause, the attempt that ends it may be followed at once by
		// rate × 250ms more: none at low rates, and at high ones the slack
		// that absorbs the dispatchers' scheduling jitter.
		for _, tt := range []struct {
			name  string
			rate  float64
			burst int
		}{
			{name: "OnePerTenSeconds", rate: 0.1, burst: 1},
			{name: "OnePerSecond", rate: 1, burst: 1},
			{name: "TwoPerSecond", rate: 2, burst: 1},
			{name: "FourPerSecond", rate: 4, burst: 2},
			{name: "TenPerSecond", rate: 10, burst: 3},
			{name: "HundredPerSecond", rate: 100, burst: 26},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, store.Config{})
				e := &endpoint.Endpoint{Rate: tt.rate}
				interval := time.Duration(float64(time.Second) / tt.rate)
				start := time.Now()
				granted := 0
				for time.Since(start) < time.Second {
					ok, wait, err := b.store.Acquire(ctx, "m", e, fmt.Sprint(granted), time.Minute)
					require.NoError(t, err)
					if !ok {
						require.Positive(t, wait)
						require.LessOrEqual(t, wait, interval)
						break
					}
					granted++
				}
				// Slots that came due while the requests ran may add to it.
				due := int(time.Since(start) / interval)
				require.GreaterOrEqual(t, granted, tt.burst, "high rates lost their slack")
				require.LessOrEqual(t, granted, tt.burst+due, "a burst larger than rate × 250ms")
			})
		}
	})
}

// TestLimitCost measures what limits add to an attempt in Redis: with both
// max_in_flight and rate, one script (TIME, ZREMRANGEBYSCORE, ZCARD, GET,
// SET, ZADD, PTTL) to start and one ZREM to end, two round trips. The
// PEXPIRE that extends the leases' set comes about once per lease length,
// here only in the first, unmeasured, attempt.
func TestLimitCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	client := srv.Client(t)
	st, err := store.New(&store.Config{Client: client, Namespace: redistest.Namespace(t), Shards: 4})
	require.NoError(t, err)
	for _, tt := range []struct {
		name            string
		endpoint        endpoint.Endpoint
		commands, trips int64
	}{
		{"MaxInFlightAndRate", endpoint.Endpoint{MaxInFlight: 1000, Rate: 1e6}, 9, 2},
		{"MaxInFlight", endpoint.Endpoint{MaxInFlight: 1000}, 7, 2},
		{"Rate", endpoint.Endpoint{Rate: 1e6}, 4, 1},
	} {
		ok, _, err := st.Acquire(ctx, tt.name, &tt.endpoint, "warm", time.Minute) // loads the script
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, client.ConfigResetStat(ctx).Err())
		const n = 100
		for i := range n {
			ok, _, err := st.Acquire(ctx, tt.name, &tt.endpoint, fmt.Sprint(i), time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
			if tt.endpoint.MaxInFlight > 0 { // as the dispatcher does: a rate slot is spent, not held
				require.NoError(t, st.Release(ctx, tt.name, fmt.Sprint(i)))
			}
		}
		info := client.Info(ctx, "commandstats").Val()
		var total int64
		for line := range strings.Lines(info) {
			if strings.HasPrefix(line, "cmdstat_") && !strings.HasPrefix(line, "cmdstat_config") && !strings.HasPrefix(line, "cmdstat_info") {
				total += commandCalls(t, info, strings.TrimPrefix(line[:strings.Index(line, ":")], "cmdstat_"))
			}
		}
		trips := commandCalls(t, info, "evalsha") + commandCalls(t, info, "zrem")
		t.Logf("%s: %.1f commands, %.1f round trips per attempt", tt.name, float64(total)/n, float64(trips)/n)
		require.Equal(t, tt.commands*n, total, tt.name)
		require.Equal(t, tt.trips*n, trips, tt.name)
	}
}
