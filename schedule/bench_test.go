package schedule_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/bench"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// tripCounter counts what a client sends: commands, and round trips (a
// pipeline is one).
type tripCounter struct{ trips, cmds atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// benchBundle is a store on the package server with a fresh namespace and a
// counting client.
type benchBundle struct {
	client   *redis.Client
	store    *store.Store
	policies *policy.Set
	counter  *tripCounter
}

func setupBench(b *testing.B) *benchBundle {
	b.Helper()
	client := redis.NewClient(&redis.Options{Addr: server.Addr, PoolSize: 128})
	b.Cleanup(func() { _ = client.Close() })
	counter := &tripCounter{}
	client.AddHook(counter)
	st, err := store.New(&store.Config{Client: client, Namespace: redistest.Namespace(b)})
	require.NoError(b, err)
	set, err := policy.NewSet(nil, nil)
	require.NoError(b, err)
	return &benchBundle{client: client, store: st, policies: set, counter: counter}
}

func (bb *benchBundle) resolve(b *testing.B, id string, delay time.Duration) *notify.Notification {
	d := notify.Duration(delay)
	n, err := bb.policies.Resolve(&notify.Request{ID: id, Topic: "bench", Channel: notify.ChannelWebhook,
		Target: "https://merchant.test/notify", Payload: []byte(`{"order":"2026112200001","amount":"10.00"}`),
		Backoff: []notify.Duration{0, 0}, Delay: &d}, time.Now(), 0)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// enqueueAll stores count notifications due after delays[i], in batches.
func (bb *benchBundle) enqueueAll(b *testing.B, count int, delay func(i int) time.Duration) {
	b.Helper()
	for start := 0; start < count; start += store.MaxBatch {
		var reqs []store.EnqueueRequest
		for i := start; i < min(start+store.MaxBatch, count); i++ {
			reqs = append(reqs, store.EnqueueRequest{Notification: bb.resolve(b, fmt.Sprintf("n%d", i), delay(i))})
		}
		res, err := bb.store.EnqueueBatch(context.Background(), reqs)
		require.NoError(b, err)
		for _, r := range res {
			require.NoError(b, r.Err)
		}
	}
}

func BenchmarkEnqueue(b *testing.B) {
	for _, bc := range []struct {
		name  string
		batch int
	}{{"Single", 1}, {"Batch100", 100}} {
		b.Run(bc.name, func(b *testing.B) {
			bb := setupBench(b)
			var seq atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					reqs := make([]store.EnqueueRequest, bc.batch)
					for i := range reqs {
						reqs[i].Notification = bb.resolve(b, fmt.Sprintf("n%d", seq.Add(1)), time.Hour)
					}
					if _, err := bb.store.EnqueueBatch(context.Background(), reqs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			total := float64(b.N * bc.batch)
			b.ReportMetric(total/b.Elapsed().Seconds(), "notifications/s")
			b.ReportMetric(float64(bb.counter.trips.Load())/total, "trips/notification")
		})
	}
}

// waitSucceeded polls the stats (with an uncounted client) until count
// notifications of topic bench succeeded.
func waitSucceeded(b *testing.B, ns string, count int64) {
	b.Helper()
	client := redis.NewClient(&redis.Options{Addr: server.Addr})
	defer client.Close()
	st, err := store.New(&store.Config{Client: client, Namespace: ns})
	require.NoError(b, err)
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		s, err := st.Stats(context.Background())
		require.NoError(b, err)
		if s["bench"].SucceededTotal >= count {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("not drained within 5 minutes")
}

func startBenchDispatcher(b *testing.B, bb *benchBundle, sender notify.Sender) *schedule.Dispatcher {
	b.Helper()
	d, err := schedule.New(&schedule.Config{Store: bb.store, Senders: map[string]notify.Sender{notify.ChannelWebhook: sender},
		Concurrency: 64, PoliciesFunc: func() *policy.Set { return bb.policies }})
	require.NoError(b, err)
	require.NoError(b, d.Start(context.Background()))
	<-d.Ready()
	return d
}

// BenchmarkDrain measures how fast one dispatcher (concurrency 64) empties a
// backlog of due notifications with a no-op sender; ns/op is per
// notification.
func BenchmarkDrain(b *testing.B) {
	bb := setupBench(b)
	bb.enqueueAll(b, b.N, func(int) time.Duration { return 0 })
	noop := notify.SenderFunc(func(context.Context, *notify.Notification) (notify.Response, error) {
		return notify.Response{StatusCode: 200}, nil
	})
	trips, cmds := bb.counter.trips.Load(), bb.counter.cmds.Load()
	b.ResetTimer()
	d := startBenchDispatcher(b, bb, noop)
	waitSucceeded(b, bb.store.Namespace(), int64(b.N))
	b.StopTimer()
	d.Stop()
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "notifications/s")
	b.ReportMetric(float64(bb.counter.trips.Load()-trips)/n, "trips/notification")
	b.ReportMetric(float64(bb.counter.cmds.Load()-cmds)/n, "cmds/notification")
}

// BenchmarkLateness spreads 10,000 notifications over 5s and measures how
// late each attempt starts after its due time (p50, p99, max) and how many
// start early (must be 0), with the load generator of `herald bench`.
func BenchmarkLateness(b *testing.B) {
	for range b.N {
		client := redis.NewClient(&redis.Options{Addr: server.Addr, PoolSize: 128})
		res, err := bench.Run(context.Background(), &bench.Config{Client: client, Namespace: redistest.Namespace(b),
			Count: 10_000, Window: 5 * time.Second, Lead: time.Second, Concurrency: 64})
		_ = client.Close()
		require.NoError(b, err)
		require.Equal(b, 10_000, res.Delivered)
		ms := func(d time.Duration) float64 { return d.Seconds() * 1000 }
		b.ReportMetric(ms(res.Lateness.P50), "p50-ms")
		b.ReportMetric(ms(res.Lateness.P99), "p99-ms")
		b.ReportMetric(ms(res.Lateness.Max), "max-ms")
		b.ReportMetric(float64(res.Lateness.Early), "early")
	}
}

// serverCost reads what a redis-server has done so far: commands run,
// counting those inside scripts, and CPU seconds.
func serverCost(b testing.TB, client *redis.Client) (calls int64, cpu float64) {
	b.Helper()
	info, err := client.Info(context.Background(), "commandstats", "cpu").Result()
	require.NoError(b, err)
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, stats, _ := strings.Cut(rest, ":")
			if name == "info" || name == "config|resetstat" {
				continue
			}
			v, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			calls += n
		}
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				cpu += f
			}
		}
	}
	return calls, cpu
}

// BenchmarkLife measures a notification's whole life, enqueue by 8
// producers making single calls then one successful attempt by a dispatcher
// at concurrency 16 with a no-op handler, on a redis-server of its own: the
// Redis commands (those inside scripts included) and Redis CPU it costs,
// and both rates. ns/op is per notification.
func BenchmarkLife(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	b.Cleanup(func() { _ = client.Close() })
	st, err := store.New(&store.Config{Client: client})
	require.NoError(b, err)
	set, err := policy.NewSet(nil, nil)
	require.NoError(b, err)
	calls0, cpu0 := serverCost(b, client)
	b.ResetTimer()
	start := time.Now()
	heraldtest.EnqueueConcurrently(b, st, set, 8, b.N)
	enqueued := time.Since(start)
	var done atomic.Int64
	finished := make(chan struct{})
	d, err := schedule.New(&schedule.Config{Store: st, Concurrency: 16, PoliciesFunc: func() *policy.Set { return set },
		Handlers: map[string]notify.Sender{"bench": notify.SenderFunc(func(context.Context, *notify.Notification) (notify.Response, error) {
			if done.Add(1) == int64(b.N) {
				close(finished)
			}
			return notify.Response{}, nil
		})}})
	require.NoError(b, err)
	drainStart := time.Now()
	require.NoError(b, d.Start(context.Background()))
	<-finished
	drained := time.Since(drainStart)
	d.Stop()
	b.StopTimer()
	calls, cpu := serverCost(b, client)
	if os.Getenv("HERALDTEST_BENCH_STATS") != "" {
		_ = os.WriteFile(os.Getenv("HERALDTEST_BENCH_STATS"), []byte(client.Info(context.Background(), "commandstats").Val()), 0o644)
	}
	n := float64(b.N)
	b.ReportMetric(n/enqueued.Seconds(), "enqueues/s")
	b.ReportMetric(n/drained.Seconds(), "drained/s")
	b.ReportMetric(float64(calls-calls0)/n, "redis-cmds/notification")
	b.ReportMetric((cpu-cpu0)/n*1e6, "redis-cpu-us/notification")
}

// BenchmarkDrainOrdered drains a backlog with and without a tenth of the
// notifications carrying an order key (ten per key), to show what ordered
// delivery costs (Redis commands per notification, enqueue included) and
// that notifications without a key are not slowed.
func BenchmarkDrainOrdered(b *testing.B) {
	for _, bc := range []struct {
		name  string
		share int // one in share notifications carries a key; 0: none
	}{{"NoKeys", 0}, {"TenthKeyed", 10}} {
		b.Run(bc.name, func(b *testing.B) {
			bb := setupBench(b)
			calls0, _ := serverCost(b, bb.client)
			for start := 0; start < b.N; start += store.MaxBatch {
				var reqs []store.EnqueueRequest
				for i := start; i < min(start+store.MaxBatch, b.N); i++ {
					n := bb.resolve(b, fmt.Sprintf("n%d", i), 0)
					if bc.share > 0 && i%bc.share == 0 {
						n.OrderKey = fmt.Sprintf("key%d", i/bc.share/10)
						n.Digest = n.ComputeDigest("now")
					}
					reqs = append(reqs, store.EnqueueRequest{Notification: n})
				}
				res, err := bb.store.EnqueueBatch(context.Background(), reqs)
				require.NoError(b, err)
				for _, r := range res {
					require.NoError(b, r.Err)
				}
			}
			// The sender notes when the last notification without a key
			// was delivered: their rate is what a line must not slow.
			var plain atomic.Int64
			plainTotal := int64(b.N)
			if bc.share > 0 {
				plainTotal -= int64((b.N + bc.share - 1) / bc.share)
			}
			plainDone := make(chan time.Time, 1)
			noop := notify.SenderFunc(func(_ context.Context, n *notify.Notification) (notify.Response, error) {
				if n.OrderKey == "" && plain.Add(1) == plainTotal {
					plainDone <- time.Now()
				}
				return notify.Response{StatusCode: 200}, nil
			})
			b.ResetTimer()
			start := time.Now()
			d := startBenchDispatcher(b, bb, noop)
			waitSucceeded(b, bb.store.Namespace(), int64(b.N))
			b.StopTimer()
			d.Stop()
			calls, _ := serverCost(b, bb.client)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "notifications/s")
			b.ReportMetric(float64(calls-calls0)/float64(b.N), "redis-cmds/notification")
			if plainTotal > 0 {
				b.ReportMetric(float64(plainTotal)/(<-plainDone).Sub(start).Seconds(), "without-key/s")
			}
		})
	}
}
