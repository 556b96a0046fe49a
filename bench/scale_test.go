package bench_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// BenchmarkScale measures throughput on one redis-server and on a local
// Cluster of three masters: 16 producers enqueue b.N notifications with
// single calls (what the API does per request), then one dispatcher per
// master (concurrency 64 each, a no-op handler) drains them. It reports
// both rates, the Redis CPU (all masters together) per notification's
// life and per enqueue (the rest is its one attempt), from which
// docs/scaling.md sizes deployments, and the busiest master's share of it. ns/op is per notification.
func BenchmarkScale(b *testing.B) {
	b.Run("Standalone", func(b *testing.B) {
		srv := redistest.Start(b, redistest.Options{})
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
		b.Cleanup(func() { _ = client.Close() })
		runScale(b, client, []*redis.Client{client}, 1)
	})
	b.Run("Cluster3", func(b *testing.B) {
		c := redistest.StartCluster(b, 3)
		client := c.Client(b)
		var nodes []*redis.Client
		for _, s := range c.Nodes {
			nodes = append(nodes, s.Client(b))
		}
		runScale(b, client, nodes, len(c.Nodes))
	})
}

func runScale(b *testing.B, client redis.UniversalClient, nodes []*redis.Client, dispatchers int) {
	st, err := store.New(&store.Config{Client: client, Namespace: "scale"})
	require.NoError(b, err)
	set, err := policy.NewSet(nil, nil)
	require.NoError(b, err)
	cpu0 := redisCPU(b, nodes)
	b.ResetTimer()

	start := time.Now()
	heraldtest.EnqueueConcurrently(b, st, set, 16, b.N)
	enqueued := time.Since(start)
	cpuEnqueued := redisCPU(b, nodes)

	var done atomic.Int64
	finished := make(chan struct{})
	noop := notify.SenderFunc(func(context.Context, *notify.Notification) (notify.Response, error) {
		if done.Add(1) == int64(b.N) {
			close(finished)
		}
		return notify.Response{}, nil
	})
	drainStart := time.Now()
	var ds []*schedule.Dispatcher
	for range dispatchers {
		d, err := schedule.New(&schedule.Config{Store: st, Concurrency: 64, PoliciesFunc: func() *policy.Set { return set },
			Handlers: map[string]notify.Sender{"bench": noop}})
		require.NoError(b, err)
		require.NoError(b, d.Start(context.Background()))
		ds = append(ds, d)
	}
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		b.Fatalf("drained %d of %d in 5 minutes", done.Load(), b.N)
	}
	drained := time.Since(drainStart)
	for _, d := range ds {
		d.Stop()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(n/enqueued.Seconds(), "enqueues/s")
	b.ReportMetric(n/drained.Seconds(), "drained/s")
	cpu := redisCPU(b, nodes)
	var total, enqueue, busiest float64
	for i := range cpu {
		total += cpu[i] - cpu0[i]
		enqueue += cpuEnqueued[i] - cpu0[i]
		busiest = max(busiest, cpu[i]-cpu0[i])
	}
	b.ReportMetric(total/n*1e6, "redis-cpu-us/notification")
	b.ReportMetric(enqueue/n*1e6, "redis-cpu-us/enqueue")
	b.ReportMetric(busiest/total, "busiest-master-share")
}

// redisCPU returns the CPU seconds each server has used.
func redisCPU(b *testing.B, nodes []*redis.Client) []float64 {
	b.Helper()
	cpu := make([]float64, len(nodes))
	for i, c := range nodes {
		info, err := c.Info(context.Background(), "cpu").Result()
		require.NoError(b, err)
		for line := range strings.Lines(info) {
			for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
					f, err := strconv.ParseFloat(v, 64)
					require.NoError(b, err, fmt.Sprintf("%s in INFO cpu", k))
					cpu[i] += f
				}
			}
		}
	}
	return cpu
}

// BenchmarkDurableEnqueue measures what an acknowledged enqueue costs under
// each durability setting: on one server without persistence, with AOF
// fsynced every second and on every write (appendfsync always), and with
// one replica, without and with redis.wait_replicas 1. One producer making
// single calls gives the latency per enqueue (ns/op, p50 and p99); 16
// producers give the throughput.
func BenchmarkDurableEnqueue(b *testing.B) {
	for _, bc := range []struct {
		name    string
		opts    redistest.Options
		replica bool
		wait    int
	}{
		{"NoPersistence", redistest.Options{}, false, 0},
		{"AOFEverysec", redistest.Options{AOF: true, Args: []string{"--appendfsync", "everysec"}}, false, 0},
		{"AOFAlways", redistest.Options{AOF: true}, false, 0},
		{"Replica/WaitReplicas0", redistest.Options{}, true, 0},
		{"Replica/WaitReplicas1", redistest.Options{}, true, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b, bc.opts)
			if bc.replica {
				redistest.StartReplica(b, srv)
			}
			client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
			b.Cleanup(func() { _ = client.Close() })
			st, err := store.New(&store.Config{Client: client, Namespace: "durable", WaitReplicas: bc.wait})
			require.NoError(b, err)
			set, err := policy.NewSet(nil, nil)
			require.NoError(b, err)
			var seq atomic.Int64
			enqueue := func() bool {
				n, err := set.Resolve(&notify.Request{ID: "n" + strconv.FormatInt(seq.Add(1), 10), Topic: "bench", Channel: notify.ChannelPull,
					Payload: []byte(`{"order":"2026112200001"}`), Delay: ptr(notify.Duration(time.Hour))}, time.Now(), 0)
				if err == nil {
					_, _, err = st.Enqueue(context.Background(), n, false)
				}
				if err != nil {
					b.Error(err)
				}
				return err == nil
			}
			lat := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if !enqueue() {
					return
				}
				lat[i] = time.Since(t0)
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")

			// Throughput: 16 producers, as many enqueues again.
			var left atomic.Int64
			left.Store(int64(b.N))
			start := time.Now()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if !enqueue() {
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "enqueues/s@16")
		})
	}
}

func ptr[T any](v T) *T { return &v }
