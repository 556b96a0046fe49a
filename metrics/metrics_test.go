package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// scrape returns the exposition text of m.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return string(body)
}

// requireSeries requires each of lines, a series and its value, in text.
func requireSeries(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, line := range lines {
		require.Contains(t, text, line+"\n")
	}
}

func TestObserverCounts(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{})
	n := &notify.Notification{ID: "a", Topic: "orders", Channel: notify.ChannelWebhook}
	start := time.Now()
	m.Enqueued(n, store.Created)
	m.Enqueued(n, store.Existing)
	m.AttemptFinished(n, notify.Attempt{StartedAt: start, FinishedAt: start.Add(30 * time.Millisecond), Outcome: notify.OutcomeRetry},
		notify.ActionRetry, 2*time.Millisecond)
	m.AttemptFinished(n, notify.Attempt{StartedAt: start, FinishedAt: start.Add(time.Second), Outcome: notify.OutcomePermanent},
		notify.ActionDead, 0)
	m.StoreError("reserve", errors.New("connection refused"))

	text := scrape(t, m)
	requireSeries(t, text,
		`herald_enqueued_total{result="created",topic="orders"} 1`,
		`herald_enqueued_total{result="existing",topic="orders"} 1`,
		`herald_attempts_total{channel="webhook",outcome="retry",topic="orders"} 1`,
		`herald_attempts_total{channel="webhook",outcome="permanent",topic="orders"} 1`,
		`herald_dead_total{channel="webhook",topic="orders"} 1`,
		`herald_attempt_duration_seconds_count{channel="webhook",topic="orders"} 2`,
		`herald_lateness_seconds_bucket{channel="webhook",topic="orders",le="0.005"} 2`,
		`herald_redis_errors_total{kind="other",op="reserve"} 1`)
	require.NotContains(t, text, metrics.ScheduledNotifications, "no store, no gauges")
}

// TestLatenessOfAnOutage: attempts that start an hour and a half late, as
// after a dispatcher outage, fall in a bucket that bounds them, so that a
// lateness quantile says how late they are instead of stopping at the last
// bucket's ten minutes.
func TestLatenessOfAnOutage(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{})
	n := &notify.Notification{ID: "a", Topic: "orders", Channel: notify.ChannelWebhook}
	start := time.Now()
	m.AttemptFinished(n, notify.Attempt{StartedAt: start, FinishedAt: start.Add(time.Second), Outcome: notify.OutcomeSuccess},
		notify.ActionAck, 90*time.Minute)
	text := scrape(t, m)
	require.Contains(t, text, `herald_lateness_seconds_bucket{channel="webhook",topic="orders",le="3600"} 0`+"\n")
	require.Contains(t, text, `herald_lateness_seconds_bucket{channel="webhook",topic="orders",le="7200"} 1`+"\n")
}

func TestQueueGauges(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.New(&store.Config{Client: srv.Client(t), Namespace: redistest.Namespace(t), Shards: 2})
	require.NoError(t, err)
	set, err := policy.NewSet(nil, nil)
	require.NoError(t, err)
	// Two of their own, then three of one order key: the last two wait
	// behind the first.
	for i, key := range []string{"", "", "k", "k", "k"} {
		n, err := set.Resolve(&notify.Request{ID: fmt.Sprint("n", i), Topic: "jobs", Channel: notify.ChannelPull, OrderKey: key}, time.Now(), 0)
		require.NoError(t, err)
		_, _, err = st.Enqueue(context.Background(), n, false)
		require.NoError(t, err)
	}
	m := metrics.New(&metrics.Config{Store: st})
	text := scrape(t, m)
	require.Contains(t, text, `herald_scheduled_notifications{topic="jobs"} 3`+"\n")
	require.Contains(t, text, `herald_waiting_notifications{topic="jobs"} 2`+"\n")
	require.Contains(t, text, `herald_reserved_notifications{topic="jobs"} 0`+"\n")
	require.Contains(t, text, `herald_dead_notifications{topic="jobs"} 0`+"\n")

	t.Run("RedisDownKeepsTheRest", func(t *testing.T) {
		srv.Stop()
		text := scrape(t, m)
		require.NotContains(t, text, metrics.ScheduledNotifications+"{")
		// Collectors run concurrently, so the failure counts from the next
		// scrape on.
		require.Contains(t, scrape(t, m), `herald_redis_errors_total{kind="other",op="stats"}`)
		require.True(t, strings.Contains(text, "go_goroutines"), "runtime metrics still served")
	})
}

// TestTopicFlood enqueues to 150 topics and puts 150 topics in the store:
// the per-topic series stop at the first 100 topics seen, and the rest are
// counted under topic "other", so a token holder inventing topics cannot
// blow up the scrape.
func TestTopicFlood(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.New(&store.Config{Client: srv.Client(t), Namespace: redistest.Namespace(t), Shards: 2})
	require.NoError(t, err)
	set, err := policy.NewSet(nil, nil)
	require.NoError(t, err)
	m := metrics.New(&metrics.Config{Store: st})
	for i := range 150 {
		n, err := set.Resolve(&notify.Request{Topic: fmt.Sprintf("t%03d", i), Channel: notify.ChannelPull}, time.Now(), 0)
		require.NoError(t, err)
		_, _, err = st.Enqueue(context.Background(), n, false)
		require.NoError(t, err)
		m.Enqueued(n, store.Created)
	}
	text := scrape(t, m)
	for _, name := range []string{metrics.EnqueuedTotal, metrics.ScheduledNotifications} {
		series := regexp.MustCompile(`(?m)^`+name+`\{.*topic="([^"]+)"`).FindAllStringSubmatch(text, -1)
		require.Len(t, series, 101, name)
	}
	require.Contains(t, text, `herald_enqueued_total{result="created",topic="other"} 50`+"\n")
	require.Contains(t, text, `herald_scheduled_notifications{topic="other"} 50`+"\n")
	require.Contains(t, text, `herald_enqueued_total{result="created",topic="t099"} 1`+"\n")
}

// TestKeptTopics: the topics KeepTopicFunc names keep series of their own
// after MaxTopics others were seen first, and take none of their labels.
func TestKeptTopics(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{MaxTopics: 2, KeepTopicFunc: func(topic string) bool { return topic == "orders" }})
	for _, topic := range []string{"made-up-1", "orders", "made-up-2", "made-up-3", "orders"} {
		m.Enqueued(&notify.Notification{Topic: topic, Channel: notify.ChannelWebhook}, store.Created)
	}
	requireSeries(t, scrape(t, m),
		`herald_enqueued_total{result="created",topic="orders"} 2`,
		`herald_enqueued_total{result="created",topic="made-up-1"} 1`,
		`herald_enqueued_total{result="created",topic="made-up-2"} 1`,
		`herald_enqueued_total{result="created",topic="other"} 1`)
}

// TestSharedGaugesSaySo: every process that shares a Redis reports the
// same store-wide gauges, so their help tells the operator to aggregate
// them across processes with max: a sum counts each notification once per
// process.
func TestSharedGaugesSaySo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.New(&store.Config{Client: srv.Client(t), Namespace: redistest.Namespace(t), Shards: 2})
	require.NoError(t, err)
	_, _, err = st.Enqueue(context.Background(), heraldtest.Notification(t, "n1", time.Now(), heraldtest.Topic("jobs")), false)
	require.NoError(t, err)
	require.NoError(t, st.Pause(context.Background(), store.PauseDisabled, "m42"))
	require.NoError(t, st.Pause(context.Background(), store.PauseTopic, "jobs"))
	ok := true
	m := metrics.New(&metrics.Config{Store: st, RedisSafetyFunc: func() (*bool, *bool) { return &ok, &ok },
		RedisMemoryFunc: func(context.Context) (int64, int64, error) { return 1 << 20, 0, nil }})
	text := scrape(t, m)
	for _, name := range []string{metrics.ScheduledNotifications, metrics.WaitingNotifications, metrics.ReservedNotifications,
		metrics.DeadNotifications, metrics.EndpointDisabled, metrics.PausedTimestampSeconds, metrics.RedisEvictionPolicyOK,
		metrics.RedisPersistenceOK, metrics.RedisMemoryUsedBytes, metrics.RedisMemoryMaxBytes} {
		help := regexp.MustCompile(`(?m)^# HELP ` + name + ` (.*)$`).FindStringSubmatch(text)
		require.NotNil(t, help, "no help for %s", name)
		require.Contains(t, help[1], "aggregate processes with max, not sum", name)
	}
}

// TestQuarantined corrupts a stored notification: the reservation that
// meets it moves it aside, and the scrape counts it, so that an alert can
// tell the operator to look in the quarantine hash rather than leave it to
// a log line.
func TestQuarantined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	rc := srv.Client(t)
	ns := redistest.Namespace(t)
	st, err := store.New(&store.Config{Client: rc, Namespace: ns, Shards: 1, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	m := metrics.New(&metrics.Config{Store: st})
	require.Contains(t, scrape(t, m), metrics.QuarantinedTotal+" 0\n")

	for _, id := range []string{"good", "bad"} {
		// Due a second ago: a due time is rounded up to the millisecond,
		// so one sent now may not be due yet when reserved at once.
		_, _, err := st.Enqueue(ctx, heraldtest.Notification(t, id, time.Now().Add(-time.Second)), false)
		require.NoError(t, err)
	}
	// A header that parses but a body that does not.
	require.NoError(t, rc.HSet(ctx, ns+":{0}:job", "bad", "d u 1000 jobs\nnot a body").Err())
	got, _, err := st.Reserve(ctx, store.PullQueue("jobs"), []int{0}, 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "the good one is handed out")
	require.Contains(t, scrape(t, m), metrics.QuarantinedTotal+" 1\n")
}

// TestOldestDueAge: with every pull worker gone, a job due 90s ago shows
// as 90s old in its queue's gauge, which no attempt's lateness would show,
// since nothing is attempted; once a worker takes it, the gauge is 0.
func TestOldestDueAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.New(&store.Config{Client: srv.Client(t), Namespace: redistest.Namespace(t), Shards: 2, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	_, _, err = st.Enqueue(ctx, heraldtest.Notification(t, "late", time.Now(), heraldtest.SendAt(time.Now().Add(-90*time.Second))), false)
	require.NoError(t, err)
	m := metrics.New(&metrics.Config{Store: st})
	age := func(queue string) float64 {
		t.Helper()
		match := regexp.MustCompile(metrics.OldestDueAgeSeconds + `\{queue="` + regexp.QuoteMeta(queue) + `"\} (\S+)`).FindStringSubmatch(scrape(t, m))
		require.NotNil(t, match, "no gauge for queue %s", queue)
		var v float64
		_, err := fmt.Sscan(match[1], &v)
		require.NoError(t, err)
		return v
	}
	require.InDelta(t, 90, age("pull.jobs"), 5)
	require.Zero(t, age("push"))

	got, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Zero(t, age("pull.jobs"))
}
