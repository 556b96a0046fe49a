package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

func TestEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	e := &endpoint.Endpoint{URL: "https://m.example", Signing: endpoint.SigningHMAC, MaxInFlight: 4, Rate: 2.5,
		DisableAfter: notify.Duration(time.Hour), Secrets: []endpoint.Secret{{Value: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw4mH1ZwYAXcs=", ExpiresAt: &expires}}}

	created, err := b.store.PutEndpoint(ctx, "m", e)
	require.NoError(t, err)
	require.True(t, created)
	created, err = b.store.PutEndpoint(ctx, "m", e)
	require.NoError(t, err)
	require.False(t, created, "a replace reported a new name")

	got, err := b.store.Endpoint(ctx, "m")
	require.NoError(t, err)
	require.Equal(t, e.URL, got.URL)
	require.Equal(t, e.Rate, got.Rate)
	require.Equal(t, e.DisableAfter, got.DisableAfter)
	require.True(t, expires.Equal(*got.Secrets[0].ExpiresAt))
	require.Equal(t, e.Secrets[0].Value, got.Secrets[0].Value)

	all, err := b.store.Endpoints(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)

	require.NoError(t, b.store.DeleteEndpoint(ctx, "m"))
	require.ErrorIs(t, b.store.DeleteEndpoint(ctx, "m"), endpoint.ErrNotFound)
	_, err = b.store.Endpoint(ctx, "m")
	require.ErrorIs(t, err, endpoint.ErrNotFound)
}

// TestDeletedEndpointForgetsItsFailures: an endpoint deleted while its
// attempts were failing and registered again under its name starts with a
// clean record: its first failure does not disable it for the failures of
// the endpoint deleted long before.
func TestDeletedEndpointForgetsItsFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	e := &endpoint.Endpoint{URL: "https://m.example", DisableAfter: notify.Duration(time.Hour)}
	_, err := b.store.PutEndpoint(ctx, "m", e)
	require.NoError(t, err)
	disabled, err := b.store.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	require.False(t, disabled)
	require.NoError(t, b.store.DeleteEndpoint(ctx, "m"))

	b.clock.Advance(30 * 24 * time.Hour)
	_, err = b.store.PutEndpoint(ctx, "m", e)
	require.NoError(t, err)
	h, err := b.store.EndpointHealth(ctx, "m")
	require.NoError(t, err)
	require.Nil(t, h.FailingSince, "a new endpoint has failed nothing yet")
	disabled, err = b.store.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	require.False(t, disabled, "disabled by its first failure")
	paused, err := b.store.Paused(ctx)
	require.NoError(t, err)
	require.Empty(t, paused)
}

// TestDisableAfterUnderAMillisecond: a disable_after shorter than the
// millisecond the health record counts in is kept to, rounded up, rather
// than refused at every failure.
func TestDisableAfterUnderAMillisecond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	disabled, err := b.store.EndpointFailed(ctx, "m", 500*time.Microsecond)
	require.NoError(t, err)
	require.False(t, disabled)
	b.clock.Advance(time.Millisecond)
	disabled, err = b.store.EndpointFailed(ctx, "m", 500*time.Microsecond)
	require.NoError(t, err)
	require.True(t, disabled, "failing for longer than its disable_after")
	_, err = b.store.EnableEndpoint(ctx, "m")
	require.NoError(t, err)
}

// TestEnableAnEnabledEndpoint: enabling an endpoint that is not disabled
// changes nothing: its failing streak goes on, and it is disabled once that
// has lasted its disable_after, not a whole disable_after after the enable.
func TestEnableAnEnabledEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	since := b.clock.Now()
	_, err := b.store.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	b.clock.Advance(59 * time.Minute)
	resumed, err := b.store.EnableEndpoint(ctx, "m")
	require.NoError(t, err)
	require.Zero(t, resumed)
	h, err := b.store.EndpointHealth(ctx, "m")
	require.NoError(t, err)
	require.NotNil(t, h.FailingSince, "the enable ended its failing streak")
	require.Equal(t, since, *h.FailingSince)
	b.clock.Advance(time.Minute)
	disabled, err := b.store.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	require.True(t, disabled, "failing for its disable_after")
	_, err = b.store.EnableEndpoint(ctx, "m")
	require.NoError(t, err)
	h, err = b.store.EndpointHealth(ctx, "m")
	require.NoError(t, err)
	require.Equal(t, store.Health{}, h, "enabled afresh")
}

// TestNewEndpointStartsWithNoStreak: an endpoint registered under the name
// of one deleted while failing starts with no failing streak, whatever
// failed at the deletion: its first failure does not disable it for the
// failures of the endpoint deleted long before. The streak lives in
// another slot than the endpoint, so a delete cannot end both at once.
func TestNewEndpointStartsWithNoStreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := &endpoint.Endpoint{URL: "https://m.example", DisableAfter: notify.Duration(time.Hour)}
	for _, tc := range []struct {
		name string
		// deleteFunc deletes m, which has been failing for a while.
		deleteFunc func(t *testing.T, b *testBundle, hook *failCommand)
	}{
		{name: "DeleteLeftTheStreak", deleteFunc: func(t *testing.T, b *testBundle, hook *failCommand) {
			hook.arm("hdel", b.store.Namespace()+":{ep:m}:health")
			if err := b.store.DeleteEndpoint(ctx, "m"); err != nil {
				require.NoError(t, b.store.DeleteEndpoint(ctx, "m"), "the retry of a failed delete")
			}
		}},
		{name: "FailedAfterTheDelete", deleteFunc: func(t *testing.T, b *testBundle, _ *failCommand) {
			require.NoError(t, b.store.DeleteEndpoint(ctx, "m"))
			// A dispatcher still holding the endpoint in its cache.
			_, err := b.store.EndpointFailed(ctx, "m", time.Hour)
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hook := &failCommand{}
			client := server.Client(t)
			client.AddHook(hook)
			b := setup(t, store.Config{Client: client})
			_, err := b.store.PutEndpoint(ctx, "m", e)
			require.NoError(t, err)
			_, err = b.store.EndpointFailed(ctx, "m", time.Hour)
			require.NoError(t, err)
			b.clock.Advance(10 * time.Minute)
			tc.deleteFunc(t, b, hook)

			b.clock.Advance(30 * 24 * time.Hour)
			created, err := b.store.PutEndpoint(ctx, "m", e)
			require.NoError(t, err)
			require.True(t, created)
			h, err := b.store.EndpointHealth(ctx, "m")
			require.NoError(t, err)
			require.Nil(t, h.FailingSince, "a new endpoint has failed nothing yet")
			disabled, err := b.store.EndpointFailed(ctx, "m", time.Hour)
			require.NoError(t, err)
			require.False(t, disabled, "disabled by its first failure")
		})
	}
}

// TestDisableAfterTurnedOffEndsTheStreak: the attempts to an endpoint
// without a disable_after are not recorded (the dispatcher keeps health
// only for endpoints with one), so turning it off ends the failing streak:
// an endpoint that recovered meanwhile is not disabled by its first failure
// once disable_after is back, for a streak that began days before. A
// replace that keeps a disable_after keeps the streak.
func TestDisableAfterTurnedOffEndsTheStreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	put := func(url string, disableAfter time.Duration) {
		t.Helper()
		_, err := b.store.PutEndpoint(ctx, "m", &endpoint.Endpoint{URL: url, DisableAfter: notify.Duration(disableAfter)})
		require.NoError(t, err)
	}
	failingSince := func() *time.Time {
		t.Helper()
		h, err := b.store.EndpointHealth(ctx, "m")
		require.NoError(t, err)
		return h.FailingSince
	}
	put("https://m.example", time.Hour)
	since := b.clock.Now()
	_, err := b.store.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	b.clock.Advance(10 * time.Minute)
	put("https://m2.example", time.Hour)
	require.Equal(t, &since, failingSince(), "a replace ended the streak")

	put("https://m2.example", 0)
	require.Nil(t, failingSince(), "a streak kept without a disable_after")
	b.clock.Advance(3 * 24 * time.Hour) // succeeding, unrecorded
	put("https://m2.example", time.Hour)
	disabled, err := b.store.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	require.False(t, disabled, "disabled by its first failure")
	now := b.clock.Now()
	require.Equal(t, &now, failingSince())
}

// failCommand is a go-redis hook that fails, once and without sending it,
// the next command of a name on a key.
type failCommand struct {
	// next is the command's name and key, nil when disarmed.
	next atomic.Pointer[[2]string]
}

// arm makes h fail the next command name on key.
func (h *failCommand) arm(name, key string) { h.next.Store(&[2]string{name, key}) }

func (h *failCommand) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if want := h.next.Load(); want != nil && cmd.Name() == want[0] && len(cmd.Args()) > 1 && cmd.Args()[1] == want[1] &&
			h.next.CompareAndSwap(want, nil) {
			cmd.SetErr(errors.New("failed on purpose"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *failCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestEndpointStreakWrittenByHand: a failing streak whose start is not a
// number (set by hand with redis-cli) starts anew at the next failure,
// rather than failing every failure's record, which would never disable
// the endpoint.
func TestEndpointStreakWrittenByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := server.Client(t)
	b := setup(t, store.Config{Client: c})
	health := b.store.Namespace() + ":{ep:m}:health"
	require.NoError(t, c.HSet(ctx, health, "failing_since", "yesterday").Err())

	disabled, err := b.store.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	require.False(t, disabled)
	h, err := b.store.EndpointHealth(ctx, "m")
	require.NoError(t, err)
	require.NotNil(t, h.FailingSince)
	require.True(t, b.clock.Now().Equal(*h.FailingSince), "streak from %v", *h.FailingSince)

	b.clock.Advance(time.Hour)
	disabled, err = b.store.EndpointFailed(ctx, "m", time.Hour)
	require.NoError(t, err)
	require.True(t, disabled, "failing for its disable_after from the new start")
}
