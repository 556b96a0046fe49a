package schedule_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
)

// TestPartitionedDispatcherOverrunCountsOnce: a dispatcher cut off from
// Redis while a worker it had free runs an attempt whose sender ignores the
// end of its context still lives: its attempt runs on. Another dispatcher
// reaps the reservation once it ran out and counts the attempt as expired;
// with a single attempt allowed the notification is dead, and no second
// attempt starts while the first still runs.
func TestPartitionedDispatcherOverrunCountsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cutOff := &heraldtest.LoseReservation{} // Down: every command fails unsent, as in a partition
	client := server.Client(t)
	client.AddHook(cutOff)
	b1 := setupOn(t, client, b.store.Namespace())

	hungStarted, end := make(chan string, 1), make(chan struct{})
	var hungOnce atomic.Bool
	rec := newRecorder(func(ctx context.Context, n *notify.Notification) error {
		if n.ID == "hung" && hungOnce.CompareAndSwap(false, true) {
			hungStarted <- n.Receipt
			<-end // ignores ctx
		}
		return nil
	})
	senders := map[string]notify.Sender{notify.ChannelWebhook: rec}
	b1.start(t, schedule.Config{Senders: senders, Concurrency: 1})
	t.Cleanup(func() { close(end) }) // before the dispatchers' Stop

	ttr := notify.Duration(500 * time.Millisecond)
	b.enqueue(t, "hung", ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	select {
	case <-hungStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("hung not attempted in 10s")
	}
	// Cut off once the start is recorded, past the 10ms within which a
	// start may go unrecorded and its attempt uncounted.
	waitStartsRecorded(t, b.store.Namespace(), []string{"hung"})
	cutOff.Down.Store(true)

	b.start(t, schedule.Config{Senders: senders})
	got := b.waitState(t, "hung", notify.StateDead)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome)
	require.Equal(t, 1, rec.attempts("hung"), "a second attempt started while the first still ran")
}
