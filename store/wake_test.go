package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/store"
)

// TestSubscription: a subscriber hears the cancel of a reservation before
// Heard says it has heard everything published until store.HeardWithin
// ago, which is what lets a dispatcher start a notification that waited
// for a worker. Once its connection is lost, Heard is false for the
// connection it had, whose messages meanwhile were lost, and true again
// for the next one.
func TestSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	b := setup(t, store.Config{Client: srv.Client(t)})
	var mu sync.Mutex
	cancels := map[string]string{}
	subCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	sub := b.store.Subscribe(subCtx, func(id, receipt string) {
		mu.Lock()
		defer mu.Unlock()
		cancels[id] = receipt
	})
	<-sub.Ready
	mark := sub.Mark()
	require.NotZero(t, mark)

	b.enqueue(t, b.newNotification(t, "a", 0, 0))
	n := b.reserveAll(t)[0]
	_, err := b.store.Cancel(ctx, "a")
	require.NoError(t, err)
	time.Sleep(store.HeardWithin)
	require.True(t, sub.Heard(ctx, mark, 5*time.Second), "nothing heard")
	mu.Lock()
	require.Equal(t, map[string]string{"a": n.Receipt}, cancels, "the cancel, heard before Heard said so")
	mu.Unlock()

	require.NoError(t, srv.Client(t).ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	require.Eventually(t, func() bool { return !sub.Heard(ctx, mark, 0) }, 5*time.Second, time.Millisecond,
		"still heard on a connection that was lost")
	require.Eventually(t, func() bool {
		m := sub.Mark()
		return m != 0 && m != mark && sub.Heard(ctx, m, 0)
	}, 10*time.Second, 10*time.Millisecond, "nothing heard on the next connection")
	require.False(t, sub.Heard(ctx, mark, 0), "the lost connection stays lost")
}
