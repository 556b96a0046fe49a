// Package metrics exposes Herald's Prometheus metrics. It is the only package
// that imports the Prometheus client: the dispatcher and the Go client report
// through their Observer interfaces, which Metrics implements, and the queue
// gauges are read from the store when Prometheus scrapes, so they are true
// across every dispatcher and API process sharing the Redis. Every such
// process reports the same figures: aggregate them across processes with
// max (or scrape one process for them), since a sum counts each
// notification once per process. Their help says so.
//
// Metrics uses its own registry, never the global one, so that two instances
// (or tests) do not collide; serve it with Handler.
package metrics

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// Metric names. Counters end in _total and durations in _seconds.
const (
	// EnqueuedTotal counts enqueues by topic and result (created, replaced,
	// existing).
	EnqueuedTotal = "herald_enqueued_total"
	// AttemptsTotal counts finished attempts by topic, channel and outcome
	// (success, retry, permanent, ttr_expired, released).
	AttemptsTotal = "herald_attempts_total"
	// DeadTotal counts notifications moved to the dead-letter set, by topic
	// and channel.
	DeadTotal = "herald_dead_total"
	// AttemptDurationSeconds is how long attempts ran, by topic and channel.
	AttemptDurationSeconds = "herald_attempt_duration_seconds"
	// LatenessSeconds is how late attempts started (start minus due time),
	// by topic and channel.
	LatenessSeconds = "herald_lateness_seconds"
	// RedisErrorsTotal counts failed store calls by operation (reserve,
	// finish, reap, sweep, start, enqueue, get, cancel, stats, memory) and kind:
	// KindOutOfMemory, KindNotReplicated or KindOther. Summed by op it
	// counts what it counted before it had a kind.
	RedisErrorsTotal = "herald_redis_errors_total"
	// QuarantinedTotal counts the notifications this process moved aside
	// because their stored record could not be decoded (Store.Quarantined):
	// nothing attempts them again until an operator looks in the shard's
	// quarantine hash. Each process counts its own, so sum processes.
	QuarantinedTotal = "herald_quarantined_total"
	// ScheduledNotifications, WaitingNotifications, ReservedNotifications
	// and DeadNotifications are the per-topic gauges read from the store at
	// scrape time. Waiting ones are held behind an earlier one of their
	// order key, and not among the scheduled.
	ScheduledNotifications = "herald_scheduled_notifications"
	WaitingNotifications   = "herald_waiting_notifications"
	ReservedNotifications  = "herald_reserved_notifications"
	DeadNotifications      = "herald_dead_notifications"
	// OldestDueAgeSeconds is, by queue ("push" for the dispatchers' work,
	// "pull.<topic>" for a pull topic's workers), how long the earliest
	// notification due and not yet taken has been due; 0 when none is. It
	// grows while nothing delivers, which no attempt's lateness shows, and
	// is read at scrape time like the gauges above.
	OldestDueAgeSeconds = "herald_oldest_due_age_seconds"
	// RedisEvictionPolicyOK is 1 when Redis's maxmemory-policy is
	// noeviction and 0 when Redis may drop keys; absent while unknown (a
	// Redis that refuses CONFIG).
	RedisEvictionPolicyOK = "herald_redis_eviction_policy_ok"
	// RedisPersistenceOK is 1 when Redis keeps its data on disk (AOF or
	// RDB) and 0 when a restart loses it; absent while unknown.
	RedisPersistenceOK = "herald_redis_persistence_ok"
	// RedisMemoryUsedBytes and RedisMemoryMaxBytes are what Redis counts
	// against its maxmemory (used_memory less its replication and AOF
	// buffers) and that maxmemory (0: no limit), read at scrape time
	// (Config.RedisMemoryFunc):
	// at maxmemory Redis refuses enqueues, so their ratio warns of it.
	RedisMemoryUsedBytes = "herald_redis_memory_used_bytes"
	RedisMemoryMaxBytes  = "herald_redis_memory_max_bytes"
)

// Kinds of RedisErrorsTotal.
const (
	// KindOutOfMemory is a write Redis refused at maxmemory
	// (notify.ErrOutOfMemory): Redis answers, and deliveries go on.
	KindOutOfMemory = "out_of_memory"
	// KindNotReplicated is a change the master made but too few replicas
	// confirmed in time (notify.ErrNotReplicated).
	KindNotReplicated = "not_replicated"
	// KindOther is any other failure: Redis did not answer in time, or
	// could not be reached, or failed the call.
	KindOther = "other"
)

// Defaults of Config.
const (
	// ScrapeTimeoutDefault bounds the store read behind the queue gauges.
	ScrapeTimeoutDefault = 5 * time.Second
	// MaxTopicsDefault bounds the topics with series of their own.
	MaxTopicsDefault = 100
	// OtherTopic is the topic label of every topic past MaxTopics.
	OtherTopic = "other"
)

var (
	// durationBuckets span a fast webhook to the default 30s ttr.
	durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// latenessBuckets span "on time" to an outage-sized backlog: hours, so
	// that after an outage a lateness quantile says how late attempts are
	// rather than the last bucket's bound.
	latenessBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30, 120, 600, 1800, 3600, 7200, 21600}
)

// Config configures Metrics.
type Config struct {
	// Store feeds the queue gauges at scrape time, and QuarantinedTotal
	// with what it moved aside. Optional: without it they are left out (a
	// process that only dispatches may leave the gauges to the API's
	// process, but then its quarantines go uncounted).
	Store *store.Store
	// ScrapeTimeout bounds the store read behind the gauges. Default
	// ScrapeTimeoutDefault (5s).
	ScrapeTimeout time.Duration
	// MaxTopics bounds the topics that get series of their own: the first
	// MaxTopics topics this process sees keep their name, and the others
	// are counted together under OtherTopic, so that callers inventing
	// topics cannot make the scrape grow without end. Default
	// MaxTopicsDefault (100). The topics of KeepTopicFunc are not counted.
	MaxTopics int
	// KeepTopicFunc reports whether topic always has series of its own,
	// whatever topics were seen before it, without taking one of the
	// MaxTopics labels: herald serve names the policies file's topics, so
	// that topics callers make up, which over months take every label (and
	// after a restart take them in name order, as the gauges read them from
	// Redis), never fold a configured topic, and the alerts on it, into
	// OtherTopic. It is called on every observation, so it must be cheap
	// and safe for concurrent use. Optional: without it the first MaxTopics
	// topics seen keep their names.
	KeepTopicFunc func(topic string) bool
	// RedisSafetyFunc reports, at scrape time, whether Redis's settings
	// keep Herald's data: its maxmemory-policy is noeviction, and it
	// persists (AOF or RDB). They are the gauges RedisEvictionPolicyOK and
	// RedisPersistenceOK; nil leaves a gauge out, as unknown. Optional.
	RedisSafetyFunc func() (evictionOK, persistenceOK *bool)
	// RedisMemoryFunc returns, at scrape time, what Redis counts against
	// its maxmemory and that maxmemory (0: no limit), for
	// RedisMemoryUsedBytes and RedisMemoryMaxBytes; on a Cluster, those of
	// the master closest to its limit, where enqueues are refused first. It is called with
	// ScrapeTimeout, once per scrape: a caller whose scrapes are frequent
	// caches its answer. An error leaves the gauges out of the scrape and
	// counts in RedisErrorsTotal as op memory. Optional: without it the
	// gauges are left out.
	RedisMemoryFunc func(ctx context.Context) (used, limit int64, err error)
}

// Metrics counts what Herald does and serves it to Prometheus.
type Metrics struct {
	registry    *prometheus.Registry
	enqueued    *prometheus.CounterVec
	attempts    *prometheus.CounterVec
	dead        *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lateness    *prometheus.HistogramVec
	redisErrors *prometheus.CounterVec
	topics      *topicLabels
}

var (
	_ schedule.Observer = (*Metrics)(nil)
	_ client.Observer   = (*Metrics)(nil)
)

// New returns Metrics with its own registry, which also holds the Go runtime
// and process collectors.
func New(cfg *Config) *Metrics {
	m := &Metrics{
		topics:   &topicLabels{max: cmp.Or(cfg.MaxTopics, MaxTopicsDefault), keep: cfg.KeepTopicFunc, seen: map[string]bool{}},
		registry: prometheus.NewRegistry(),
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: EnqueuedTotal, Help: "Notifications enqueued, by topic and result (created, replaced, existing).",
		}, []string{"topic", "result"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: AttemptsTotal, Help: "Finished attempts, by topic, channel and outcome.",
		}, []string{"topic", "channel", "outcome"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: DeadTotal, Help: "Notifications moved to the dead-letter set, by topic and channel.",
		}, []string{"topic", "channel"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: AttemptDurationSeconds, Help: "How long attempts ran, by topic and channel.", Buckets: durationBuckets,
		}, []string{"topic", "channel"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: LatenessSeconds, Help: "How late attempts started after their due time, by topic and channel.", Buckets: latenessBuckets,
		}, []string{"topic", "channel"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RedisErrorsTotal, Help: "Failed store calls, by operation and kind (out_of_memory: refused at maxmemory; not_replicated; other).",
		}, []string{"op", "kind"}),
	}
	m.registry.MustRegister(m.enqueued, m.attempts, m.dead, m.duration, m.lateness, m.redisErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.RedisSafetyFunc != nil {
		m.registry.MustRegister(safetyCollector(cfg.RedisSafetyFunc))
	}
	timeout := cmp.Or(cfg.ScrapeTimeout, ScrapeTimeoutDefault)
	if cfg.RedisMemoryFunc != nil {
		m.registry.MustRegister(&memoryCollector{read: cfg.RedisMemoryFunc, timeout: timeout, errors: m.redisErrors})
	}
	if cfg.Store != nil {
		m.registry.MustRegister(&queueCollector{store: cfg.Store, timeout: timeout, errors: m.redisErrors, topics: m.topics})
		m.registry.MustRegister(&endpointCollector{store: cfg.Store, timeout: timeout, errors: m.redisErrors})
		m.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: QuarantinedTotal,
			Help: "Notifications this process moved to a shard's quarantine hash because their record could not be decoded; " +
				"they are not attempted again. Counted per process: sum processes.",
		}, func() float64 { return float64(cfg.Store.Quarantined()) }))
	}
	return m
}

// Handler serves the metrics in the Prometheus exposition format. A failing
// collector is reported in herald_redis_errors_total rather than failing the
// scrape, so the counters stay visible during a Redis outage.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Enqueued implements client.Observer.
func (m *Metrics) Enqueued(n *notify.Notification, status store.EnqueueStatus) {
	result := "existing"
	switch status {
	case store.Created:
		result = "created"
	case store.Replaced:
		result = "replaced"
	}
	m.enqueued.WithLabelValues(m.topics.label(n.Topic), result).Inc()
}

// AttemptFinished implements schedule.Observer. The lateness of an attempt
// the reaper ends (ttr_expired) is unknown and left out.
func (m *Metrics) AttemptFinished(n *notify.Notification, a notify.Attempt, action notify.Action, lateness time.Duration) {
	topic := m.topics.label(n.Topic)
	m.attempts.WithLabelValues(topic, n.Channel, string(a.Outcome)).Inc()
	m.duration.WithLabelValues(topic, n.Channel).Observe(a.FinishedAt.Sub(a.StartedAt).Seconds())
	if a.Outcome != notify.OutcomeTTRExpired {
		m.lateness.WithLabelValues(topic, n.Channel).Observe(max(lateness, 0).Seconds())
	}
	if action == notify.ActionDead {
		m.dead.WithLabelValues(topic, n.Channel).Inc()
	}
}

// StoreError implements schedule.Observer and client.Observer, counting
// err by its kind.
func (m *Metrics) StoreError(op string, err error) {
	countError(m.redisErrors, op, err)
}

// countError counts err, a failed call of op, in counter by its kind.
func countError(counter *prometheus.CounterVec, op string, err error) {
	counter.WithLabelValues(op, errorKind(err)).Inc()
}

// errorKind returns the kind of RedisErrorsTotal err counts as.
func errorKind(err error) string {
	switch {
	case errors.Is(err, notify.ErrOutOfMemory):
		return KindOutOfMemory
	case errors.Is(err, notify.ErrNotReplicated):
		return KindNotReplicated
	}
	return KindOther
}

// queueCollector reads the per-topic gauges from the store at scrape time.
type queueCollector struct {
	store   *store.Store
	timeout time.Duration
	errors  *prometheus.CounterVec
	topics  *topicLabels
}

// shared ends the help of the gauges read from the store, which every
// process sharing the Redis reports alike.
const shared = " Read from Redis: every process reports the same, so aggregate processes with max, not sum."

var (
	scheduledDesc = prometheus.NewDesc(ScheduledNotifications, "Notifications waiting for an attempt, by topic."+shared, []string{"topic"}, nil)
	waitingDesc   = prometheus.NewDesc(WaitingNotifications, "Notifications held behind an earlier one of their order key, by topic."+shared,
		[]string{"topic"}, nil)
	reservedDesc = prometheus.NewDesc(ReservedNotifications, "Notifications with an attempt running, by topic."+shared, []string{"topic"}, nil)
	deadDesc     = prometheus.NewDesc(DeadNotifications, "Notifications in the dead-letter set, by topic."+shared, []string{"topic"}, nil)
	oldestDesc   = prometheus.NewDesc(OldestDueAgeSeconds,
		"How long the earliest notification due and not yet taken by a dispatcher (queue push) or a pull worker (queue pull.<topic>) has been due; 0 when none is."+shared,
		[]string{"queue"}, nil)
)

var _ prometheus.Collector = (*queueCollector)(nil)

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- scheduledDesc
	ch <- waitingDesc
	ch <- reservedDesc
	ch <- deadDesc
	ch <- oldestDesc
}

// Collect implements prometheus.Collector.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	stats, err := c.store.Stats(ctx)
	if err != nil {
		// The gauges are left out of this scrape rather than reported as
		// zero; the failure shows in the error counter (from the next
		// scrape on: the registry collects concurrently).
		countError(c.errors, "stats", err)
		return
	}
	// Sorted, so that the topics that keep their names do not depend on
	// the order of a map.
	byLabel := map[string]store.TopicStats{}
	for _, topic := range slices.Sorted(maps.Keys(stats)) {
		label := c.topics.label(topic)
		sum := byLabel[label]
		sum.Add(stats[topic])
		byLabel[label] = sum
	}
	for label, s := range byLabel {
		ch <- prometheus.MustNewConstMetric(scheduledDesc, prometheus.GaugeValue, float64(s.Scheduled), label)
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(s.Waiting), label)
		ch <- prometheus.MustNewConstMetric(reservedDesc, prometheus.GaugeValue, float64(s.Reserved), label)
		ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.GaugeValue, float64(s.Dead), label)
	}
	c.collectOldestDue(ctx, ch, stats)
}

// collectOldestDue reports the age of the oldest due notification of the
// push queue, and of the pull queue of every topic with a label of its own
// and notifications scheduled or reserved: the topics past the label cap
// are not read, so that a flood of topics cannot make a scrape read
// thousands of queues.
func (c *queueCollector) collectOldestDue(ctx context.Context, ch chan<- prometheus.Metric, stats map[string]store.TopicStats) {
	queues := []string{store.QueuePush}
	for _, topic := range slices.Sorted(maps.Keys(stats)) {
		if s := stats[topic]; s.Scheduled+s.Reserved > 0 && c.topics.label(topic) == topic {
			queues = append(queues, store.PullQueue(topic))
		}
	}
	oldest, err := c.store.OldestDue(ctx, queues)
	if err != nil {
		countError(c.errors, "oldest_due", err)
		return
	}
	now := c.store.Now()
	for queue, at := range oldest {
		age := 0.0
		if !at.IsZero() {
			age = max(now.Sub(at), 0).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, queue)
	}
}

// safetyCollector reports the Redis settings gauges at scrape time,
// leaving out those that are unknown.
type safetyCollector func() (evictionOK, persistenceOK *bool)

var (
	evictionDesc = prometheus.NewDesc(RedisEvictionPolicyOK,
		"1 when Redis's maxmemory-policy is noeviction, 0 when Redis may evict Herald's keys."+shared, nil, nil)
	persistenceDesc = prometheus.NewDesc(RedisPersistenceOK, "1 when Redis persists its data (AOF or RDB), 0 when a restart loses it."+shared, nil, nil)
)

var _ prometheus.Collector = safetyCollector(nil)

// Describe implements prometheus.Collector.
func (c safetyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- evictionDesc
	ch <- persistenceDesc
}

// Collect implements prometheus.Collector.
func (c safetyCollector) Collect(ch chan<- prometheus.Metric) {
	eviction, persistence := c()
	for desc, ok := range map[*prometheus.Desc]*bool{evictionDesc: eviction, persistenceDesc: persistence} {
		if ok != nil {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, map[bool]float64{false: 0, true: 1}[*ok])
		}
	}
}

// topicLabels gives each topic its label: its name for the topics keep
// names and for the first max other topics seen, OtherTopic for the rest.
// It is safe for concurrent use.
type topicLabels struct {
	max  int
	keep func(topic string) bool

	// mu guards seen, the topics that keep their names.
	mu   sync.Mutex
	seen map[string]bool
}

func (t *topicLabels) label(topic string) string {
	if topic != OtherTopic && t.keep != nil && t.keep(topic) {
		return topic
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[topic] {
		return topic
	}
	if len(t.seen) < t.max && topic != OtherTopic {
		t.seen[topic] = true
		return topic
	}
	return OtherTopic
}
