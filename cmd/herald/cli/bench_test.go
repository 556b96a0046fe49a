package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/bench"
)

func TestBench(t *testing.T) {
	t.Parallel()

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		r := newEnv(t, "").run(t, "bench", "--count", "300", "--window", "200ms", "--lead", "300ms", "--json")
		require.NoError(t, r.err)
		var got bench.Report
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.Equal(t, 300, got.Count)
		require.Equal(t, 300, got.Delivered)
		require.Zero(t, got.Early)
		require.False(t, got.Interrupted)
		require.Positive(t, got.PerSecond)
		require.Contains(t, got.Namespace, "herald-bench-")
	})

	t.Run("Text", func(t *testing.T) {
		t.Parallel()
		r := newEnv(t, "").run(t, "bench", "--count", "100", "--window", "0", "--lead", "200ms")
		require.NoError(t, r.err)
		require.Contains(t, r.out, "herald bench: 100 notifications due over 0s")
		require.Regexp(t, `delivered  100 of 100 in \d+ms from the first due time \(\d+/s\)`, r.out)
		require.Regexp(t, `lateness   p50 \d+\.\d\dms  p90 \S+  p99 \S+  max \S+  early 0`, r.out)
	})

	t.Run("BadCount", func(t *testing.T) {
		t.Parallel()
		r := newEnv(t, "").run(t, "bench", "--count", "0")
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "--count")
	})
}
