package schedule_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// TestAttemptEndsAtItsDeadlineWhateverTheHostClock: a reservation's
// deadline is on the store's clock, which need not be the host's (a store
// that reads Redis's clock, on a host whose clock is 5s behind). An attempt
// still ends when its reservation does, not 5s later, while another
// dispatcher has taken the notification back and attempts it again.
func TestAttemptEndsAtItsDeadlineWhateverTheHostClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ahead := func() time.Time { return time.Now().Add(5 * time.Second) }
	var mu sync.Mutex
	var ran []time.Duration // how long each first attempt's context lasted
	rec := newRecorder(func(ctx context.Context, n *notify.Notification) error {
		if n.Attempts > 0 {
			return nil
		}
		start := time.Now()
		<-ctx.Done()
		mu.Lock()
		ran = append(ran, time.Since(start))
		mu.Unlock()
		return ctx.Err()
	})
	for range 2 {
		st, err := store.New(&store.Config{Client: server.Client(t), Namespace: b.store.Namespace(), Shards: 8,
			Logger: heraldtest.Logger(t), TimeNowFunc: ahead})
		require.NoError(t, err)
		own := &testBundle{store: st, policies: b.policies, client: b.client}
		own.start(t, schedule.Config{Handlers: map[string]notify.Sender{"jobs": rec}, PollInterval: 50 * time.Millisecond})
	}
	zero, ttr := notify.Duration(0), notify.Duration(300*time.Millisecond)
	n, err := b.policies.Resolve(&notify.Request{ID: "job1", Topic: "jobs", Channel: notify.ChannelPull,
		Backoff: ms(0, 0, 0), Delay: &zero, TTR: &ttr}, ahead(), 0)
	require.NoError(t, err)
	_, _, err = b.store.Enqueue(context.Background(), n, false)
	require.NoError(t, err)
	b.waitState(t, "job1", notify.StateSucceeded)

	rec.mu.Lock()
	overlaps := rec.overlaps
	rec.mu.Unlock()
	require.Zero(t, overlaps, "two attempts ran at once")
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, ran)
	for _, d := range ran {
		require.Less(t, d, 2*time.Second, "an attempt with a 300ms ttr ran for %s", d)
	}
}

// TestClockSkewIsWarnedOf: a dispatcher whose host clock runs 5s ahead of
// Redis's, which starts attempts 5s early and lets its reaper take back
// reservations whose attempts still run elsewhere, says so in its log,
// naming the skew; one whose clock agrees says nothing.
func TestClockSkewIsWarnedOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		ahead time.Duration
		way   string // as warned of; "" for no warning
	}{
		{name: "Ahead", ahead: 5 * time.Second, way: "ahead of"},
		{name: "Behind", ahead: -5 * time.Second, way: "behind"},
		{name: "Agrees", ahead: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			st, err := store.New(&store.Config{Client: server.Client(t), Namespace: b.store.Namespace(), Shards: 8,
				Logger: heraldtest.Logger(t), TimeNowFunc: func() time.Time { return time.Now().Add(tt.ahead) }})
			require.NoError(t, err)
			var logs heraldtest.Buffer
			own := &testBundle{store: st, policies: b.policies, client: b.client}
			d := own.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: newRecorder(nil)},
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if tt.way != "" {
				require.Eventually(t, func() bool { return strings.Contains(logs.String(), "clock") }, 5*time.Second, 10*time.Millisecond)
				require.Regexp(t, `level=WARN msg="schedule: this host's clock differs from Redis's.* error="the host's clock is (4\.9\d*|5(\.0\d*)?)s `+tt.way+` Redis's"`, logs.String())
				return
			}
			// The check runs with the first reaping, at start; a delivery
			// after it shows that it ran.
			b.enqueue(t, "n1", ms(0), 0)
			b.waitState(t, "n1", notify.StateSucceeded)
			d.Stop()
			require.NotContains(t, logs.String(), "clock")
		})
	}
}
