package schedule_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// manyRetries is a policy retrying every 10ms, many times: a notification
// that burnt its attempts while its endpoint was disabled would show.
func manyRetries(t *testing.T) *policy.Set {
	t.Helper()
	backoff := ms(0)
	for range 60 {
		backoff = append(backoff, ms(10)...)
	}
	set, err := policy.NewSet(map[string]policy.Policy{"fast": {Backoff: backoff, TTR: notify.Duration(2 * time.Second),
		Timeout: notify.Duration(time.Second)}}, nil)
	require.NoError(t, err)
	return set
}

// flakyEndpoint makes b's policies manyRetries with the endpoint "flaky",
// of disableAfter, at a receiver that fails until up.
func (b *testBundle) flakyEndpoint(t *testing.T, disableAfter time.Duration) (rcv *receiver, up *atomic.Bool) {
	t.Helper()
	rcv, up = newFlakyReceiver(t)
	var err error
	b.policies, err = manyRetries(t).WithEndpoints(map[string]endpoint.Endpoint{
		"flaky": {URL: rcv.URL, DisableAfter: notify.Duration(disableAfter)}})
	require.NoError(t, err)
	return rcv, up
}

// TestDisabledAcrossDispatchers: three dispatchers, reserving ahead, fail
// to one endpoint together until its disable_after disables it; its
// notifications then wait, none dead, and none attempted while it stays
// disabled. Enabled while the dispatchers run, it gets every one of them
// again, each once, none lost.
func TestDisabledAcrossDispatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rcv, up := b.flakyEndpoint(t, 150*time.Millisecond)
	b.startLimited(t, 3, schedule.Config{})
	const total = 20
	b.enqueueEndpointBatch(t, "d", "flaky", total)
	ids := make([]string, total)
	for i := range ids {
		ids[i] = fmt.Sprint("d", i)
	}
	require.Eventually(t, func() bool {
		paused, err := b.store.Paused(ctx)
		_, ok := paused[store.PauseKey(store.PauseDisabled, "flaky")]
		return err == nil && ok
	}, 10*time.Second, 5*time.Millisecond, "the endpoint was never disabled")
	b.requireParked(t, ids...)
	settled := len(rcv.requests())
	time.Sleep(300 * time.Millisecond) // more than a dispatcher's view of what is paused can lag
	require.Equal(t, settled, len(rcv.requests()), "attempts while every notification was parked")
	for _, id := range ids {
		rec, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, notify.StateScheduled, rec.State, "%s burnt out while its endpoint failed", id)
	}

	up.Store(true)
	resumed, err := b.store.EnableEndpoint(ctx, "flaky")
	require.NoError(t, err)
	require.Equal(t, total, resumed)
	for _, id := range ids {
		rec := b.waitState(t, id, notify.StateSucceeded)
		last := rec.History[len(rec.History)-1]
		require.Equal(t, notify.OutcomeSuccess, last.Outcome)
	}
	var delivered []string
	for _, r := range rcv.requests()[settled:] {
		delivered = append(delivered, r.headers.Get("webhook-id"))
	}
	slices.Sort(delivered)
	want := slices.Clone(ids)
	slices.Sort(want)
	require.Equal(t, want, delivered, "after enabling, each notification once")
}

// TestSuccessEndsTheStreak: an endpoint that fails most attempts but
// answers one now and then, more often than its disable_after, is never
// disabled, however many dispatchers record its attempts, over a time
// longer than its disable_after.
func TestSuccessEndsTheStreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// A success comes about every 100ms (3 requests of 25ms, one at a
	// time, and their backoffs); disable_after leaves a loaded machine
	// twenty times that (600ms, then 1s went by without one under three
	// suites at once). The 180 requests, one at a time, take at least
	// 4.5s, longer than twice disable_after.
	const disableAfter = 2 * time.Second
	var n atomic.Int64
	rcv := newReceiver(t, func(_ int, w http.ResponseWriter) {
		time.Sleep(25 * time.Millisecond)
		if n.Add(1)%3 != 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	var err error
	b.policies, err = manyRetries(t).WithEndpoints(map[string]endpoint.Endpoint{
		"flaky": {URL: rcv.URL, MaxInFlight: 1, DisableAfter: notify.Duration(disableAfter)}})
	require.NoError(t, err)
	b.startLimited(t, 3, schedule.Config{})
	const total = 60
	b.enqueueEndpointBatch(t, "s", "flaky", total)
	for i := range total {
		b.waitState(t, fmt.Sprint("s", i), notify.StateSucceeded)
	}
	reqs := rcv.requests()
	span := reqs[len(reqs)-1].at.Sub(reqs[0].at)
	t.Logf("%d requests over %s", len(reqs), span.Round(time.Millisecond))
	require.Greater(t, span, 2*disableAfter, "the endpoint failed for too short a time to tell")
	h, err := b.store.EndpointHealth(ctx, "flaky")
	require.NoError(t, err)
	require.Nil(t, h.DisabledAt, "disabled though attempts kept succeeding")
	paused, err := b.store.Paused(ctx)
	require.NoError(t, err)
	require.NotContains(t, paused, store.PauseKey(store.PauseDisabled, "flaky"))
}
