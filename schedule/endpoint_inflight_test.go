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
// up on them, at the policy's timeout or at the end of the reservation's
// ttr, the receiver never holds more open requests from Herald than
// max_in_flight, and the places of the attempts cut off come back: every
// notification is delivered, each of those cut off on a later attempt.
func TestMaxInFlightThroughTimeouts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		ttr, timeout time.Duration
	}{
		{name: "Timeout", ttr: 2 * time.Second, timeout: 200 * time.Millisecond},
		{name: "TTRExpiry", ttr: 300 * time.Millisecond, timeout: 5 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testMaxInFlightThroughTimeouts(t, tt.ttr, tt.timeout)
		})
	}
}

func testMaxInFlightThroughTimeouts(t *testing.T, ttr, timeout time.Duration) {
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
		TTR: notify.Duration(ttr), Timeout: notify.Duration(timeout)}}, nil)
	require.NoError(t, err)
	b.policies, err = set.WithEndpoints(map[string]endpoint.Endpoint{"m": {URL: rcv.URL, MaxInFlight: 3}})
	require.NoError(t, err)
	b.startLimited(t, 3, schedule.Config{})
	const total = 40
	b.enqueueEndpointBatch(t, "t", "m", total)
	retried, cut := 0, map[notify.Outcome]int{}
	for i := range total {
		rec := b.waitState(t, fmt.Sprint("t", i), notify.StateSucceeded)
		if len(rec.History) > 1 {
			retried++
		}
		for _, a := range rec.History[:len(rec.History)-1] {
			cut[a.Outcome]++
		}
	}
	t.Logf("most open at once: %d; %d requests, %d notifications retried, attempts cut off: %v", most.Load(), count.Load(), retried, cut)
	require.Positive(t, retried, "no attempt timed out")
	require.LessOrEqual(t, most.Load(), int64(3), "more requests open at the receiver than max_in_flight")
}
