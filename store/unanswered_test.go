package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// givingBack gives back through a store and records which lost
// reservations it was asked to give back, by queue.
type givingBack struct {
	st *store.Store

	mu     sync.Mutex // guards queues
	queues []string
}

func (g *givingBack) GiveBack(ctx context.Context, l store.LostReservation) (int, error) {
	g.mu.Lock()
	g.queues = append(g.queues, l.Queue)
	g.mu.Unlock()
	return g.st.GiveBack(ctx, l)
}

// TestUnansweredGivesBackOnceRedisAnswers: a reservation whose answer is
// lost in an outage that goes on, so that Reserve cannot give it back, is
// kept and given back, unattempted, by the first GiveBack that Redis
// answers; one that Redis does not answer keeps it.
func TestUnansweredGivesBackOnceRedisAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lose := &heraldtest.LoseReservation{ThenDown: true}
	rc := server.Client(t)
	rc.AddHook(lose)
	b := setup(t, store.Config{Client: rc})
	b.enqueue(t, b.newNotification(t, "n0", 0, 0, 0))
	var u store.Unanswered
	require.False(t, u.Keep(errors.New("no reservation in it")))

	lose.Armed.Store(true)
	_, _, err := b.store.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), 10)
	require.True(t, u.Keep(err), "%v", err)
	given, err := u.GiveBack(ctx, b.store)
	require.Error(t, err, "Redis is still down")
	require.Nil(t, given)

	lose.Down.Store(false)
	given, err = u.GiveBack(ctx, b.store)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.PullQueue("jobs"): 1}, given)
	given, err = u.GiveBack(ctx, b.store)
	require.NoError(t, err)
	require.Nil(t, given, "given back once")

	again, _, err := b.store.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), 10)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Zero(t, again[0].Attempts)
}

// TestUnansweredKeepsUnstarted: reservations a caller received but could
// not give back (its give-back failed) are given back by GiveBack, each
// counting no attempt.
func TestUnansweredKeepsUnstarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	for i := range 6 {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0, 0, 0))
	}
	got, _, err := b.store.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), 10)
	require.NoError(t, err)
	require.Len(t, got, 6)
	var u store.Unanswered
	u.KeepUnstarted(got)
	given, err := u.GiveBack(ctx, b.store)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.PullQueue("jobs"): 6}, given)

	again, _, err := b.store.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), 10)
	require.NoError(t, err)
	require.Len(t, again, 6)
	for _, n := range again {
		require.Zero(t, n.Attempts, n.ID)
	}
}

// TestUnansweredIsBounded: in a long outage an Unanswered keeps the latest
// 64 lost reservations and drops the oldest, which have been reaped by
// then.
func TestUnansweredIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, store.Config{})
	var u store.Unanswered
	for i := range 70 {
		require.True(t, u.Keep(&store.ReserveError{Err: errors.New("lost"),
			Lost: store.LostReservation{Queue: fmt.Sprint("q", i), Shards: []int{0}, Receipt: fmt.Sprint("r", i, "."), At: time.Now()}}))
	}
	g := &givingBack{st: b.store}
	_, err := u.GiveBack(context.Background(), g)
	require.NoError(t, err)
	require.Len(t, g.queues, 64)
	require.Equal(t, "q6", g.queues[0], "the oldest were dropped")
	require.Equal(t, "q69", g.queues[63])
}

// TestUnansweredKeepsUnstartedOnEachDeployment: KeepUnstarted reads each
// reservation's call and shard from its receipt on one Redis and on a
// Cluster, with four times the deployment's shards (so that shard numbers
// run to two digits), for push and pull queues at once: GiveBack gives
// back every one it was handed, to its own queue.
func TestUnansweredKeepsUnstartedOnEachDeployment(t *testing.T) {
	t.Parallel()
	onEachDeployment(t, func(t *testing.T, client redis.UniversalClient, shards int) {
		ctx := context.Background()
		b := setup(t, store.Config{Client: client, Shards: 4 * shards})
		const each = 40
		for i := range each {
			b.enqueue(t, b.newNotification(t, fmt.Sprint("pull", i), 0, 0))
			b.enqueue(t, heraldtest.Notification(t, fmt.Sprint("push", i), b.clock.Now(),
				heraldtest.Channel(notify.ChannelWebhook, "https://merchant.example/notify")))
		}
		var got []*notify.Notification
		for _, q := range []string{store.PullQueue("jobs"), store.QueuePush} {
			items, _, err := b.store.Reserve(ctx, q, heraldtest.AllShards(t, b.store), store.MaxReserve)
			require.NoError(t, err)
			require.Len(t, items, each, q)
			got = append(got, items...)
		}
		var u store.Unanswered
		u.KeepUnstarted(got)
		given, err := u.GiveBack(ctx, b.store)
		require.NoError(t, err)
		require.Equal(t, map[string]int{store.PullQueue("jobs"): each, store.QueuePush: each}, given)
		for _, n := range got {
			rec, err := b.store.Get(ctx, n.ID)
			require.NoError(t, err)
			require.Equal(t, notify.StateScheduled, rec.State, n.ID)
			require.Zero(t, rec.Attempts, n.ID)
		}
	})
}
