package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
)

// TestPauseHoldsForWhatWasReservedAhead: several dispatchers, each with one
// slow worker and notifications reserved ahead of it, are busy with a
// backlog when the topic is paused. Once the pause has answered, none of
// them may start another attempt, reserved before the pause or not.
func TestPauseHoldsForWhatWasReservedAhead(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	var mu sync.Mutex
	var started []time.Time
	send := notify.SenderFunc(func(ctx context.Context, n *notify.Notification) (notify.Response, error) {
		mu.Lock()
		started = append(started, time.Now())
		mu.Unlock()
		select {
		case <-time.After(40 * time.Millisecond):
		case <-ctx.Done():
		}
		return notify.Response{StatusCode: http.StatusOK}, nil
	})
	for range 3 {
		d, err := schedule.New(&schedule.Config{
			Store:        b.store,
			Senders:      map[string]notify.Sender{notify.ChannelWebhook: send},
			PoliciesFunc: func() *policy.Set { return b.policies },
			Concurrency:  1,
			Prefetch:     20,
			Logger:       testLogger(t),
		})
		require.NoError(t, err)
		require.NoError(t, d.Start(t.Context()))
		t.Cleanup(d.Stop)
	}
	for i := range 200 {
		must[notify.Notification](t, b, http.StatusCreated, http.MethodPost, "/v1/notifications", map[string]any{"id": fmt.Sprintf("n-%d", i), "topic": "orders"})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(started)
	}
	require.Eventually(t, func() bool { return count() >= 10 }, 10*time.Second, time.Millisecond)

	must[map[string]any](t, b, http.StatusOK, http.MethodPost, "/v1/topics/orders/pause", nil)
	answered := time.Now()
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	var late []time.Duration
	for _, at := range started {
		if at.After(answered) {
			late = append(late, at.Sub(answered))
		}
	}
	require.Empty(t, late, "attempts started this long after the pause answered")
}
