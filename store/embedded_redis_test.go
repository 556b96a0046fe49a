package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// embeddedRedis starts the in-process Redis herald serve and herald demo
// run on when redis.addrs is empty, and a client of it.
func embeddedRedis(t *testing.T, opt func(*redis.Options)) *redis.Client {
	t.Helper()
	mr, err := miniredis.Run()
	require.NoError(t, err)
	t.Cleanup(mr.Close)
	opts := &redis.Options{Addr: mr.Addr()}
	if opt != nil {
		opt(opts)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// TestDeadRetentionOnEmbeddedRedis: the sweep of dead notifications past
// DeadRetention, with its purge by topic and its stubs, runs on the
// embedded Redis as on a redis-server: the dead ones go with their
// records and counts, a younger one stays.
func TestDeadRetentionOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Client: embeddedRedis(t, nil), DeadRetention: time.Hour})
	b.enqueue(t, b.newNotification(t, "plain", 0, 0))
	for i := range 4 {
		b.enqueue(t, b.keyed(t, fmt.Sprint("keyed-", i), fmt.Sprint("k", i), 0))
	}
	require.Len(t, b.kill(t, "jobs"), 5)
	b.clock.Advance(time.Minute)
	b.enqueue(t, b.newNotification(t, "young", 0, 0))
	require.Equal(t, []string{"young"}, b.kill(t, "jobs"))

	b.clock.Advance(time.Hour - time.Minute)
	require.Equal(t, 5, b.sweepAll(t))
	for _, id := range []string{"plain", "keyed-0", "keyed-3"} {
		_, err := b.store.Get(ctx, id)
		require.ErrorIs(t, err, notify.ErrNotFound, id)
	}
	b.requireDeadListed(t, "", "young")
	stats, err := b.store.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, stats["jobs"].Dead)
}

// TestReservationArrivingAfterItsGiveBackOnEmbeddedRedis: on the embedded
// Redis too, a reservation whose request reaches it after its give-back
// reserves nothing, and the notification is handed out, unattempted, to
// the next caller.
func TestReservationArrivingAfterItsGiveBackOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	held := &heldWrite{}
	client := embeddedRedis(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.Dialer = held.dial
	})
	b := setup(t, store.Config{Client: client})
	b.enqueue(t, b.newNotification(t, "a", 0, 0))
	b.clock.Advance(time.Millisecond)
	// The script is loaded first, so that the call held is the one that
	// reserves, not one Redis answers NOSCRIPT.
	loaded, _, err := b.store.Reserve(ctx, store.PullQueue("other"), heraldtest.AllShards(t, b.store), 1)
	require.NoError(t, err)
	require.Empty(t, loaded)

	held.armed.Store(true)
	items, _, err := b.store.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), 10)
	require.Error(t, err, "no answer within the read timeout (%d items)", len(items))
	var lost *store.ReserveError
	require.False(t, errors.As(err, &lost), "the embedded Redis answered the give-back: %v", err)
	releaseLate(t, held)

	n, err := b.store.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, n.State, "not reserved for no one")
	got := b.reserveAll(t)
	require.Len(t, got, 1)
	require.Zero(t, got[0].Attempts)
}

// releaseLate is heldWrite.release on a connection whose deadlines the
// client set long ago: they are cleared first.
func releaseLate(t *testing.T, h *heldWrite) {
	t.Helper()
	h.mu.Lock()
	conn := h.conn
	h.mu.Unlock()
	require.NotNil(t, conn, "a script call was held")
	require.NoError(t, conn.SetDeadline(time.Time{}))
	h.release(t)
}
