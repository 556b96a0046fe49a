package schedule_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
)

// TestDispatchWhenRedisIsFull runs a dispatcher on a Redis at maxmemory
// (noeviction): what was stored before is delivered on schedule, each
// attempt recorded once, retries included, none early, none twice at
// once; the dispatcher logs no warning, as nothing it does fails; an
// enqueue is refused with notify.ErrOutOfMemory; once the limit is lifted,
// what is enqueued then is delivered too.
func TestDispatchWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.Start(t, redistest.Options{}).Client(t)
	b := setupOn(t, client, redistest.Namespace(t))
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("n%d", i)
		ids = append(ids, id)
		b.enqueue(t, id, ms(0, 20), time.Duration(i%3)*100*time.Millisecond)
	}
	// Full: maxmemory below what Redis holds, as when writes have filled
	// it (store's TestEnqueueWhenRedisIsFull fills one to the limit).
	require.NoError(t, client.ConfigSet(ctx, "maxmemory", "1").Err())

	// Every third fails once and is retried.
	rec := newRecorder(func(_ context.Context, n *notify.Notification) error {
		if n.Attempts == 0 && strings.HasSuffix(n.ID, "0") {
			return errUnavailable
		}
		return nil
	})
	var logs heraldtest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Logger: logger})

	_, _, err := b.store.Enqueue(ctx, heraldtest.Notification(t, "refused", time.Now()), false)
	require.ErrorIs(t, err, notify.ErrOutOfMemory)
	for _, id := range ids {
		got := b.waitState(t, id, notify.StateSucceeded)
		requireOnSchedule(t, got)
		require.Len(t, got.History, rec.attempts(id), "%s: every attempt made is recorded, once", id)
	}
	require.Zero(t, rec.overlaps)
	require.Empty(t, logs.String())

	require.NoError(t, client.ConfigSet(ctx, "maxmemory", "0").Err())
	b.enqueue(t, "after", ms(0), 0)
	b.waitState(t, "after", notify.StateSucceeded)
	require.Equal(t, 1, rec.attempts("after"))
}
