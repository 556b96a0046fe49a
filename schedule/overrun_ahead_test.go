package schedule_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
)

// TestOverrunOfAttemptStartedFromAheadCounts: a notification reserved
// ahead of a busy worker and then started by it, whose sender ignores the
// end of its context and outlives the ttr, in a dispatcher that goes on
// living, counts that attempt as expired: with a single attempt allowed it
// is dead, and it is not attempted a second time as if never started.
func TestOverrunOfAttemptStartedFromAheadCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slowStarted, releaseSlow, hungStarted, end := make(chan struct{}), make(chan struct{}), make(chan string, 4), make(chan struct{})
	var mu sync.Mutex
	hungAttempts := 0
	send := notify.SenderFunc(func(ctx context.Context, n *notify.Notification) (notify.Response, error) {
		switch n.ID {
		case "slow":
			close(slowStarted)
			<-releaseSlow
		case "hung":
			mu.Lock()
			hungAttempts++
			mu.Unlock()
			hungStarted <- n.Receipt
			<-end // ignores ctx
		}
		return notify.Response{StatusCode: 200}, nil
	})
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: send}, Concurrency: 1})
	t.Cleanup(func() { close(end) }) // before the dispatcher's Stop

	b.enqueue(t, "quick", ms(0), 0)
	b.waitState(t, "quick", notify.StateSucceeded) // an attempt was timed: the dispatcher now reserves ahead
	b.enqueue(t, "slow", ms(0), 0)
	select {
	case <-slowStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("slow not attempted in 10s")
	}
	ttr := notify.Duration(1500 * time.Millisecond)
	b.enqueue(t, "hung", ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	b.waitState(t, "hung", notify.StateReserved)
	close(releaseSlow)
	select {
	case <-hungStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("hung not attempted in 10s")
	}

	got := b.waitState(t, "hung", notify.StateDead)
	require.Equal(t, 1, got.Attempts)
	require.Len(t, got.History, 1)
	require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, hungAttempts, "attempted again as if never started")
}
