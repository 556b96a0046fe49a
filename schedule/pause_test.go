package schedule_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// requireParked waits until every id is parked by a pause: due, given back
// unattempted.
func (b *testBundle) requireParked(t *testing.T, ids ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, id := range ids {
			rec, err := b.store.Get(context.Background(), id)
			if err != nil || !store.Parked(rec) {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "not all parked")
}

func TestPause(t *testing.T) {
	t.Parallel()
	ok := func(_ int, w http.ResponseWriter) { _, _ = io.WriteString(w, "ok") }
	ctx := context.Background()

	for _, kind := range []string{store.PauseTopic, store.PauseEndpoint} {
		t.Run("Paused"+kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			paused, other := newReceiver(t, ok), newReceiver(t, ok)
			var err error
			b.policies, err = b.policies.WithEndpoints(map[string]endpoint.Endpoint{
				"paused": {URL: paused.URL}, "other": {URL: other.URL},
			})
			require.NoError(t, err)
			name := map[string]string{store.PauseTopic: "orders", store.PauseEndpoint: "paused"}[kind]
			require.NoError(t, b.store.Pause(ctx, kind, name))
			b.startEndpoints(t)

			var ids []string
			for i := range 20 {
				ids = append(ids, fmt.Sprintf("p%d", i))
				b.enqueueEndpoint(t, ids[i], "paused")
			}
			if kind == store.PauseEndpoint {
				// Another endpoint's notifications keep flowing meanwhile.
				b.enqueueEndpoint(t, "flows", "other")
				b.waitState(t, "flows", notify.StateSucceeded)
			}
			b.requireParked(t, ids...)
			require.Empty(t, paused.requests(), "an attempt started while paused")

			moved, err := b.store.Resume(ctx, kind, name)
			require.NoError(t, err)
			require.Equal(t, len(ids), moved)
			for _, id := range ids {
				rec := b.waitState(t, id, notify.StateSucceeded)
				require.Len(t, rec.History, 1, "a pause burnt an attempt")
				require.Equal(t, 0, rec.History[0].Attempt)
			}
			require.Len(t, paused.requests(), len(ids))
		})
	}
}

// TestPauseHoldsForADispatcherStartedInAnOutage: a dispatcher started
// while Redis is down (a deploy during a failover) attempts nothing of a
// paused topic once Redis is back, though it could not read what is paused
// when it started; it says why it reserves nothing meanwhile.
func TestPauseHoldsForADispatcherStartedInAnOutage(t *testing.T) {
	t.Parallel()
	srv, b := setupOutage(t, "pause-outage")
	ctx := context.Background()
	require.NoError(t, b.store.Pause(ctx, store.PauseTopic, "orders"))
	b.enqueue(t, "held", ms(0), 0)
	srv.Kill()
	rec := newRecorder(nil)
	var logs heraldtest.Buffer
	d, err := schedule.New(&schedule.Config{Store: b.store, Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
		PoliciesFunc: func() *policy.Set { return b.policies }, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(d.Stop)
	time.Sleep(300 * time.Millisecond) // the outage: every read fails
	require.NoError(t, srv.Restart())
	require.Eventually(t, func() bool {
		got, err := b.store.Get(ctx, "held")
		return rec.attempts("held") > 0 || err == nil && store.Parked(got)
	}, 10*time.Second, 5*time.Millisecond, "neither parked nor attempted")
	require.Zero(t, rec.attempts("held"), "attempted while its topic is paused")
	require.Contains(t, logs.String(), "cannot read what is paused; nothing is reserved until it can")
}
