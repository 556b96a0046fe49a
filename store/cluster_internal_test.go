package store

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
)

// TestWaitReplicasFollowSlotMoves moves the slot of a shard to another
// master of a Cluster (a resharding) after the store has learnt where the
// slots are: with redis.wait_replicas an enqueue into that shard is stored
// on the slot's new master, as without, rather than failing with the old
// master's MOVED until the client happens to reload the slot map (every
// 60s, unless another call sees the move first).
func TestWaitReplicasFollowSlotMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, client, st := startWaitedCluster(t, time.Second)
	_, status, err := st.Enqueue(ctx, pullNotification("a"), false)
	require.NoError(t, err)
	require.Equal(t, Created, status)

	moveSlot(t, cluster, client, st.keys.job(st.keys.shardOf("b")))
	_, status, err = st.Enqueue(ctx, pullNotification("b"), false)
	require.NoError(t, err)
	require.Equal(t, Created, status)
}

// TestWaitReplicasThroughClusterFailover kills the master of a shard of a
// Cluster with a replica per master, under redis.wait_replicas 1: the
// replica takes over with the enqueue acknowledged before the kill, and
// once the old master is back as its replica, enqueues into the shard are
// acknowledged again within seconds, rather than failing on the old
// master's address until the client reloads the slot map a minute later.
func TestWaitReplicasThroughClusterFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, client, st := startWaitedCluster(t, 500*time.Millisecond)
	_, _, err := st.Enqueue(ctx, pullNotification("before"), false)
	require.NoError(t, err)

	key := st.keys.job(st.keys.shardOf("before"))
	node, err := client.MasterForKey(ctx, key)
	require.NoError(t, err)
	var master *redistest.Server
	for _, m := range cluster.Nodes {
		if m.Addr == node.Options().Addr {
			master = m
		}
	}
	replica := cluster.ReplicaOf(master)
	master.Kill()
	promoter := replica.Client(t)
	require.Eventually(t, func() bool {
		role, err := promoter.Do(ctx, "role").Slice()
		return err == nil && role[0] == "master"
	}, 15*time.Second, 20*time.Millisecond, "the replica was not promoted")
	require.NoError(t, master.Restart()) // it comes back as the new master's replica

	id := "after"
	for i := 0; st.keys.shardOf(id) != st.keys.shardOf("before"); i++ {
		id = "after-" + strconv.Itoa(i)
	}
	back := time.Now()
	for {
		_, _, err = st.Enqueue(ctx, pullNotification(id), false)
		if err == nil || time.Since(back) > 10*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "enqueues into the shard are acknowledged again")
	t.Logf("acknowledged %s after the old master was back", time.Since(back).Round(time.Millisecond))
	got, err := st.Get(ctx, "before")
	require.NoError(t, err, "acknowledged before the kill")
	require.Equal(t, notify.StateScheduled, got.State)
}

// TestWaitReplicasCoverStubs enqueues, on a Cluster under
// redis.wait_replicas 1, a notification with an order key whose id's shard,
// where its stub leads Get and Cancel to the key's shard, is on another
// master than the record, with that master's replica paused: the enqueue
// is not acknowledged, since a failover of that master would lose the stub
// and make Get and Cancel answer 404 for a notification still delivered.
func TestWaitReplicasCoverStubs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, client, st := startWaitedCluster(t, 200*time.Millisecond)
	master := func(shard int) string {
		node, err := client.MasterForKey(ctx, st.keys.job(shard))
		require.NoError(t, err)
		return node.Options().Addr
	}
	n := pullNotification("k")
	n.OrderKey = "trade"
	for i := 0; master(st.keys.shardOf(n.ID)) == master(st.keys.shardFor(n)); i++ {
		n.ID = "k" + strconv.Itoa(i)
	}
	for _, m := range cluster.Nodes {
		if m.Addr == master(st.keys.shardOf(n.ID)) {
			replica := cluster.ReplicaOf(m)
			replica.Pause()
			t.Cleanup(replica.Resume)
		}
	}
	_, status, err := st.Enqueue(ctx, n, false)
	require.ErrorIs(t, err, notify.ErrNotReplicated, "acknowledged (status %d) with its stub on the master alone", status)
}

// TestWaitReplicasCoverClusterReservations: on a Cluster under
// redis.wait_replicas 1 with one master's replica paused, a reservation
// hands out what the other masters' replicas confirmed, and gives back
// unstarted what that master alone holds, until its replica is back.
func TestWaitReplicasCoverClusterReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, client, st := startWaitedCluster(t, 200*time.Millisecond)
	masterOf := func(id string) string {
		node, err := client.MasterForKey(ctx, st.keys.job(st.keys.shardOf(id)))
		require.NoError(t, err)
		return node.Options().Addr
	}
	ids := map[string]bool{}
	for i := range 30 {
		n := pullNotification("n" + strconv.Itoa(i))
		n.SendAt = n.SendAt.Add(-time.Second)
		_, _, err := st.Enqueue(ctx, n, false)
		require.NoError(t, err)
		ids[n.ID] = true
	}
	behind := masterOf("n0")
	for _, m := range cluster.Nodes {
		if m.Addr == behind {
			replica := cluster.ReplicaOf(m)
			replica.Pause()
			t.Cleanup(replica.Resume)
		}
	}
	shards := make([]int, st.keys.shards)
	for i := range shards {
		shards[i] = i
	}
	got, _, err := st.Reserve(ctx, PullQueue("jobs"), shards, MaxReserve)
	require.NoError(t, err, "the other masters' reservations are confirmed")
	require.NotEmpty(t, got)
	for _, n := range got {
		require.NotEqual(t, behind, masterOf(n.ID), "%s handed out from the master whose replica is behind", n.ID)
		delete(ids, n.ID)
	}
	for id := range ids {
		require.Equal(t, behind, masterOf(id), "%s neither handed out nor on the master behind", id)
		n, err := st.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, notify.StateScheduled, n.State, "%s given back", id)
	}
}

// startWaitedCluster starts a Cluster of 3 masters with a replica each,
// and opens a store on it with redis.wait_replicas 1 and wait_timeout
// timeout.
func startWaitedCluster(t *testing.T, timeout time.Duration) (*redistest.Cluster, *redis.ClusterClient, *Store) {
	t.Helper()
	cluster := redistest.StartClusterReplicas(t, 3, 1)
	client := cluster.Client(t)
	st, err := New(&Config{Client: client, WaitReplicas: 1, WaitTimeout: timeout})
	require.NoError(t, err)
	_, err = st.Shards(context.Background())
	require.NoError(t, err)
	return cluster, client, st
}

// pullNotification is a notification of the pull topic jobs, due now.
func pullNotification(id string) *notify.Notification {
	return &notify.Notification{ID: id, Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{}`),
		Backoff: []notify.Duration{0}, TTR: notify.Duration(time.Minute), SendAt: time.Now().UTC(), Digest: id}
}

// moveSlot moves the slot of key to another master, as redis-cli
// --cluster reshard does.
func moveSlot(t *testing.T, cluster *redistest.Cluster, client *redis.ClusterClient, key string) {
	t.Helper()
	slot, err := client.ClusterKeySlot(context.Background(), key).Result()
	require.NoError(t, err)
	cluster.MoveSlot(t, int(slot), 100, 0)
}

// TestScriptsFollowSlotMoves: a slot moved (a resharding) to a master that
// lost its scripts, after the store learnt where the slots were: an
// enqueue into it is stored there, the scripts loaded where the call was
// redirected, though the client's slot map still names the old master.
func TestScriptsFollowSlotMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	st, err := New(&Config{Client: client})
	require.NoError(t, err)
	_, _, err = st.Enqueue(ctx, pullNotification("a"), false)
	require.NoError(t, err)

	moveSlot(t, cluster, client, st.keys.job(st.keys.shardOf("b")))
	for _, m := range cluster.Nodes {
		require.NoError(t, m.Client(t).ScriptFlush(ctx).Err())
	}
	_, status, err := st.Enqueue(ctx, pullNotification("b"), false)
	require.NoError(t, err)
	require.Equal(t, Created, status)
	got, err := st.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, got.State)
}

// TestScriptLoadIgnoresHungReplicas: on a Cluster whose replicas hang
// (their hosts stopped, not refusing), a script the masters lost (a
// restart, a failover) is loaded again on the master that asked for it, at
// once, rather than after a read of the slot map from a node picked at
// random, which waits out a hung one: here, half the picks.
func TestScriptLoadIgnoresHungReplicas(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartClusterReplicas(t, 3, 1)
	st, err := New(&Config{Client: cluster.Client(t)})
	require.NoError(t, err)
	_, _, err = st.Enqueue(context.Background(), pullNotification("warm"), false)
	require.NoError(t, err, "the client learns every node, replicas too")
	cluster.PauseReplicas(t)
	for i := range 8 {
		for _, m := range cluster.Nodes {
			require.NoError(t, m.Client(t).ScriptFlush(context.Background()).Err())
		}
		start := time.Now()
		_, _, err := st.Enqueue(context.Background(), pullNotification("n"+strconv.Itoa(i)), false)
		require.NoError(t, err, "enqueue %d, its scripts lost", i)
		// A hung node holds a call for the client's read timeout (2s).
		require.Less(t, time.Since(start), time.Second, "enqueue %d waited on a hung replica", i)
	}
}
