package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redisconf"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/notify"
)

// TestRedisErrorKinds: a write a full Redis refused, a change replicas did
// not confirm and a Redis that did not answer are told apart by kind, so
// that an alert on an outage does not fire for a full Redis, nor the other
// way round; summed by op the counter reads as before the label.
func TestRedisErrorKinds(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{})
	m.StoreError("enqueue", fmt.Errorf("enqueue: %w", notify.ErrOutOfMemory))
	m.StoreError("enqueue", fmt.Errorf("enqueue: %w", notify.ErrOutOfMemory))
	m.StoreError("enqueue", fmt.Errorf("enqueue: %w", notify.ErrNotReplicated))
	m.StoreError("enqueue", context.DeadlineExceeded)
	m.StoreError("reserve", errors.New("dial tcp: connection refused"))
	requireSeries(t, scrape(t, m),
		`herald_redis_errors_total{kind="out_of_memory",op="enqueue"} 2`,
		`herald_redis_errors_total{kind="not_replicated",op="enqueue"} 1`,
		`herald_redis_errors_total{kind="other",op="enqueue"} 1`,
		`herald_redis_errors_total{kind="other",op="reserve"} 1`)
}

// gauge returns the value of the unlabelled series name in text.
func gauge(t *testing.T, text, name string) int64 {
	t.Helper()
	match := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(text)
	require.NotNil(t, match, "no %s in\n%s", name, text)
	v, err := strconv.ParseFloat(match[1], 64)
	require.NoError(t, err)
	return int64(v)
}

// TestRedisMemoryGauges: the gauges show what Redis uses against its
// maxmemory, 0 while it has none, so that an alert on their ratio warns
// before Redis refuses enqueues; once Redis is full used is at or above
// max. A failed read leaves them out and counts an error of op memory.
func TestRedisMemoryGauges(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t, redistest.Options{}).Client(t)
	var fail atomic.Bool
	m := metrics.New(&metrics.Config{RedisMemoryFunc: func(ctx context.Context) (int64, int64, error) {
		if fail.Load() {
			return 0, 0, redis.ErrClosed
		}
		return redisconf.Memory(ctx, rdb)
	}})
	text := scrape(t, m)
	require.Positive(t, gauge(t, text, metrics.RedisMemoryUsedBytes))
	require.Zero(t, gauge(t, text, metrics.RedisMemoryMaxBytes), "no limit")

	lift := redistest.Fill(t, rdb)
	text = scrape(t, m)
	used, limit := gauge(t, text, metrics.RedisMemoryUsedBytes), gauge(t, text, metrics.RedisMemoryMaxBytes)
	_, want, err := redisconf.Memory(context.Background(), rdb)
	require.NoError(t, err)
	require.Equal(t, want, limit)
	require.GreaterOrEqual(t, used, limit, "full")
	lift()

	fail.Store(true)
	text = scrape(t, m)
	require.NotContains(t, text, metrics.RedisMemoryUsedBytes+" ")
	require.Contains(t, scrape(t, m), `herald_redis_errors_total{kind="other",op="memory"} `)
}
