package schedule_test

import (
	"context"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

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
	drop := &dropReservation{}
	client.AddHook(drop)
	b := setupOn(t, client, redistest.Namespace(t))
	rec := newRecorder(nil)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	drop.armed.Store(true)
	ttr := notify.Duration(time.Minute)
	b.enqueue(t, "n1", ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.True(t, drop.dropped.Load(), "a reservation's answer was lost")
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
	drop := &dropReservation{untilDone: true}
	client.AddHook(drop)
	b := setupOn(t, client, redistest.Namespace(t))
	d := b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: newRecorder(nil)}})
	drop.armed.Store(true)
	ttr := notify.Duration(time.Minute)
	b.enqueue(t, "n1", ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	require.Eventually(t, drop.dropped.Load, 5*time.Second, time.Millisecond, "the reservation took n1")
	requireStopsWithin(t, d, 5*time.Second)

	rec := newRecorder(nil)
	setupOn(t, server.Client(t), b.store.Namespace()).start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.Equal(t, 1, rec.attempts("n1"))
	require.Len(t, got.History, 1, "no attempt counted for the stopped reservation")
}

// dropReservation is a go-redis hook that, once armed, loses the answer to
// the first reservation that took something: Redis runs it, the caller
// gets a read timeout, or with untilDone waits until its context ends.
type dropReservation struct {
	armed, dropped atomic.Bool
	untilDone      bool
}

func (*dropReservation) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*dropReservation) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *dropReservation) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !d.armed.Load() || d.dropped.Load() {
			return err
		}
		for _, c := range cmds {
			if tookSome(c) && d.dropped.CompareAndSwap(false, true) {
				var lost error = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
				if d.untilDone {
					<-ctx.Done()
					lost = ctx.Err()
				}
				for _, c := range cmds {
					c.SetErr(lost)
				}
				return lost
			}
		}
		return err
	}
}

// tookSome reports whether c is a reservation that reserved something: a
// script over a ready list whose answer names ids.
func tookSome(c redis.Cmder) bool {
	isReserve := false
	for _, a := range c.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, ":ready:") {
			isReserve = true
		}
	}
	cmd, ok := c.(interface{ Val() any }) // the store wraps its *redis.Cmd
	if !isReserve || !ok || c.Err() != nil {
		return false
	}
	shards, _ := cmd.Val().([]any)
	for _, s := range shards {
		if parts, _ := s.([]any); len(parts) > 1 {
			if ids, _ := parts[1].([]any); len(ids) > 0 {
				return true
			}
		}
	}
	return false
}
