package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/bench"
)

// benchReport is what bench prints with --json; times in milliseconds.
type benchReport struct {
	Namespace     string  `json:"namespace"`
	Count         int     `json:"count"`
	Delivered     int     `json:"delivered"`
	WindowMS      float64 `json:"window_ms"`
	EnqueueMS     float64 `json:"enqueue_ms"`
	EnqueuedLate  bool    `json:"enqueued_late"`
	ElapsedMS     float64 `json:"elapsed_ms"`
	PerSecond     float64 `json:"throughput_per_second"`
	LatenessP50MS float64 `json:"lateness_p50_ms"`
	LatenessP90MS float64 `json:"lateness_p90_ms"`
	LatenessP99MS float64 `json:"lateness_p99_ms"`
	LatenessMaxMS float64 `json:"lateness_max_ms"`
	Early         int     `json:"early"`
	StoreErrors   int     `json:"store_errors"`
	Interrupted   bool    `json:"interrupted"`
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func newBenchReport(r *bench.Result, window time.Duration) *benchReport {
	return &benchReport{
		Namespace: r.Namespace, Count: r.Count, Delivered: r.Delivered, WindowMS: msOf(window),
		EnqueueMS: msOf(r.Enqueue), EnqueuedLate: r.EnqueuedLate, ElapsedMS: msOf(r.Elapsed), PerSecond: r.Throughput(),
		LatenessP50MS: msOf(r.Lateness.P50), LatenessP90MS: msOf(r.Lateness.P90),
		LatenessP99MS: msOf(r.Lateness.P99), LatenessMaxMS: msOf(r.Lateness.Max),
		Early: r.Lateness.Early, StoreErrors: r.StoreErrors, Interrupted: r.Interrupted,
	}
}

func (b *benchReport) print(out io.Writer) error {
	if b.Interrupted {
		fmt.Fprintln(out, "interrupted: the figures cover what was delivered before the signal")
	}
	if b.Count > 0 && b.EnqueueMS > 0 {
		fmt.Fprintf(out, "enqueued   %d in %.0fms (%.0f/s)\n", b.Count, b.EnqueueMS, float64(b.Count)/b.EnqueueMS*1000)
	}
	if b.EnqueuedLate {
		fmt.Fprintln(out, "           (enqueueing outlasted --lead, so the lateness includes it: raise --lead)")
	}
	fmt.Fprintf(out, "delivered  %d of %d in %.0fms from the first due time (%.0f/s)\n", b.Delivered, b.Count, b.ElapsedMS, b.PerSecond)
	_, err := fmt.Fprintf(out, "lateness   p50 %.2fms  p90 %.2fms  p99 %.2fms  max %.2fms  early %d\n",
		b.LatenessP50MS, b.LatenessP90MS, b.LatenessP99MS, b.LatenessMaxMS, b.Early)
	if b.StoreErrors > 0 {
		_, err = fmt.Fprintf(out, "store errors %d (retried)\n", b.StoreErrors)
	}
	return err
}

func (c *app) benchCommand() *cobra.Command {
	var (
		count        int
		window, lead time.Duration
		asJSON       bool
	)
	cmd := withConfig(&cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and lateness against the configured Redis",
		Long: `Bench enqueues --count notifications due evenly over --window, starting --lead
from now, into a namespace of its own (deleted afterwards) on the configured
Redis, and runs an in-process dispatcher (sized by the dispatcher section)
whose sender does nothing. It prints how fast they were enqueued and
delivered, and how late each attempt started after its due time: p50, p90,
p99, max, and how many started early (there should be none).

With --window 0 every notification is due at once, and the throughput is how
fast one dispatcher drains a backlog. It stops when all are delivered, or on
SIGINT or SIGTERM with what it measured so far.`,
		Example: "  herald bench\n  herald bench --count 50000 --window 0\n  HERALD_REDIS_ADDRS=10.0.0.5:6379 herald bench --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 1 || window < 0 || lead < 0 {
				return &UsageError{Err: fmt.Errorf("--count must be positive, --window and --lead not negative")}
			}
			w, err := c.base.wire(cmd, true)
			if err != nil {
				return err
			}
			defer w.Close()
			cfg := w.cfg
			if !asJSON {
				fmt.Fprintf(c.base.Out, "herald bench: %d notifications due over %s, the first %s from now; one dispatcher (concurrency %d, batch %d)\n",
					count, window, lead, cfg.Dispatcher.Concurrency, cfg.Dispatcher.Batch)
			}
			res, err := bench.Run(cmd.Context(), &bench.Config{
				Client: w.redis.client, Shards: cfg.Shards, Count: count, Window: window, Lead: lead,
				Concurrency: cfg.Dispatcher.Concurrency, Batch: cfg.Dispatcher.Batch, Logger: w.log,
			})
			if err != nil {
				return err
			}
			r := newBenchReport(res, window)
			if asJSON {
				return printJSON(c.base.Out, r)
			}
			return r.print(c.base.Out)
		},
	})
	f := cmd.Flags()
	f.IntVar(&count, "count", bench.CountDefault, "notifications to enqueue")
	f.DurationVar(&window, "window", 5*time.Second, "spread their due times over this long; 0: all due at once")
	f.DurationVar(&lead, "lead", bench.LeadDefault, "how long from now the first is due, time to enqueue")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
