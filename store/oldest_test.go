package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/store"
)

// TestOldestDue: the oldest notification due and not yet reserved, which
// an operator alerts on when nothing is delivering (every dispatcher or
// pull worker down), whatever the attempts' lateness last said: through
// the ready list and the due set, past entries gone stale, and not a
// notification reserved or due later.
func TestOldestDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One shard, so that a reservation of one takes the due set's first.
	b := setup(t, store.Config{Shards: 1})
	jobs := store.PullQueue("jobs")
	oldest := func() time.Time {
		t.Helper()
		got, err := b.store.OldestDue(ctx, []string{jobs, store.QueuePush})
		require.NoError(t, err)
		require.True(t, got[store.QueuePush].IsZero(), "nothing is due in the push queue")
		return got[jobs]
	}
	require.True(t, oldest().IsZero(), "an empty queue")

	start := b.clock.Now()
	b.enqueue(t, b.newNotification(t, "later", time.Hour))
	require.True(t, oldest().IsZero(), "due in an hour")

	b.enqueue(t, b.newNotification(t, "now", 0)) // listed as ready
	b.clock.Advance(90 * time.Second)
	require.Equal(t, start, oldest(), "due 90s ago")

	b.enqueue(t, b.newNotification(t, "soon", 30*time.Second)) // in the due set
	b.clock.Advance(time.Minute)
	require.Equal(t, start, oldest())

	_, err := b.store.Cancel(ctx, "now") // its ready entry is now stale
	require.NoError(t, err)
	require.Equal(t, start.Add(90*time.Second+30*time.Second), oldest(), "the one of the due set")

	b.enqueue(t, b.newNotification(t, "next", 0)) // behind the stale entry
	b.clock.Advance(time.Second)
	got, _, err := b.store.Reserve(ctx, jobs, heraldtest.AllShards(t, b.store), 1)
	require.NoError(t, err)
	require.Equal(t, "soon", got[0].ID, "the due set's first")
	require.Equal(t, start.Add(150*time.Second), oldest(), "the ready one past the stale entry")

	require.Equal(t, []string{"next"}, ids(b.reserveAll(t)))
	require.True(t, oldest().IsZero(), "what is reserved is taken")
}
