package store_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestStartsOfARestartedStore: a process restarts, and its new Store
// reserves ahead on the same namespace, numbering its own from one again.
// The reaper judges each reservation by the starts of the Store that made
// it: the old Store's started attempts count, and those it never started
// go back uncounted, however far the new Store's starts went; the new
// Store's started attempts count too. What went back is reserved again
// and counted by its new start.
func TestStartsOfARestartedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Shards: 1})
	for i := range 3 {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("old", i), 0))
	}
	old := b.reserveAhead(t, 3)
	b.store.Start(old[0])
	require.NoError(t, b.store.Started(ctx))

	// The process dies; the next one opens the namespace.
	next, err := store.New(&store.Config{Client: server.Client(t), Namespace: b.store.Namespace(), Shards: 1, TimeNowFunc: b.clock.Now})
	require.NoError(t, err)
	for i := range 5 {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("new", i), 0))
	}
	mine, _, err := next.ReserveAhead(ctx, store.PullQueue("jobs"), []int{0}, store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, mine, 5, "only the new ones are due")
	for _, n := range mine {
		require.True(t, store.Ahead(n), n.ID)
		next.Start(n)
	}
	require.NoError(t, next.Started(ctx))

	counted := b.reap(t)
	want := map[string]bool{old[0].ID: true}
	for _, n := range mine {
		want[n.ID] = true
	}
	require.Equal(t, want, counted)
	for _, n := range old[1:] {
		b.requireGivenBack(t, n.ID)
	}

	// Given back, the old Store's unstarted ones are the new Store's now:
	// numbered after its last, and counted once it starts them.
	again, _, err := next.ReserveAhead(ctx, store.PullQueue("jobs"), []int{0}, store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, again, 2)
	next.Start(again[0])
	require.NoError(t, next.Started(ctx))
	require.Equal(t, map[string]bool{again[0].ID: true}, b.reap(t))
	b.requireGivenBack(t, again[1].ID)
}

// reap runs the reaper once every reservation ran out, records a retry a
// day later for each attempt it counts, as its caller does, and returns
// the ids of those.
func (b *testBundle) reap(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	var items []store.Finish
	for _, n := range b.expired(t) {
		out[n.ID] = true
		items = append(items, b.finish(notify.ActionRetry, n, b.clock.Now().Add(24*time.Hour)))
	}
	if len(items) > 0 {
		errs, err := b.store.Finish(context.Background(), items)
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
	}
	return out
}

// TestStartsOfOneQueueCountNoneOfAnother: a dispatcher reserves ahead in
// the push queue and in a pull topic's queue, which number theirs apart,
// and starts only pull ones. The reaper counts the pull ones up to the
// last started, and gives back uncounted every push one, whatever its
// number; those a pull consumer reserved (Reserve) count as ever, though
// their Store recorded no start.
func TestStartsOfOneQueueCountNoneOfAnother(t *testing.T) {
	t.Parallel()
	onEachDeployment(t, func(t *testing.T, client redis.UniversalClient, shards int) {
		ctx := context.Background()
		b := setup(t, store.Config{Client: client, Shards: shards})
		all := heraldtest.AllShards(t, b.store)
		for i := range 4 {
			b.enqueue(t, heraldtest.Notification(t, fmt.Sprint("hook", i), b.clock.Now(),
				heraldtest.Channel(notify.ChannelWebhook, "https://merchant.test/notify")))
			b.enqueue(t, b.newNotification(t, fmt.Sprint("job", i), 0))
			b.enqueue(t, heraldtest.Notification(t, fmt.Sprint("pulled", i), b.clock.Now(), heraldtest.Topic("pulled")))
		}
		hooks, _, err := b.store.ReserveAhead(ctx, store.QueuePush, all, store.MaxReserve)
		require.NoError(t, err)
		require.Len(t, hooks, 4)
		jobs, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), all, store.MaxReserve)
		require.NoError(t, err)
		require.Len(t, jobs, 4)
		pulled := b.store
		if shards > 1 {
			// A consumer of the API, through a Store of its own.
			pulled, err = store.New(&store.Config{Client: client, Namespace: b.store.Namespace(), Shards: shards, TimeNowFunc: b.clock.Now})
			require.NoError(t, err)
		}
		consumed, _, err := pulled.Reserve(ctx, store.PullQueue("pulled"), all, store.MaxReserve)
		require.NoError(t, err)
		require.Len(t, consumed, 4)
		for _, n := range append(hooks, jobs...) {
			require.True(t, store.Ahead(n), n.ID)
		}
		for _, n := range consumed {
			require.False(t, store.Ahead(n), n.ID)
			pulled.Start(n) // needs none
		}
		// The worker took all the pull ones and started the third.
		b.store.Start(jobs[2])
		require.NoError(t, b.store.Started(ctx))

		counted := b.reap(t)
		want := map[string]bool{jobs[0].ID: true, jobs[1].ID: true, jobs[2].ID: true}
		for _, n := range consumed {
			want[n.ID] = true
		}
		require.Equal(t, want, counted)
		for _, n := range hooks {
			b.requireGivenBack(t, n.ID)
		}
		b.requireGivenBack(t, jobs[3].ID)
	})
}

// TestStartsOutliveAFailover: on a Redis Cluster with a replica behind
// each master and WaitReplicas, the master holding a Store's record of
// starts dies once the record was written, and its replica takes over.
// The reaper still counts the attempts started, and gives back uncounted
// only those never started.
func TestStartsOutliveAFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := redistest.StartClusterReplicas(t, 3, 1)
	b := setup(t, store.Config{Client: cluster.Client(t), Shards: 8, WaitReplicas: 1})
	const count = 12
	for i := range count {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0))
	}
	items, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, items, count)
	const started = count / 2
	b.store.Start(items[started-1])
	require.NoError(t, b.store.Started(ctx))

	// The master holding the record dies.
	var victim *redistest.Server
	for _, node := range cluster.Nodes {
		keys, err := node.Client(t).Keys(ctx, b.store.Namespace()+":started:*").Result()
		require.NoError(t, err)
		if len(keys) > 0 {
			victim = node
		}
	}
	require.NotNil(t, victim, "no master holds the record")
	promoted := cluster.ReplicaOf(victim).Client(t)
	victim.Kill()
	require.Eventually(t, func() bool {
		role, err := promoted.Do(ctx, "role").Slice()
		return err == nil && role[0] == "master"
	}, 20*time.Second, 20*time.Millisecond, "no replica was promoted")
	// Every node that lives knows: a client then finds the new master.
	var living []*redis.Client
	for _, node := range append(slices.Clone(cluster.Nodes), cluster.Replicas...) {
		if node != victim {
			living = append(living, node.Client(t))
		}
	}
	require.Eventually(t, func() bool {
		for _, c := range living {
			shards, err := c.ClusterShards(ctx).Result()
			if err != nil {
				return false
			}
			for _, sh := range shards {
				for _, n := range sh.Nodes {
					if len(sh.Slots) > 0 && n.Role == "master" && net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)) == victim.Addr {
						return false
					}
				}
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "the cluster still names the dead master")

	// The dead Store's reservations are reaped by another process.
	reaper, err := store.New(&store.Config{Client: cluster.Client(t), Namespace: b.store.Namespace(), Shards: 8, TimeNowFunc: b.clock.Now})
	require.NoError(t, err)
	b.clock.Advance(time.Hour)
	counted := map[string]bool{}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		expired, err := reaper.Expired(ctx, 0, 100)
		for _, n := range expired {
			counted[n.ID] = true
		}
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the reaper never read the cluster after the failover: %v", err)
	}
	want := map[string]bool{}
	for _, n := range items[:started] {
		want[n.ID] = true
	}
	require.Equal(t, want, counted)
	for _, n := range items[started:] {
		got, err := reaper.Get(ctx, n.ID)
		require.NoError(t, err)
		require.Equal(t, notify.StateScheduled, got.State, n.ID)
		require.Zero(t, got.Attempts, n.ID)
	}
	// The dead Store's client learns of the promotion too, for the checks
	// at the test's end.
	require.Eventually(t, func() bool {
		_, err := b.store.Stats(ctx)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
}

// TestStartNotedWhileRedisWasAwayCountsAtTheNextReap: an attempt reserved
// ahead starts while Redis restarts, and runs on after Redis is back, until
// its reservation runs out. The reaper of its own dispatcher counts it, as
// one that ran out, rather than give it back uncounted to be made again:
// the start its Store could not write then is written before the reap
// reads.
func TestStartNotedWhileRedisWasAwayCountsAtTheNextReap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	b := setup(t, store.Config{Client: srv.Client(t), Shards: 1})
	for i := range 2 {
		b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0))
	}
	items := b.reserveAhead(t, 2)

	srv.Stop()
	b.store.Start(items[0]) // the worker takes the first, and makes its attempt
	require.Error(t, b.store.Started(ctx), "Redis is away")
	require.NoError(t, srv.Restart())
	// The attempt runs on with Redis back, and other work goes on: the
	// store answers.
	require.Eventually(t, func() bool {
		_, err := b.store.Get(ctx, items[1].ID)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)

	counted := b.expire(t)
	require.Equal(t, map[string]bool{items[0].ID: true}, counted, "the attempt started while Redis was away counts")
	b.requireGivenBack(t, items[1].ID)
}

// TestStartsOfManyQueuesAreRecordedSoon: a dispatcher serving many queues
// (a worker with a handler for each of many topics) starts an attempt in
// each at once, and dies 100ms later, ten times the 10ms within which a
// start may go unrecorded: every attempt counts, none is given back
// uncounted to be made again.
func TestStartsOfManyQueuesAreRecordedSoon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Shards: 1})
	const queues = 20
	var items []*notify.Notification
	for i := range queues {
		topic := fmt.Sprint("jobs", i)
		b.enqueue(t, heraldtest.Notification(t, "n-"+topic, b.clock.Now(), heraldtest.Topic(topic)))
		got, _, err := b.store.ReserveAhead(ctx, store.PullQueue(topic), []int{0}, 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.True(t, store.Ahead(got[0]))
		items = append(items, got[0])
	}
	for _, n := range items {
		b.store.Start(n)
	}
	time.Sleep(100 * time.Millisecond)

	// The dispatcher dies now: what its store writes later never comes.
	counted := b.expire(t)
	var uncounted []string
	for _, n := range items {
		if !counted[n.ID] {
			uncounted = append(uncounted, n.ID)
		}
	}
	require.Empty(t, uncounted, "attempts started 100ms before the reaper looked, given back uncounted")
	require.NoError(t, b.store.Started(ctx))
}
