package cli

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
)

// TestRedisMemoryConcurrentReaders: probes and scrapes that ask at once
// share one reading: callers that find it stale while another reads wait
// for that reading rather than each send INFO, and all get the same
// figures.
func TestRedisMemoryConcurrentReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.Start(t, redistest.Options{}).Client(t)
	m := &redisMemory{client: c}
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1000000000").Err())
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for range 50 {
				if w%2 == 0 {
					got, err := m.read(ctx)
					require.NoError(t, err)
					require.Positive(t, got.Used)
					require.EqualValues(t, 1000000000, got.Max)
				} else {
					used, limit, err := m.usage(ctx)
					require.NoError(t, err)
					require.Positive(t, used)
					require.EqualValues(t, 1000000000, limit)
				}
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, infoCalls(t, c), 1+int(time.Since(start)/memoryCacheFor))
}
