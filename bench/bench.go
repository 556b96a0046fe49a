// Package bench is Herald's load generator. Run enqueues notifications with
// due times spread over a window into a namespace of its own in a Redis,
// runs an in-process dispatcher whose sender does nothing, and measures how
// fast the notifications are delivered and how late each attempt starts
// after its due time. `herald bench` runs it against the configured Redis.
//
// Lateness is measured in the sender, when the attempt starts, against the
// send_at the run asked for, to the nanosecond: not against the due time
// the store keeps (rounded up to the millisecond) nor the dispatcher's own
// figure. It is the time lost between a notification falling due and a
// worker starting it, which is what a payment platform's "attempt 2 at
// +2m" promise rests on. An attempt that starts early shows as a negative
// lateness; Summary counts those, and the dispatcher's design says there
// are none.
//
// With a Window of zero every notification is due at once, and the
// throughput is how fast one dispatcher drains a backlog; with a window,
// the offered rate is Count/Window and the lateness shows whether the
// dispatcher keeps up.
package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/internal/redisconf"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// Defaults of Config.
const (
	// CountDefault is how many notifications a run enqueues.
	CountDefault = 10_000
	// LeadDefault is how long after the start the first notification is
	// due: time for the enqueues, so that none is late before it is stored.
	LeadDefault = 2 * time.Second
	// NamespacePrefix starts the namespace of a run that names none.
	NamespacePrefix = "herald-bench-"
)

// Topic is the topic of the notifications a run enqueues.
const Topic = "bench"

// pollInterval is how often Run reads the store's counts while waiting for
// the deliveries to be recorded.
const pollInterval = 5 * time.Millisecond

// Config configures a run.
type Config struct {
	// Client is the Redis to load: standalone, Sentinel or Cluster.
	// Required.
	Client redis.UniversalClient
	// Namespace holds the run's keys, which are deleted when it ends.
	// Default: NamespacePrefix and a random suffix, so that a run never
	// touches a deployment's notifications. It must not contain the glob
	// characters * ? [ ] \.
	Namespace string
	// Shards is as store.Config's; default 0, the store's choice for a new
	// namespace.
	Shards int
	// Count is how many notifications to enqueue. Default CountDefault.
	Count int
	// Window spreads the due times evenly over this long; 0 makes every
	// notification due at once, to measure how fast a backlog drains.
	Window time.Duration
	// Lead is how long after the start the first notification is due.
	// Default LeadDefault.
	Lead time.Duration
	// Concurrency and Batch size the dispatcher; see schedule.Config.
	Concurrency int
	Batch       int
	// Logger defaults to a warn-level text handler on stderr.
	Logger *slog.Logger
}

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) withDefaults() *Config {
	out := *c
	if out.Namespace == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		out.Namespace = NamespacePrefix + hex.EncodeToString(b[:])
	}
	out.Count = cmp.Or(out.Count, CountDefault)
	out.Lead = cmp.Or(out.Lead, LeadDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("bench: Client is required")
	case c.Count < 1 || c.Window < 0 || c.Lead < 0:
		return errors.New("bench: Count must be positive, Window and Lead not negative")
	case strings.ContainsAny(c.Namespace, `*?[]\`):
		return fmt.Errorf("bench: namespace %q contains a glob character", c.Namespace)
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	// Namespace is where the run's keys were.
	Namespace string
	// Count is how many notifications were enqueued.
	Count int
	// Delivered is how many were delivered and recorded as succeeded.
	Delivered int
	// Enqueue is how long enqueueing took.
	Enqueue time.Duration
	// EnqueuedLate is set when enqueueing ended after the first due time:
	// the lateness then includes time spent enqueueing. A longer Lead
	// avoids it.
	EnqueuedLate bool
	// Elapsed runs from the first due time to the last delivery recorded.
	Elapsed time.Duration
	// Lateness summarises how late the attempts started.
	Lateness Summary
	// StoreErrors counts the dispatcher's failed Redis calls, which it
	// retried.
	StoreErrors int
	// Interrupted is set when the run's context ended before every
	// notification was delivered.
	Interrupted bool
}

// Throughput is deliveries per second over Elapsed.
func (r *Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Delivered) / r.Elapsed.Seconds()
}

// Summary summarises a set of latenesses.
type Summary struct {
	Count              int
	P50, P90, P99, Max time.Duration
	// Early counts attempts that started before they were due.
	Early int
}

// Summarize returns the percentiles (nearest rank) and the early count of
// lateness, which it does not change.
func Summarize(lateness []time.Duration) Summary {
	s := Summary{Count: len(lateness)}
	if len(lateness) == 0 {
		return s
	}
	sorted := slices.Sorted(slices.Values(lateness))
	at := func(p float64) time.Duration { return sorted[int(p*float64(len(sorted)-1))] }
	s.P50, s.P90, s.P99, s.Max = at(0.50), at(0.90), at(0.99), sorted[len(sorted)-1]
	for _, l := range sorted {
		if l >= 0 {
			break
		}
		s.Early++
	}
	return s
}

// plan says when a run asks each notification to be sent.
type plan struct {
	first  time.Time
	window time.Duration
	count  int
}

// at is the send_at of the i-th notification.
func (p plan) at(i int) time.Time {
	return p.first.Add(time.Duration(int64(p.window) * int64(i) / int64(p.count)))
}

// id names the i-th notification; index reads i back.
func id(i int) string { return "b" + strconv.Itoa(i) }

func index(id string) (int, bool) {
	i, err := strconv.Atoi(strings.TrimPrefix(id, "b"))
	return i, err == nil
}

// recorder is the run's sender, which keeps every attempt's lateness
// against the requested send time, and its dispatcher observer, which
// counts store errors.
type recorder struct {
	plan plan

	mu       sync.Mutex
	lateness []time.Duration
	errs     int
}

var (
	_ schedule.Observer = (*recorder)(nil)
	_ notify.Sender     = (*recorder)(nil)
)

// Send implements notify.Sender: it reads the clock first, then records
// how late the attempt started.
func (r *recorder) Send(_ context.Context, n *notify.Notification) (notify.Response, error) {
	now := time.Now()
	i, ok := index(n.ID)
	if !ok {
		return notify.Response{}, notify.Permanent(fmt.Errorf("bench: notification %q is not the run's", n.ID))
	}
	r.mu.Lock()
	r.lateness = append(r.lateness, now.Sub(r.plan.at(i)))
	r.mu.Unlock()
	return notify.Response{StatusCode: 200}, nil
}

// AttemptFinished implements schedule.Observer; the lateness is the
// sender's.
func (r *recorder) AttemptFinished(*notify.Notification, notify.Attempt, notify.Action, time.Duration) {
}

// StoreError implements schedule.Observer.
func (r *recorder) StoreError(string, error) {
	r.mu.Lock()
	r.errs++
	r.mu.Unlock()
}

// summary returns the summary of the latenesses seen and the number of
// store errors.
func (r *recorder) summary() (Summary, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Summarize(r.lateness), r.errs
}

// Run runs the load: it starts a dispatcher on cfg's Redis, enqueues the
// notifications, waits until they are all recorded as delivered or ctx
// ends, and deletes the run's keys. The error is for a run that could not
// take place; an interrupted run returns what it measured.
func Run(ctx context.Context, cfg *Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkNoEviction(ctx, cfg.Client); err != nil {
		return nil, err
	}
	st, err := store.New(&store.Config{Client: cfg.Client, Namespace: cfg.Namespace, Shards: cfg.Shards, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	defer deleteNamespace(cfg.Client, cfg.Namespace, cfg.Logger)

	rec := &recorder{lateness: make([]time.Duration, 0, cfg.Count)}
	d, err := schedule.New(&schedule.Config{
		Store:       st,
		Senders:     map[string]notify.Sender{notify.ChannelWebhook: rec},
		Concurrency: cfg.Concurrency,
		Batch:       cfg.Batch,
		Observer:    rec,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	defer d.Stop()
	select {
	case <-d.Ready():
	case <-ctx.Done():
		return &Result{Namespace: cfg.Namespace, Interrupted: true}, nil
	}

	res := &Result{Namespace: cfg.Namespace}
	start := time.Now()
	first := start.Add(cfg.Lead)
	rec.mu.Lock()
	rec.plan = plan{first: first, window: cfg.Window, count: cfg.Count}
	rec.mu.Unlock()
	if err := enqueue(ctx, st, cfg, rec.plan); err != nil {
		if ctx.Err() != nil {
			res.Interrupted = true
			return res, nil
		}
		return nil, err
	}
	res.Count = cfg.Count
	res.Enqueue = time.Since(start)
	res.EnqueuedLate = time.Now().After(first)

	res.Delivered, res.Interrupted, err = waitDelivered(ctx, st, cfg.Count, rec.plan.at(cfg.Count-1))
	res.Elapsed = time.Since(first)
	if err != nil {
		return nil, err
	}
	// The store shows an outcome a moment before the dispatcher reports
	// its lateness: stop it, so that every delivery is in the summary.
	d.Stop()
	res.Lateness, res.StoreErrors = rec.summary()
	return res, nil
}

// enqueue stores cfg.Count notifications sent at p's times, store.MaxBatch
// to a round trip.
func enqueue(ctx context.Context, st *store.Store, cfg *Config, p plan) error {
	set, err := policy.NewSet(nil, nil)
	if err != nil {
		return err
	}
	payload := []byte(`{"order":"2026112200001","amount":"10.00"}`)
	for from := 0; from < cfg.Count; from += store.MaxBatch {
		reqs := make([]store.EnqueueRequest, 0, store.MaxBatch)
		for i := from; i < min(from+store.MaxBatch, cfg.Count); i++ {
			at := p.at(i)
			n, err := set.Resolve(&notify.Request{ID: id(i), Topic: Topic, Channel: notify.ChannelWebhook,
				Target: "https://merchant.invalid/notify", Payload: payload, Backoff: []notify.Duration{0}, SendAt: &at}, time.Now(), 0)
			if err != nil {
				return err
			}
			reqs = append(reqs, store.EnqueueRequest{Notification: n})
		}
		results, err := st.EnqueueBatch(ctx, reqs)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		for _, r := range results {
			if r.Err != nil {
				return fmt.Errorf("bench: %w", r.Err)
			}
		}
	}
	return nil
}

// checkNoEviction refuses a Redis whose maxmemory-policy evicts keys: a
// run's load would push out the notifications stored there, and then its
// own. Settings it cannot read (CONFIG refused) are the operator's call.
func checkNoEviction(ctx context.Context, c redis.UniversalClient) error {
	s, err := redisconf.Read(ctx, c)
	if err != nil || s.EvictionOK == nil || *s.EvictionOK {
		return nil
	}
	return fmt.Errorf("bench: this Redis evicts keys (maxmemory-policy %s): the run's load would evict the notifications stored there; "+
		"run it against a Redis with maxmemory-policy noeviction", s.MaxmemoryPolicy)
}

// stallAfter is how long after the last due time a run waits without a
// delivery before it gives up: the dispatcher is then stuck (a Redis that
// refuses writes, keys lost), and would be waited for ever.
const stallAfter = 30 * time.Second

// waitDelivered waits until count notifications of Topic are recorded as
// succeeded, or ctx ends, and returns how many were. Past lastDue, a
// stallAfter without a delivery is an error.
func waitDelivered(ctx context.Context, st *store.Store, count int, lastDue time.Time) (delivered int, interrupted bool, err error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	progress := time.Now()
	for {
		// The read uses its own context, so an interrupted run still
		// reports what was delivered.
		readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		stats, err := st.Stats(readCtx)
		cancel()
		if err != nil {
			return 0, false, fmt.Errorf("bench: %w", err)
		}
		now := int(stats[Topic].SucceededTotal)
		if now > delivered {
			delivered, progress = now, time.Now()
		}
		if delivered >= count {
			return delivered, false, nil
		}
		from := progress
		if lastDue.After(from) {
			from = lastDue
		}
		if since := time.Since(from); since > stallAfter {
			return delivered, false, fmt.Errorf("bench: %d of %d delivered, and none for %s after the last was due: "+
				"the dispatcher is stuck (see its log above)", delivered, count, since.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return delivered, true, nil
		case <-tick.C:
		}
	}
}

// deleteNamespace deletes the run's keys: it scans every node (every master
// of a Cluster) for them, an admin path where SCAN is fine, and unlinks
// each on its own so that no command spans two Cluster slots.
func deleteNamespace(client redis.UniversalClient, ns string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	del := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, ns+":*", 1000).Iterator()
		pipe := c.Pipeline()
		for iter.Next(ctx) {
			pipe.Unlink(ctx, iter.Val())
			if pipe.Len() == 1000 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(ctx, c) })
	} else {
		err = del(ctx, client)
	}
	if err != nil {
		log.Warn("bench: could not delete the run's keys", "namespace", ns, "error", err)
	}
}
