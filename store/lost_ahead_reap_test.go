package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/store"
)

// TestLostReservationAheadOfLaterStarts: a dispatcher's reservation ahead
// of its workers is lost (Redis ran it, its answer never came, and Redis
// was gone before the store could give it back); the dispatcher goes on,
// reserves more and starts one of those, and is killed before it could
// give back what the lost call reserved. No worker ever had those: the
// reaper gives them back uncounted, as it does what a killed dispatcher
// reserved ahead and never started, rather than count attempts never made.
func TestLostReservationAheadOfLaterStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lose := &heraldtest.LoseReservation{ThenDown: true}
	client := server.Client(t)
	client.AddHook(lose)
	b := setup(t, store.Config{Client: client, Shards: 1})
	for i := range 2 {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("lost", i), 0))
	}
	lose.Armed.Store(true)
	_, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), []int{0}, 2)
	var lost *store.ReserveError
	require.True(t, errors.As(err, &lost), "the answer was lost and could not be given back: %v", err)
	lose.Down.Store(false) // Redis answers again

	for i := range 2 {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("later", i), 0))
	}
	later := b.reserveAhead(t, 2)
	b.store.Start(later[0])
	require.NoError(t, b.store.Started(ctx))

	// The dispatcher is killed before it gives back lost.Lost.
	require.Equal(t, map[string]bool{later[0].ID: true}, b.expire(t), "only the attempt started counts")
	for i := range 2 {
		b.requireGivenBack(t, fmt.Sprint("lost", i))
	}
}

// TestClusterNodeLostReservationIsNotCountedByLaterStarts: on a Cluster, a
// dispatcher's reservation over two shards gets its answer from one node
// and loses the other's (the node went away mid-call, and was still away
// for the give-back, so that what it reserved waits out its ttr). The
// dispatcher goes on: it reserves again and starts attempts. No worker
// ever had what the lost call reserved: its own reaper, once the ttr has
// passed, gives those back uncounted rather than count attempts never
// made. No process died.
func TestClusterNodeLostReservationIsNotCountedByLaterStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cc := redistest.StartCluster(t, 3).Client(t)
	lose := &heraldtest.LoseReservation{Only: "{1}:", ThenDown: true}
	cc.AddHook(lose)
	b := setup(t, store.Config{Client: cc, Shards: 2})
	const count = 16 // n0..n15 fall in both shards
	for i := range count {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0))
	}
	lose.Armed.Store(true)
	first, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), []int{0, 1}, count)
	require.NoError(t, err, "what came back is returned")
	require.True(t, lose.Lost.Load(), "shard 1's answer was lost")
	require.NotEmpty(t, first)
	require.Less(t, len(first), count)
	lose.Down.Store(false) // the node is back

	handed := map[string]bool{}
	for _, n := range first {
		handed[n.ID] = true
	}
	for i := range 4 {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("later", i), 0))
	}
	later, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), []int{0, 1}, store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, later, 4, "only the later ones are due")
	for _, n := range append(first, later...) {
		b.store.Start(n) // the workers take all they were handed
		handed[n.ID] = true
	}
	require.NoError(t, b.store.Started(ctx))

	counted := b.expire(t)
	require.Equal(t, handed, counted, "only the attempts made count")
	for i := range count {
		if id := fmt.Sprint("n", i); !handed[id] {
			b.requireGivenBack(t, id)
		}
	}
}
