package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/bench"
	"github.com/heraldhq/herald/internal/redistest"
)

// server is the package's redis-server.
var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }

func TestSummarize(t *testing.T) {
	t.Parallel()

	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	tests := []struct {
		name     string
		lateness []time.Duration
		want     bench.Summary
	}{
		{"Empty", nil, bench.Summary{}},
		{"One", []time.Duration{ms(3)}, bench.Summary{Count: 1, P50: ms(3), P90: ms(3), P99: ms(3), Max: ms(3)}},
		{"Hundred", func() []time.Duration {
			out := make([]time.Duration, 0, 101)
			for i := 100; i >= 0; i-- {
				out = append(out, ms(i))
			}
			return out
		}(), bench.Summary{Count: 101, P50: ms(50), P90: ms(90), P99: ms(99), Max: ms(100)}},
		{"Early", []time.Duration{ms(-2), ms(1), -1, ms(4)}, bench.Summary{Count: 4, P50: -1, P90: ms(1), P99: ms(1), Max: ms(4), Early: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := append([]time.Duration(nil), tc.lateness...)
			require.Equal(t, tc.want, bench.Summarize(tc.lateness))
			require.Equal(t, in, tc.lateness, "the input is left as it was")
		})
	}
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("Spread", func(t *testing.T) {
		t.Parallel()
		client := server.Client(t)
		res, err := bench.Run(context.Background(), &bench.Config{Client: client, Count: 2000, Window: 500 * time.Millisecond,
			Lead: 500 * time.Millisecond, Shards: 4})
		require.NoError(t, err)
		require.False(t, res.Interrupted)
		require.Equal(t, 2000, res.Count)
		require.Equal(t, 2000, res.Delivered)
		require.Equal(t, 2000, res.Lateness.Count)
		require.Zero(t, res.Lateness.Early)
		require.Positive(t, res.Throughput())
		require.GreaterOrEqual(t, res.Elapsed, 500*time.Millisecond, "the last is due at the end of the window")
		require.LessOrEqual(t, res.Lateness.P50, res.Lateness.Max)

		keys, err := client.Keys(context.Background(), res.Namespace+":*").Result()
		require.NoError(t, err)
		require.Empty(t, keys, "the run's keys are deleted")
	})

	t.Run("Interrupted", func(t *testing.T) {
		t.Parallel()
		client := server.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		res, err := bench.Run(ctx, &bench.Config{Client: client, Count: 100, Lead: time.Hour, Namespace: "herald-bench-interrupted"})
		require.NoError(t, err)
		require.True(t, res.Interrupted)
		require.Zero(t, res.Delivered)
		keys, err := client.Keys(context.Background(), "herald-bench-interrupted:*").Result()
		require.NoError(t, err)
		require.Empty(t, keys)
	})

	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		_, err := bench.Run(context.Background(), &bench.Config{Client: server.Client(t), Namespace: "bench*"})
		require.ErrorContains(t, err, "glob")
		_, err = bench.Run(context.Background(), &bench.Config{})
		require.ErrorContains(t, err, "Client is required")
	})
}
