package schedule_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
)

// TestLostReservationIsGivenBack: Redis reserves a notification but the
// answer never reaches the dispatcher (a stall past the read timeout, a
// reset connection). The dispatcher gives it back once Redis answers
// again, and it is delivered at once with its one attempt, where it waited
// out its ttr and was then counted as a failed attempt that never was,
// the last of its array sending it to the dead letters unsent.
func TestLostReservationIsGivenBack(t *testing.T) {
	t.Parallel()
	client := server.Client(t)
	drop := &heraldtest.LoseReservation{}
	client.AddHook(drop)
	b := setupOn(t, client, redistest.Namespace(t))
	rec := newRecorder(nil)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	drop.Armed.Store(true)
	ttr := notify.Duration(time.Minute)
	b.enqueue(t, "n1", ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.True(t, drop.Lost.Load(), "a reservation's answer was lost")
	require.Equal(t, 1, rec.attempts("n1"))
	require.Len(t, got.History, 1, "no attempt counted for the lost reservation")
	require.Equal(t, notify.OutcomeSuccess, got.History[0].Outcome)
}

// TestStopDuringAReservation: a dispatcher stopped while a reservation's
// answer is on its way gives back what that reservation took, and another
// dispatcher delivers it at once, where it waited out its ttr.
func TestStopDuringAReservation(t *testing.T) {
	t.Parallel()
	client := server.Client(t)
	drop := &heraldtest.LoseReservation{UntilDone: true}
	client.AddHook(drop)
	b := setupOn(t, client, redistest.Namespace(t))
	d := b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: newRecorder(nil)}})
	drop.Armed.Store(true)
	ttr := notify.Duration(time.Minute)
	b.enqueue(t, "n1", ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	require.Eventually(t, drop.Lost.Load, 5*time.Second, time.Millisecond, "the reservation took n1")
	requireStopsWithin(t, d, 5*time.Second)

	rec := newRecorder(nil)
	setupOn(t, server.Client(t), b.store.Namespace()).start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.Equal(t, 1, rec.attempts("n1"))
	require.Len(t, got.History, 1, "no attempt counted for the stopped reservation")
}
