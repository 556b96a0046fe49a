package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/bench"
	"github.com/heraldhq/herald/internal/redistest"
)

func TestBench(t *testing.T) {
	t.Parallel()

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		r := e.run(t, "bench", "--count", "300", "--window", "200ms", "--lead", "300ms", "--json")
		require.NoError(t, r.err)
		var got bench.Report
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.Equal(t, 300, got.Count)
		require.Equal(t, 300, got.Delivered)
		require.Zero(t, got.Early)
		require.False(t, got.Interrupted)
		require.Positive(t, got.PerSecond)
		require.Contains(t, got.Namespace, "herald-bench-")
		// Nothing is left, in the run's namespace nor in the configured
		// one, where a shard count recorded would refuse a deployment
		// later started with another.
		for _, ns := range []string{got.Namespace, e.namespace} {
			left, err := server.Client(t).Keys(context.Background(), ns+":*").Result()
			require.NoError(t, err)
			require.Empty(t, left, ns)
		}
	})

	t.Run("Text", func(t *testing.T) {
		t.Parallel()
		r := newEnv(t, "").run(t, "bench", "--count", "100", "--window", "0", "--lead", "200ms")
		require.NoError(t, r.err)
		require.Contains(t, r.out, "herald bench: 100 notifications due over 0s")
		require.Regexp(t, `delivered  100 of 100 in \d+ms from the first due time \(\d+/s\)`, r.out)
		require.Regexp(t, `lateness   p50 \d+\.\d\dms  p90 \S+  p99 \S+  max \S+  early 0`, r.out)
	})

	t.Run("BadFlags", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		// --lead 0 ran with the default lead of 2s.
		for _, args := range [][]string{{"--count", "0"}, {"--lead", "0"}, {"--window", "-1s"}} {
			r := e.run(t, append([]string{"bench"}, args...)...)
			require.Equal(t, 2, r.code(), "%v", args)
			require.ErrorContains(t, r.err, args[0])
		}
	})

	t.Run("RefusesARedisThatEvicts", func(t *testing.T) {
		t.Parallel()
		// Its load would evict what the deployment stored there.
		srv := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
		r := newEnv(t, fmt.Sprintf("redis: {addrs: [%q]}", srv.Addr)).run(t, "bench", "--count", "10")
		require.Equal(t, 1, r.code())
		require.ErrorContains(t, r.err, "maxmemory-policy allkeys-lru")
		n, err := srv.Client(t).DBSize(context.Background()).Result()
		require.NoError(t, err)
		require.Zero(t, n, "nothing written")
	})
}
