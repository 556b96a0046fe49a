package schedule_test

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
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
	var count atomic.Int64
	var mu sync.Mutex
	var spans [][2]time.Time // each request's time open at the receiver
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		end := start
		defer func() {
			mu.Lock()
			spans = append(spans, [2]time.Time{start, end})
			mu.Unlock()
		}()
		_, _ = io.ReadAll(r.Body)
		if count.Add(1)%4 == 1 {
			<-r.Context().Done() // unanswered until Herald hangs up
			// The receiver hears of the hang-up a moment after Herald
			// made it and gave the place to another attempt: on a
			// loaded machine, up to some tens of milliseconds.
			end = time.Now().Add(-hangUpHeard)
			return
		}
		time.Sleep(5 * time.Millisecond)
		end = time.Now()
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
	mu.Lock()
	most := mostAtOnce(spans)
	mu.Unlock()
	t.Logf("most open at once: %d; %d requests, %d notifications retried, attempts cut off: %v", most, count.Load(), retried, cut)
	require.Positive(t, retried, "no attempt timed out")
	require.LessOrEqual(t, most, 3, "more requests open at the receiver than max_in_flight")
}

// hangUpHeard is how much sooner than the receiver heard of it Herald is
// taken to have hung up a request.
const hangUpHeard = 50 * time.Millisecond

// mostAtOnce returns the most spans open at one instant.
func mostAtOnce(spans [][2]time.Time) int {
	type edge struct {
		at   time.Time
		open int
	}
	var edges []edge
	for _, s := range spans {
		if s[1].After(s[0]) {
			edges = append(edges, edge{s[0], 1}, edge{s[1], -1})
		}
	}
	// Ends before starts at one instant: a place freed is free.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), a.open-b.open) })
	most, now := 0, 0
	for _, e := range edges {
		now += e.open
		most = max(most, now)
	}
	return most
}
