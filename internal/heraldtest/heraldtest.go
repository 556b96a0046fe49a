// Package heraldtest holds helpers that Herald's tests share: a logger that
// writes to the test's log, a buffer that logs can be written to
// concurrently, a stub clock, a notification builder, a check that the
// store's statistics agree with its sets, and a go-redis hook that loses a
// reservation's answer. It is test-only: production packages must not
// import it.
package heraldtest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// Logger returns a debug-level logger whose lines go to tb's log, shown
// when the test fails or runs with -v.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Buffer is a bytes.Buffer safe for concurrent use: a log destination that
// background goroutines write while the test reads it.
type Buffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Clock is a clock that moves only when told; it is safe for concurrent
// use. Pass its Now as a TimeNowFunc.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// NewClock returns a clock stopped at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// NotificationOption changes the request a test notification is resolved
// from.
type NotificationOption func(*notify.Request)

// Topic sets the topic (default "jobs").
func Topic(topic string) NotificationOption { return func(r *notify.Request) { r.Topic = topic } }

// Channel and Target set where it goes (default: channel pull).
func Channel(channel, target string) NotificationOption {
	return func(r *notify.Request) { r.Channel, r.Target = channel, target }
}

// Backoff sets its backoff array.
func Backoff(backoff ...time.Duration) NotificationOption {
	return func(r *notify.Request) {
		r.Backoff = nil
		for _, d := range backoff {
			r.Backoff = append(r.Backoff, notify.Duration(d))
		}
	}
}

// Delay sets how long after now it is sent (default 0).
func Delay(d time.Duration) NotificationOption {
	return func(r *notify.Request) { v := notify.Duration(d); r.Delay = &v }
}

// SendAt sets the instant it is sent at, instead of a delay.
func SendAt(t time.Time) NotificationOption {
	return func(r *notify.Request) { r.Delay, r.SendAt = nil, &t }
}

// Endpoint makes it a webhook to the named endpoint, instead of a target.
func Endpoint(name string) NotificationOption {
	return func(r *notify.Request) { r.Channel, r.Target, r.Endpoint = notify.ChannelWebhook, "", name }
}

// OrderKey sets its order key.
func OrderKey(key string) NotificationOption { return func(r *notify.Request) { r.OrderKey = key } }

// Payload sets its JSON payload (default {"n":1}).
func Payload(payload string) NotificationOption {
	return func(r *notify.Request) { r.Payload = json.RawMessage(payload) }
}

// Notification resolves a notification with the default policy set, as
// the API would, sent at now: by default a pull notification of topic
// "jobs" with payload {"n":1}, due at once.
func Notification(tb testing.TB, id string, now time.Time, opts ...NotificationOption) *notify.Notification {
	tb.Helper()
	zero := notify.Duration(0)
	req := &notify.Request{ID: id, Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{"n":1}`), Delay: &zero}
	for _, o := range opts {
		o(req)
	}
	set, err := policy.NewSet(nil, nil)
	require.NoError(tb, err)
	n, err := set.Resolve(req, now, 0)
	require.NoError(tb, err)
	return n
}

// RequireStatsMatch fails tb unless the statistics the scripts keep
// (scheduled, waiting, reserved and dead per topic) equal what the store's sets
// hold, counted afresh.
func RequireStatsMatch(tb testing.TB, st *store.Store) {
	tb.Helper()
	ctx := context.Background()
	kept, err := st.Stats(ctx)
	require.NoError(tb, err)
	counted, err := st.Recount(ctx)
	require.NoError(tb, err)
	gauges := func(m map[string]store.TopicStats) map[string][4]int64 {
		out := map[string][4]int64{}
		for t, s := range m {
			if g := [4]int64{s.Scheduled, s.Waiting, s.Reserved, s.Dead}; g != [4]int64{} {
				out[t] = g
			}
		}
		return out
	}
	require.Equal(tb, gauges(counted), gauges(kept), "gauges [scheduled waiting reserved dead] per topic: counted afresh vs kept by the scripts")
}

// AllShards lists every shard of st, for a reservation that looks at all.
func AllShards(tb testing.TB, st *store.Store) []int {
	tb.Helper()
	n, err := st.Shards(context.Background())
	require.NoError(tb, err)
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// BenchPayload is the benchmarks' payload: an order of about 100 bytes.
var BenchPayload = []byte(`{"order":"2026112200001","amount":"10.00","note":"` + strings.Repeat("x", 48) + `"}`)

// EnqueueConcurrently enqueues count pull notifications "n1".."n<count>" of
// topic bench with BenchPayload from producers goroutines, each making
// single calls as a service's request handlers would, and returns when all
// are stored.
func EnqueueConcurrently(tb testing.TB, st *store.Store, set *policy.Set, producers, count int) {
	tb.Helper()
	var seq atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for i := seq.Add(1); i <= int64(count); i = seq.Add(1) {
				n, err := set.Resolve(&notify.Request{ID: "n" + strconv.FormatInt(i, 10), Topic: "bench",
					Channel: notify.ChannelPull, Payload: BenchPayload}, time.Now(), 0)
				if err == nil {
					_, _, err = st.Enqueue(context.Background(), n, false)
				}
				if err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
