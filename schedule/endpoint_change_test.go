package schedule_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
)

// slowOK answers 200 after 20ms.
func slowOK(int, http.ResponseWriter) { time.Sleep(20 * time.Millisecond) }

// backlogAt registers endpoint m at rcv with max_in_flight 2, starts three
// dispatchers, enqueues total notifications for m with ids prefix0..,
// and returns once rcv has had some: a backlog waits for m's places.
func (b *testBundle) backlogAt(t *testing.T, rcv *receiver, prefix string, total int) {
	t.Helper()
	_, err := b.store.PutEndpoint(context.Background(), "m", &endpoint.Endpoint{URL: rcv.URL, MaxInFlight: 2})
	require.NoError(t, err)
	b.startLimited(t, 3, schedule.Config{})
	b.enqueueEndpointBatch(t, prefix, "m", total)
	require.Eventually(t, func() bool { return len(rcv.requests()) >= 5 }, 10*time.Second, 5*time.Millisecond)
}

// TestEndpointMovedWhileABacklogWaits: an endpoint's URL changed over the
// API while a backlog waits for its max_in_flight, reserved ahead by three
// dispatchers, moves the rest of the backlog: once the dispatchers have
// read the change (a second at most), nothing goes to the old URL, and
// every notification is delivered once, to one URL or the other.
func TestEndpointMovedWhileABacklogWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old, moved := newReceiver(t, slowOK), newReceiver(t, slowOK)
	const total = 120
	b.backlogAt(t, old, "mv", total)

	_, err := b.store.PutEndpoint(ctx, "m", &endpoint.Endpoint{URL: moved.URL, MaxInFlight: 2})
	require.NoError(t, err)
	changed := time.Now()
	for i := range total {
		rec := b.waitState(t, fmt.Sprint("mv", i), notify.StateSucceeded)
		require.Len(t, rec.History, 1)
	}
	seen := map[string]int{}
	for _, rcv := range []*receiver{old, moved} {
		for _, r := range rcv.requests() {
			seen[r.headers.Get("webhook-id")]++
		}
	}
	require.Len(t, seen, total)
	for id, n := range seen {
		require.Equal(t, 1, n, "%s delivered %d times", id, n)
	}
	for _, r := range old.requests() {
		// The registry's cache (a second) plus an attempt under way.
		require.Less(t, r.at.Sub(changed), 1500*time.Millisecond, "the old URL still got requests long after the move")
	}
	require.NotEmpty(t, moved.requests())
	t.Logf("%d to the old URL, %d to the new", len(old.requests()), len(moved.requests()))
}

// TestEndpointDeletedWhileABacklogWaits: deleting an endpoint over the API
// while a backlog waits for its max_in_flight fails the rest permanently,
// as DELETE /v1/endpoints/{name} says: each notification is either
// delivered or dead with an error naming the endpoint, none left waiting,
// none counted delivered without a request.
func TestEndpointDeletedWhileABacklogWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rcv := newReceiver(t, slowOK)
	const total = 120
	b.backlogAt(t, rcv, "del", total)
	require.NoError(t, b.store.DeleteEndpoint(ctx, "m"))

	succeeded, dead := 0, 0
	for i := range total {
		id := fmt.Sprint("del", i)
		var rec *notify.Notification
		require.Eventually(t, func() bool {
			var err error
			rec, err = b.store.Get(ctx, id)
			return err == nil && (rec.State == notify.StateSucceeded || rec.State == notify.StateDead)
		}, 15*time.Second, 5*time.Millisecond, "%s still waits after its endpoint was deleted", id)
		require.Len(t, rec.History, 1)
		if rec.State == notify.StateDead {
			dead++
			require.Equal(t, notify.OutcomePermanent, rec.History[0].Outcome)
			require.Contains(t, rec.History[0].Error, `endpoint "m"`)
			continue
		}
		succeeded++
	}
	t.Logf("%d delivered, %d dead", succeeded, dead)
	require.Equal(t, succeeded, len(rcv.requests()), "delivered without a request, or a request for nothing")
	require.Positive(t, dead)
}
