package schedule_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
)

// TestMaxInFlightThroughTimeouts: with three dispatchers reserving ahead
// and a receiver that leaves some requests unanswered until Herald gives
// up on them, the receiver never holds more open requests from Herald than
// max_in_flight, and the places of timed-out attempts come back: every
// notification is delivered, each of those that timed out on a later
// attempt.
func TestMaxInFlightThroughTimeouts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var open, most, count atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := open.Add(1)
		defer open.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		_, _ = io.ReadAll(r.Body)
		if count.Add(1)%4 == 1 {
			<-r.Context().Done() // unanswered until Herald hangs up
			return
		}
		time.Sleep(5 * time.Millisecond)
	}))
	t.Cleanup(rcv.Close)
	set, err := policy.NewSet(map[string]policy.Policy{"fast": {Backoff: ms(0, 0, 0, 0, 0, 0, 0, 0),
		TTR: notify.Duration(2 * time.Second), Timeout: notify.Duration(200 * time.Millisecond)}}, nil)
	require.NoError(t, err)
	b.policies, err = set.WithEndpoints(map[string]endpoint.Endpoint{"m": {URL: rcv.URL, MaxInFlight: 3}})
	require.NoError(t, err)
	b.startLimited(t, 3, schedule.Config{})
	const total = 40
	b.enqueueEndpointBatch(t, "t", "m", total)
	retried := 0
	for i := range total {
		rec := b.waitState(t, fmt.Sprint("t", i), notify.StateSucceeded)
		if len(rec.History) > 1 {
			retried++
		}
	}
	t.Logf("most open at once: %d; %d requests, %d notifications retried", most.Load(), count.Load(), retried)
	require.Positive(t, retried, "no attempt timed out")
	require.LessOrEqual(t, most.Load(), int64(3), "more requests open at the receiver than max_in_flight")
}
