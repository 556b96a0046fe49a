package schedule_test

import (
	"context"
	"fmt"
	"net/http"
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

func TestDisableAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rcv, up := newFlakyReceiver(t)
	set, err := policy.NewSet(map[string]policy.Policy{"fast": {Backoff: ms(0, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,
		10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10)}}, nil)
	require.NoError(t, err)
	b.policies, err = set.WithEndpoints(map[string]endpoint.Endpoint{
		"flaky": {URL: rcv.URL, DisableAfter: notify.Duration(100 * time.Millisecond)},
	})
	require.NoError(t, err)
	b.startLimited(t, 1, schedule.Config{})
	var ids []string
	for i := range 5 {
		ids = append(ids, fmt.Sprint("h", i))
		b.enqueueEndpoint(t, ids[i], "flaky")
	}

	// The health record and the pause live in different slots, written
	// one after the other: wait for both.
	require.Eventually(t, func() bool {
		h, err := b.store.EndpointHealth(ctx, "flaky")
		if err != nil || h.DisabledAt == nil {
			return false
		}
		paused, err := b.store.Paused(ctx)
		_, ok := paused[store.PauseKey(store.PauseDisabled, "flaky")]
		return err == nil && ok
	}, 10*time.Second, 5*time.Millisecond, "the endpoint was never disabled")
	b.requireParked(t, ids...)
	before := len(rcv.requests())
	for _, id := range ids {
		rec, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, notify.StateScheduled, rec.State, "a notification burnt out while its endpoint was failing")
		require.Less(t, rec.Attempts, 40)
	}

	up.Store(true)
	resumed, err := b.store.EnableEndpoint(ctx, "flaky")
	require.NoError(t, err)
	require.Equal(t, len(ids), resumed)
	for _, id := range ids {
		b.waitState(t, id, notify.StateSucceeded)
	}
	require.Len(t, rcv.requests(), before+len(ids), "attempts were made while disabled")
	h, err := b.store.EndpointHealth(ctx, "flaky")
	require.NoError(t, err)
	require.Nil(t, h.DisabledAt)
	require.Nil(t, h.FailingSince)
}

// TestDisabledStopsAtOnce: the dispatcher whose failure disables an
// endpoint makes no attempt to it after that, where it went on for up to
// its next read of what is paused (store.PausedViewAge), burning the
// attempts of everything due meanwhile. With one worker, the next attempt
// comes after the failure that disabled the endpoint is recorded.
func TestDisabledStopsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rcv, _ := b.flakyEndpoint(t, 100*time.Millisecond)
	b.startLimited(t, 1, schedule.Config{Concurrency: 1})
	var ids []string
	for i := range 5 {
		ids = append(ids, fmt.Sprint("o", i))
		b.enqueueEndpoint(t, ids[i], "flaky")
	}
	var disabledAt time.Time
	require.Eventually(t, func() bool {
		h, err := b.store.EndpointHealth(ctx, "flaky")
		if err != nil || h.DisabledAt == nil {
			return false
		}
		disabledAt = *h.DisabledAt
		return true
	}, 10*time.Second, time.Millisecond, "the endpoint was never disabled")
	b.requireParked(t, ids...)
	time.Sleep(2 * store.PausedViewAge)
	// The record keeps whole milliseconds.
	cutoff := disabledAt.Add(time.Millisecond)
	var late []time.Time
	for _, r := range rcv.requests() {
		if r.at.After(cutoff) {
			late = append(late, r.at)
		}
	}
	require.Empty(t, late, "attempts made after the endpoint was disabled at %s", disabledAt.Format(time.StampMicro))
}

// TestStreakEndsWithoutDisableAfter: an endpoint that failed while it had a
// disable_after, then lost it in the policies file and recovered, shows no
// failing streak: turned on again, disable_after counts from its next
// failure, not from before it recovered.
func TestStreakEndsWithoutDisableAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rcv, up := newFlakyReceiver(t)
	set, err := policy.NewSet(map[string]policy.Policy{"fast": {Backoff: ms(0, 10, 10, 10, 10, 10, 10, 10, 10, 10)}}, nil)
	require.NoError(t, err)
	b.policies = set
	var files atomic.Pointer[map[string]endpoint.Endpoint]
	setFiles := func(disableAfter time.Duration) {
		files.Store(&map[string]endpoint.Endpoint{"m": {URL: rcv.URL, DisableAfter: notify.Duration(disableAfter)}})
	}
	setFiles(time.Hour)
	b.startWithEndpoints(t, 1, schedule.Config{}, func() map[string]endpoint.Endpoint { return *files.Load() })
	failingSince := func() *time.Time {
		h, err := b.store.EndpointHealth(ctx, "m")
		require.NoError(t, err)
		return h.FailingSince
	}

	b.enqueueEndpoint(t, "failed", "m")
	require.Eventually(t, func() bool { return failingSince() != nil }, 10*time.Second, 5*time.Millisecond, "no streak recorded")

	setFiles(0)
	up.Store(true)
	b.enqueueEndpoint(t, "recovered", "m")
	b.waitState(t, "recovered", notify.StateSucceeded)
	require.Eventually(t, func() bool { return failingSince() == nil }, 10*time.Second, 5*time.Millisecond,
		"the streak outlived a success without disable_after")
}

// newFlakyReceiver returns a receiver answering 503 until up is set, then
// 200.
func newFlakyReceiver(t *testing.T) (rcv *receiver, up *atomic.Bool) {
	t.Helper()
	up = new(atomic.Bool)
	rcv = newReceiver(t, func(_ int, w http.ResponseWriter) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	return rcv, up
}
