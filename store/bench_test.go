package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// BenchmarkScriptCost measures the Redis CPU each phase of a life costs
// per notification, on a redis-server of its own, batches of 100: enqueue
// (new notifications due now), reserve, and ack. It is the figure to watch
// when changing a script: the Lua a script runs per item costs more than
// the commands it calls.
func BenchmarkScriptCost(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = client.Close() })
	st, err := store.New(&store.Config{Client: client})
	require.NoError(b, err)
	ctx := context.Background()
	now := time.Now()
	const batch = 100
	reqs := make([]store.EnqueueRequest, b.N)
	for i := range reqs {
		reqs[i].Notification = heraldtest.Notification(b, "n-"+strconv.Itoa(i), now)
	}
	all := heraldtest.AllShards(b, st)
	b.ResetTimer()

	cpu0 := redisCPU(b, client)
	for i := 0; i < b.N; i += batch {
		_, err := st.EnqueueBatch(ctx, reqs[i:min(i+batch, b.N)])
		require.NoError(b, err)
	}
	cpu1 := redisCPU(b, client)
	var reserved []*notify.Notification
	for len(reserved) < b.N {
		got, _, err := st.Reserve(ctx, store.PullQueue("jobs"), all, batch)
		require.NoError(b, err)
		require.NotEmpty(b, got, "reserved %d of %d", len(reserved), b.N)
		reserved = append(reserved, got...)
	}
	cpu2 := redisCPU(b, client)
	for i := 0; i < len(reserved); i += batch {
		var fs []store.Finish
		for _, n := range reserved[i:min(i+batch, len(reserved))] {
			t := time.Now()
			fs = append(fs, store.Finish{Notification: n, Action: notify.ActionAck,
				Attempt: notify.Attempt{Attempt: 1, StartedAt: t, FinishedAt: t, Outcome: notify.OutcomeSuccess}})
		}
		errs, err := st.Finish(ctx, fs)
		require.NoError(b, err)
		for _, e := range errs {
			require.NoError(b, e)
		}
	}
	cpu3 := redisCPU(b, client)
	b.StopTimer()

	n := float64(b.N)
	b.ReportMetric((cpu1-cpu0)/n*1e6, "enqueue-us/n")
	b.ReportMetric((cpu2-cpu1)/n*1e6, "reserve-us/n")
	b.ReportMetric((cpu3-cpu2)/n*1e6, "ack-us/n")
	b.ReportMetric((cpu3-cpu0)/n*1e6, "life-us/n")
}

// redisCPU reads the CPU seconds a redis-server has used.
func redisCPU(b *testing.B, client *redis.Client) float64 {
	b.Helper()
	info, err := client.Info(context.Background(), "cpu").Result()
	require.NoError(b, err)
	var cpu float64
	for line := range strings.Lines(info) {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(b, err, fmt.Sprintf("INFO cpu %q", line))
				cpu += f
			}
		}
	}
	return cpu
}
