package client_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestLostReservationIsGivenBack: a pull worker's reservation whose answer
// is lost (a read timeout, or the worker hanging up while it is on its
// way) gives back what Redis reserved for it, so that the worker's next
// reserve gets the job with no attempt counted, where it waited out its
// ttr and then counted an attempt never made. When Redis stays unreachable
// after the loss, so that it cannot be given back at once, it is given
// back once Redis answers again, before the next reserve looks.
func TestLostReservationIsGivenBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		hangsUp, thenDown bool
	}{
		{name: "ReadTimeout"},
		{name: "HangsUp", hangsUp: true},
		{name: "ThenDown", thenDown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			lose := &heraldtest.LoseReservation{UntilDone: tc.hangsUp, ThenDown: tc.thenDown}
			c := setupWithJob(t, lose)
			lose.Armed.Store(true)
			reserveCtx, hangUp := context.WithCancel(ctx)
			if tc.hangsUp {
				go func() {
					for !lose.Lost.Load() {
						time.Sleep(time.Millisecond)
					}
					hangUp()
				}()
			}
			_, err := c.Reserve(reserveCtx, "appointment-reminder", 10, 0)
			hangUp()
			require.Error(t, err)
			require.True(t, lose.Lost.Load())
			if tc.thenDown {
				require.Positive(t, lose.Refused.Load(), "the give-back was tried while Redis was down")
				lose.Down.Store(false)
			}

			requireGivenBack(t, c)
		})
	}
}

// hangUpHook hangs up the worker once Redis has answered its reservation,
// and starts an outage (sets outage.Down) as the worker leaves: the
// give-back of what no one received fails.
type hangUpHook struct {
	armed  atomic.Bool
	outage *heraldtest.LoseReservation
	hangUp func()
}

func (*hangUpHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*hangUpHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *hangUpHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil && slices.ContainsFunc(cmds, isReservation) && h.armed.CompareAndSwap(true, false) {
			h.hangUp()
			h.outage.Down.Store(true)
		}
		return err
	}
}

// isReservation reports whether c runs a script over a ready list: a
// reservation, once the enqueues are done.
func isReservation(c redis.Cmder) bool {
	return strings.HasPrefix(c.Name(), "eval") && slices.ContainsFunc(c.Args(), func(a any) bool {
		s, _ := a.(string)
		return strings.Contains(s, ":ready:")
	})
}

// setupWithJob returns a client whose Redis client runs hooks, with job-1
// of appointment-reminder enqueued, due now, its ttr a minute.
func setupWithJob(t *testing.T, hooks ...redis.Hook) *client.Client {
	t.Helper()
	rc := server.Client(t)
	for _, h := range hooks {
		rc.AddHook(h)
	}
	c := setup(t, func(cfg *client.Config) {
		st, err := store.New(&store.Config{Client: rc, Namespace: redistest.Namespace(t), Shards: 4})
		require.NoError(t, err)
		cfg.Store = st
	})
	ttr := notify.Duration(time.Minute)
	_, _, err := c.Enqueue(context.Background(), &notify.Request{ID: "job-1", Topic: "appointment-reminder", TTR: &ttr})
	require.NoError(t, err)
	return c
}

// requireGivenBack reserves job-1 again, waiting up to a second: it must
// have been given back, with no attempt counted.
func requireGivenBack(t *testing.T, c *client.Client) {
	t.Helper()
	ctx := context.Background()
	got, err := c.Reserve(ctx, "appointment-reminder", 10, time.Second)
	require.NoError(t, err)
	if len(got) == 0 {
		n, err := c.Get(ctx, "job-1")
		require.NoError(t, err)
		t.Fatalf("Redis answers again, but the job is not given back: it is %s until %v, for no one", n.State, n.Deadline)
	}
	require.Len(t, got, 1)
	require.Equal(t, "job-1", got[0].ID)
	require.Equal(t, 0, got[0].Attempts)
	require.Empty(t, got[0].History)
}

// TestUnreceivedReservationIsGivenBackAfterOutage: a reservation Redis
// answered as its worker hung up is given back; when Redis cannot be
// reached for that, it is given back once Redis answers again, so that the
// next reserve gets the job with no attempt counted, where it waited out
// its ttr for no one.
func TestUnreceivedReservationIsGivenBackAfterOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hook := &hangUpHook{outage: &heraldtest.LoseReservation{}}
	c := setupWithJob(t, hook.outage, hook)
	reserveCtx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	hook.hangUp = hangUp
	hook.armed.Store(true)
	_, err := c.Reserve(reserveCtx, "appointment-reminder", 10, 0)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, hook.outage.Down.Load(), "the reservation was answered")
	hook.outage.Down.Store(false)
	requireGivenBack(t, c)
}
