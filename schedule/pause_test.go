package schedule_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
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
