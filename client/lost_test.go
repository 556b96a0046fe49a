package client_test

import (
	"context"
	"testing"
	"time"

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
// ttr and then counted an attempt never made.
func TestLostReservationIsGivenBack(t *testing.T) {
	t.Parallel()
	for name, hangsUp := range map[string]bool{"ReadTimeout": false, "HangsUp": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			lose := &heraldtest.LoseReservation{UntilDone: hangsUp}
			rc := server.Client(t)
			rc.AddHook(lose)
			c := setup(t, func(cfg *client.Config) {
				st, err := store.New(&store.Config{Client: rc, Namespace: redistest.Namespace(t), Shards: 4})
				require.NoError(t, err)
				cfg.Store = st
			})
			ttr := notify.Duration(time.Minute)
			_, _, err := c.Enqueue(ctx, &notify.Request{ID: "job-1", Topic: "appointment-reminder", TTR: &ttr})
			require.NoError(t, err)
			lose.Armed.Store(true)
			reserveCtx, hangUp := context.WithCancel(ctx)
			if hangsUp {
				go func() {
					for !lose.Lost.Load() {
						time.Sleep(time.Millisecond)
					}
					hangUp()
				}()
			}
			_, err = c.Reserve(reserveCtx, "appointment-reminder", 10, 0)
			hangUp()
			require.Error(t, err)
			require.True(t, lose.Lost.Load())

			got, err := c.Reserve(ctx, "appointment-reminder", 10, time.Second)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, 0, got[0].Attempts)
			require.Empty(t, got[0].History)
		})
	}
}
