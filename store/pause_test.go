package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// park reserves the due notifications of topic jobs and gives them back
// parked under the topic's pause, as a dispatcher does.
func (b *testBundle) park(t *testing.T, want int) {
	t.Helper()
	items := b.reserveAll(t)
	require.Len(t, items, want)
	finishes := make([]store.Finish, len(items))
	for i, n := range items {
		finishes[i] = store.Finish{Notification: n, Action: notify.ActionRelease, NextAt: store.ParkAt(store.PauseTopic, "jobs")}
	}
	errs, err := b.store.Finish(context.Background(), finishes)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
}

func TestPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ParkedUntilResumed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		for _, id := range []string{"a", "b", "c"} {
			b.enqueue(t, b.newNotification(t, id, 0, 0, time.Minute))
		}
		require.NoError(t, b.store.Pause(ctx, store.PauseTopic, "jobs"))
		paused, err := b.store.Paused(ctx)
		require.NoError(t, err)
		require.Contains(t, paused, store.PauseKey(store.PauseTopic, "jobs"))
		b.park(t, 3)

		rec, err := b.store.Get(ctx, "a")
		require.NoError(t, err)
		require.True(t, store.Parked(rec))
		require.Equal(t, 0, rec.Attempts, "parking burnt an attempt")
		require.Empty(t, rec.History)
		b.clock.Advance(24 * time.Hour)
		require.Empty(t, b.reserveAll(t), "a parked notification came due")

		moved, err := b.store.Resume(ctx, store.PauseTopic, "jobs")
		require.NoError(t, err)
		require.Equal(t, 3, moved)
		items := b.reserveAll(t)
		require.Len(t, items, 3, "resumed notifications are not due at once")
		for _, n := range items {
			require.Equal(t, 0, n.Attempts)
			require.Equal(t, b.clock.Now(), *n.NextAttemptAt)
		}
		paused, err = b.store.Paused(ctx)
		require.NoError(t, err)
		require.Empty(t, paused)
	})

	t.Run("StrayParkedOnesAreFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "late", 0, 0))
		require.NoError(t, b.store.Pause(ctx, store.PauseTopic, "jobs"))
		paused, err := b.store.Paused(ctx)
		require.NoError(t, err)
		// A resume that ran while a dispatcher, still seeing the pause,
		// reserved the notification: it is parked after the resume.
		_, err = b.store.Resume(ctx, store.PauseTopic, "jobs")
		require.NoError(t, err)
		b.park(t, 1)

		queues := []string{store.QueuePush, store.PullQueue("jobs")}
		moved, err := b.store.UnparkStray(ctx, queues, paused)
		require.NoError(t, err)
		require.Zero(t, moved, "a notification still paused was unparked")
		moved, err = b.store.UnparkStray(ctx, queues, nil)
		require.NoError(t, err)
		require.Equal(t, 1, moved)
		require.Len(t, b.reserveAll(t), 1)
	})

	t.Run("BadNames", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		var fe *notify.FieldError
		require.ErrorAs(t, b.store.Pause(ctx, store.PauseTopic, "Not A Topic"), &fe)
		require.Equal(t, "topic", fe.Field)
		require.ErrorAs(t, b.store.Pause(ctx, store.PauseEndpoint, "a|b"), &fe)
	})
}

// TestEnableWhileDisabling: an endpoint is disabled in two steps, its
// health and then its pause, which live in different slots. Enabled in
// between, it must end enabled: not paused with nothing saying it was
// disabled, its notifications parked until someone enables it again.
func TestEnableWhileDisabling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, between := setupHooked(t, store.Config{})
	disabled, err := b.store.EndpointFailed(ctx, "m", time.Second) // failing since now
	require.NoError(t, err)
	require.False(t, disabled)
	b.clock.Advance(time.Second)

	between.arm(func() {
		_, err := b.store.EnableEndpoint(ctx, "m")
		require.NoError(t, err)
	})
	_, err = b.store.EndpointFailed(ctx, "m", time.Second)
	require.NoError(t, err)
	paused, err := b.store.IsPaused(ctx, store.PauseDisabled, "m")
	require.NoError(t, err)
	require.False(t, paused, "enabled")
	h, err := b.store.EndpointHealth(ctx, "m")
	require.NoError(t, err)
	require.Nil(t, h.DisabledAt)
}
