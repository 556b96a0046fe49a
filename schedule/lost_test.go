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
// reset connection). What it reserved is given back at once, and delivered
// with its one attempt, where it waited out its ttr and was then counted
// as a failed attempt that never was, the last of its array sending it to
// the dead letters unsent.
func TestLostReservationIsGivenBack(t *testing.T) {
	t.Parallel()
	lose := &heraldtest.LoseReservation{}
	b, rec, _ := startLosing(t, lose)
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.True(t, lose.Lost.Load(), "a reservation's answer was lost")
	require.Equal(t, 1, rec.attempts("n1"))
	require.Len(t, got.History, 1, "no attempt counted for the lost reservation")
	require.Equal(t, notify.OutcomeSuccess, got.History[0].Outcome)
}

// TestLostReservationAfterAnOutage: Redis stays unreachable after the
// answer is lost, so that what the reservation took cannot be given back
// at once; the dispatcher gives it back once Redis answers again, well
// before its ttr.
func TestLostReservationAfterAnOutage(t *testing.T) {
	t.Parallel()
	lose := &heraldtest.LoseReservation{ThenDown: true}
	b, rec, _ := startLosing(t, lose)
	// Reserve's own try to give it back is refused.
	require.Eventually(t, func() bool { return lose.Refused.Load() > 0 }, 5*time.Second, time.Millisecond)
	lose.Down.Store(false)
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.Equal(t, 1, rec.attempts("n1"))
	require.Len(t, got.History, 1, "no attempt counted for the lost reservation")
}

// TestStopDuringAReservation: a dispatcher stopped while a reservation's
// answer is on its way gives back what that reservation took, and another
// dispatcher delivers it at once, where it waited out its ttr.
func TestStopDuringAReservation(t *testing.T) {
	t.Parallel()
	lose := &heraldtest.LoseReservation{UntilDone: true}
	b, _, d := startLosing(t, lose)
	require.Eventually(t, lose.Lost.Load, 5*time.Second, time.Millisecond, "the reservation took n1")
	requireStopsWithin(t, d, 5*time.Second)

	rec := newRecorder(nil)
	setupOn(t, server.Client(t), b.store.Namespace()).start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.Equal(t, 1, rec.attempts("n1"))
	require.Len(t, got.History, 1, "no attempt counted for the stopped reservation")
}

// startLosing starts a dispatcher whose Redis client loses answers as lose
// says, arms lose, and enqueues n1 with a ttr of a minute, longer than any
// of these tests waits.
func startLosing(t *testing.T, lose *heraldtest.LoseReservation) (*testBundle, *recorder, *schedule.Dispatcher) {
	t.Helper()
	client := server.Client(t)
	client.AddHook(lose)
	b := setupOn(t, client, redistest.Namespace(t))
	rec := newRecorder(nil)
	d := b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	lose.Armed.Store(true)
	ttr := notify.Duration(time.Minute)
	b.enqueue(t, "n1", ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	return b, rec, d
}
