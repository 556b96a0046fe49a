package api_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/redisconf"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/metrics"
)

// TestWhenRedisIsFull: with Redis at maxmemory (noeviction), an enqueue,
// single or batch, is a 503 that names the cause and asks for the same
// request again, not a generic unavailable store; the pull routes, a
// cancel and a purge of dead letters, which is how an operator makes room,
// still work.
// Once the limit is lifted the refused enqueue succeeds.
func TestWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t, redistest.Options{}).Client(t)
	b := setupOn(t, rdb, api.Config{})
	b.kill(t, "d", 3)
	b.enqueueJobs(t, 2)
	must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "later", "topic": "jobs", "delay": "1h"})

	lift := redistest.Fill(t, rdb)

	one := map[string]any{"id": "new", "topic": "jobs"}
	e := b.requireError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "", "POST", "/v1/notifications", one)
	require.Contains(t, e.Message, "out of memory")
	e = b.requireError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "", "POST", "/v1/notifications/batch",
		map[string]any{"notifications": []any{one, map[string]any{"id": "new2", "topic": "jobs"}}})
	require.Contains(t, e.Message, "out of memory")

	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=10", nil)
	require.Len(t, res.Notifications, 2)
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/"+res.Notifications[0].ID+"/ack",
		map[string]string{"receipt": res.Notifications[0].Receipt})
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/"+res.Notifications[1].ID+"/nack",
		map[string]string{"receipt": res.Notifications[1].Receipt, "error": "busy"})
	must[map[string]any](t, b, http.StatusOK, "DELETE", "/v1/notifications/later", nil)
	purged := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead?topic=single", nil)
	require.Equal(t, 3, purged.Purged)

	lift()
	must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications", one)
}

// readyMemory is /readyz's details.memory as an operator reads it.
type readyMemory struct {
	UsedBytes int64    `json:"used_bytes"`
	MaxBytes  int64    `json:"max_bytes"`
	UsedRatio *float64 `json:"used_ratio"`
	Warning   string   `json:"warning"`
}

type readyBody struct {
	Status  string `json:"status"`
	Details struct {
		Redis  map[string]any `json:"redis"`
		Memory readyMemory    `json:"memory"`
	} `json:"details"`
}

// redisMemory reads rdb's memory as herald serve's RedisMemoryFunc does.
func redisMemory(rdb *redis.Client) func(ctx context.Context) (api.RedisMemory, error) {
	return func(ctx context.Context) (api.RedisMemory, error) {
		used, limit, err := redisconf.Memory(ctx, rdb)
		return api.RedisMemory{Used: used, Max: limit}, err
	}
}

// TestReadyzShowsRedisMemory: /readyz shows what Redis uses against its
// maxmemory beside the other details, warns once Redis is 90% full and says
// when it is full, and stays ready (200) all along, since deliveries, pull
// workers and the purge that frees memory go on; the 503 of a refused
// enqueue counts as kind out_of_memory, and the gauges show used at or
// above max.
func TestReadyzShowsRedisMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t, redistest.Options{}).Client(t)
	m := metrics.New(&metrics.Config{RedisMemoryFunc: func(ctx context.Context) (int64, int64, error) {
		return redisconf.Memory(ctx, rdb)
	}})
	b := setupOn(t, rdb, api.Config{
		RedisMemoryFunc:  redisMemory(rdb),
		ReadyDetailsFunc: func() any { return map[string]any{"redis": map[string]any{"eviction_ok": true}} },
		Metrics:          m.Handler(),
		Observer:         m,
	})

	ready := must[readyBody](t, b, http.StatusOK, "GET", "/readyz", nil)
	require.Equal(t, "ready", ready.Status)
	require.Equal(t, map[string]any{"eviction_ok": true}, ready.Details.Redis, "the other details stay")
	require.Positive(t, ready.Details.Memory.UsedBytes)
	require.Zero(t, ready.Details.Memory.MaxBytes, "no limit")
	require.Nil(t, ready.Details.Memory.UsedRatio)
	require.Empty(t, ready.Details.Memory.Warning)

	used, _, err := redisconf.Memory(ctx, rdb)
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used*100/95, 10)).Err())
	ready = must[readyBody](t, b, http.StatusOK, "GET", "/readyz", nil)
	require.NotNil(t, ready.Details.Memory.UsedRatio)
	require.InDelta(t, 0.95, *ready.Details.Memory.UsedRatio, 0.04)
	require.Contains(t, ready.Details.Memory.Warning, "% full")
	require.Contains(t, ready.Details.Memory.Warning, "maxmemory")

	lift := redistest.Fill(t, rdb)
	ready = must[readyBody](t, b, http.StatusOK, "GET", "/readyz", nil)
	require.Equal(t, "ready", ready.Status)
	require.GreaterOrEqual(t, ready.Details.Memory.UsedBytes, ready.Details.Memory.MaxBytes)
	require.Contains(t, ready.Details.Memory.Warning, "Redis is at maxmemory")
	b.requireError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "", "POST", "/v1/notifications", map[string]any{"topic": "jobs"})
	status, text := b.do(t, "GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(text), `herald_redis_errors_total{kind="out_of_memory",op="enqueue"} 1`+"\n")
	usedGauge := regexp.MustCompile(`(?m)^herald_redis_memory_used_bytes (\S+)$`).FindSubmatch(text)
	maxGauge := regexp.MustCompile(`(?m)^herald_redis_memory_max_bytes (\S+)$`).FindSubmatch(text)
	require.NotNil(t, usedGauge, "%s", text)
	require.NotNil(t, maxGauge, "%s", text)
	usedValue, err := strconv.ParseFloat(string(usedGauge[1]), 64)
	require.NoError(t, err)
	maxValue, err := strconv.ParseFloat(string(maxGauge[1]), 64)
	require.NoError(t, err)
	require.Positive(t, maxValue)
	require.GreaterOrEqual(t, usedValue, maxValue)

	lift()
	ready = must[readyBody](t, b, http.StatusOK, "GET", "/readyz", nil)
	require.Zero(t, ready.Details.Memory.MaxBytes)
	require.Empty(t, ready.Details.Memory.Warning)
}

// TestRefusalsLoggedInSummary: a thousand enqueues a full Redis refuses
// cost the log the first refusal and at most a summary per 10 s, not a
// warning each (nor a warning request line each); the summaries count
// every refusal the first line did not, so nothing is lost, and Close
// writes the one still pending.
func TestRefusalsLoggedInSummary(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t, redistest.Options{}).Client(t)
	lines := &logLines{}
	b := setupOn(t, rdb, api.Config{Logger: recordingLogger(t, lines)})
	b.enqueueJobs(t, 1)
	redistest.Fill(t, rdb)

	const requests, workers = 1000, 8
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < requests; i += workers {
				_, err := expect[apiError](b, http.StatusServiceUnavailable, "POST", "/v1/notifications",
					map[string]any{"id": fmt.Sprint("n", i), "topic": "jobs"})
				errs <- err
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := lines.all()
	require.NotEmpty(t, got)
	require.LessOrEqual(t, len(got), 2+int(elapsed/(10*time.Second)), "%d lines, the first %q", len(got), got[0])
	require.Contains(t, got[0], "out of memory")
	require.Contains(t, got[0], "path=/v1/notifications")

	require.NoError(t, b.api.Close())
	refused := 1
	for _, line := range lines.all()[1:] {
		match := regexp.MustCompile(`refused=(\d+)`).FindStringSubmatch(line)
		require.NotNil(t, match, "a summary says how many: %s", line)
		n, err := strconv.Atoi(match[1])
		require.NoError(t, err)
		refused += n
	}
	require.Equal(t, requests, refused)
}
