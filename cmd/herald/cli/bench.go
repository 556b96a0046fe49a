package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/bench"
)

func (c *app) benchCommand() *cobra.Command {
	var (
		count        int
		window, lead time.Duration
		asJSON       bool
	)
	// Read-only as far as the configured namespace goes: the run writes
	// only its own, and must not record a shard count in a deployment's.
	cmd := readOnly(&cobra.Command{
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
SIGINT or SIGTERM with what it measured so far. It refuses a Redis whose
maxmemory-policy evicts keys, where its load would evict the notifications
stored there, and gives up when nothing is delivered for 30s after the last
one was due.`,
		Example: "  herald bench\n  herald bench --count 50000 --window 0\n  HERALD_REDIS_ADDRS=10.0.0.5:6379 herald bench --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 1 || window < 0 || lead <= 0 {
				return &UsageError{Err: fmt.Errorf("--count and --lead must be positive, --window not negative")}
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
			r := bench.NewReport(res, window)
			return c.output(asJSON, r, r.Print)
		},
	})
	f := cmd.Flags()
	f.IntVar(&count, "count", bench.CountDefault, "notifications to enqueue")
	f.DurationVar(&window, "window", 5*time.Second, "spread their due times over this long; 0: all due at once")
	f.DurationVar(&lead, "lead", bench.LeadDefault, "how long from now the first is due, time to enqueue")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
