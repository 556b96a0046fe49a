package store_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// kill fails for good, at the store's now, every notification due in the
// pull queues of topics, and returns their ids.
func (b *testBundle) kill(t *testing.T, topics ...string) []string {
	t.Helper()
	ctx := context.Background()
	var fs []store.Finish
	var killed []string
	for _, topic := range topics {
		items, _, err := b.store.Reserve(ctx, store.PullQueue(topic), heraldtest.AllShards(t, b.store), store.MaxReserve)
		require.NoError(t, err)
		for _, n := range items {
			fs = append(fs, b.finish(notify.ActionDead, n, time.Time{}))
			killed = append(killed, n.ID)
		}
	}
	errs, err := b.store.Finish(ctx, fs)
	require.NoError(t, err)
	for _, err := range errs {
		require.NoError(t, err)
	}
	return killed
}

// sweepAll sweeps until the store says nothing more is due, and returns
// how many records it deleted.
func (b *testBundle) sweepAll(t *testing.T) int {
	t.Helper()
	total := 0
	for more, calls := true, 0; more; calls++ {
		require.Less(t, calls, 100, "the sweep never ends")
		var n int
		var err error
		n, more, err = b.store.Sweep(context.Background(), 3)
		require.NoError(t, err)
		total += n
	}
	return total
}

// requireDeadListed fails t unless the dead listing of topic ("" for all)
// holds exactly want.
func (b *testBundle) requireDeadListed(t *testing.T, topic string, want ...string) {
	t.Helper()
	got, next, err := b.store.ListDead(context.Background(), topic, store.MaxBatch, "")
	require.NoError(t, err)
	require.Empty(t, next)
	require.ElementsMatch(t, want, ids(got), "dead listing of topic %q", topic)
}

// TestDeadRetention: with DeadRetention set, the sweep deletes each dead
// notification once it has been dead that long: its record (Get finds
// nothing), its history, the stub of its order key, its entries in the
// listing of every topic and of its own, and its count. One that died
// more recently stays; so does one replayed since, which is not dead, and
// one replayed that died again, until its new death is as old. On one
// Redis, with one shard and several, and on a Cluster, where each call
// touches one slot.
func TestDeadRetention(t *testing.T) {
	t.Parallel()
	onEachDeployment(t, func(t *testing.T, client redis.UniversalClient, shards int) {
		ctx := context.Background()
		b := setup(t, store.Config{Client: client, Shards: shards, DeadRetention: time.Hour, Retention: time.Minute})
		start := b.clock.Now()
		old := []string{"old", "other", "imported"}
		for _, id := range []string{"old", "replayed", "again"} {
			b.enqueue(t, b.newNotification(t, id, 0, 0))
		}
		// Ids on keys of their own: most live in another shard than
		// their id's, behind a stub.
		for i := range 8 {
			id := fmt.Sprint("keyed-", i)
			b.enqueue(t, b.keyed(t, id, "k"+strconv.Itoa(i), 0))
			old = append(old, id)
		}
		b.enqueue(t, heraldtest.Notification(t, "other", start, heraldtest.Topic("other"), heraldtest.Backoff(0)))
		_, err := b.store.EnqueueBatch(ctx, []store.EnqueueRequest{{Notification: b.newNotification(t, "imported", 0, 0),
			Dead: &notify.Attempt{StartedAt: start, FinishedAt: start, Outcome: notify.OutcomePermanent}}})
		require.NoError(t, err)
		require.Len(t, b.kill(t, "jobs", "other"), 12)

		b.clock.Advance(20 * time.Minute)
		_, replayed, err := b.store.Replay(ctx, store.DeadFilter{IDs: []string{"again"}}, store.DeadOptions{})
		require.NoError(t, err)
		require.Equal(t, 1, replayed)
		require.Equal(t, []string{"again"}, b.kill(t, "jobs"), "again dies again, 20 minutes after the others")
		b.clock.Advance(10 * time.Minute)
		b.enqueue(t, b.newNotification(t, "young", 0, 0))
		require.Equal(t, []string{"young"}, b.kill(t, "jobs"))
		_, replayed, err = b.store.Replay(ctx, store.DeadFilter{IDs: []string{"replayed"}}, store.DeadOptions{Reset: true})
		require.NoError(t, err)
		require.Equal(t, 1, replayed)

		b.clock.Advance(30*time.Minute - time.Millisecond)
		require.Zero(t, b.sweepAll(t), "none has been dead an hour")
		b.clock.Advance(time.Millisecond)
		require.Equal(t, len(old), b.sweepAll(t), "those dead an hour")
		for _, id := range old {
			_, err := b.store.Get(ctx, id)
			require.ErrorIs(t, err, notify.ErrNotFound, id)
		}
		for id, want := range map[string]notify.State{"again": notify.StateDead, "young": notify.StateDead, "replayed": notify.StateScheduled} {
			n, err := b.store.Get(ctx, id)
			require.NoError(t, err, id)
			require.Equal(t, want, n.State, id)
			require.NotEmpty(t, n.History, id)
		}
		b.requireDeadListed(t, "", "again", "young")
		b.requireDeadListed(t, "jobs", "again", "young")
		b.requireDeadListed(t, "other")
		stats, err := b.store.Stats(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, stats["jobs"].Dead)
		require.Zero(t, stats["other"].Dead)

		b.clock.Advance(20 * time.Minute)
		require.Equal(t, 1, b.sweepAll(t), "again, an hour after its second death")
		_, err = b.store.Get(ctx, "again")
		require.ErrorIs(t, err, notify.ErrNotFound)
		b.requireDeadListed(t, "", "young")

		// The replayed one succeeds; once young's hour and the
		// retention of finished records have passed, nothing is left.
		items := b.reserveAll(t)
		require.Equal(t, []string{"replayed"}, ids(items))
		b.finishOne(t, b.finish(notify.ActionAck, items[0], time.Time{}))
		b.clock.Advance(10 * time.Minute)
		require.Equal(t, 2, b.sweepAll(t), "young and replayed")
		b.requireDeadListed(t, "")
		requireNothingLeft(t, client, b.store)
	})
}

// TestDeadRetentionKeepsByDefault: without DeadRetention, or with -1, dead
// notifications stay however long ago they died, until replayed or purged,
// so that an upgrade deletes none an operator still means to replay.
func TestDeadRetentionKeepsByDefault(t *testing.T) {
	t.Parallel()
	for name, keep := range map[string]time.Duration{"Default": 0, "Keep": -1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, store.Config{DeadRetention: keep})
			killAll(t, b, "a", "b")
			b.clock.Advance(10 * 365 * 24 * time.Hour)
			require.Zero(t, b.sweepAll(t))
			for _, id := range []string{"a", "b"} {
				n, err := b.store.Get(ctx, id)
				require.NoError(t, err, id)
				require.Equal(t, notify.StateDead, n.State)
			}
			b.requireDeadListed(t, "", "a", "b")
		})
	}
}

// TestDeadRetentionInBatches: a sweep deletes at most its limit of dead
// notifications per shard, and says whether more are due, so that no call
// holds Redis long and the dispatcher's sweep goes on until none is left.
func TestDeadRetentionInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Shards: 1, DeadRetention: time.Minute})
	killAll(t, b, "d1", "d2", "d3", "d4", "d5")
	b.clock.Advance(time.Minute)
	for _, want := range []struct {
		deleted int
		more    bool
	}{{2, true}, {2, true}, {1, false}, {0, false}} {
		deleted, more, err := b.store.Sweep(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, want.deleted, deleted)
		require.Equal(t, want.more, more)
	}
	b.requireDeadListed(t, "")
}

// TestDeadRetentionConfig: a DeadRetention below -1 is refused, naming it.
func TestDeadRetentionConfig(t *testing.T) {
	t.Parallel()
	_, err := store.New(&store.Config{Client: server.Client(t), DeadRetention: -2})
	require.ErrorContains(t, err, "dead_retention")
}

// TestDeadRetentionPastStaleEntries: entries of the dead-letter set left
// stale (written by hand, or left by a crash of an older version) are
// deleted as they come due, rather than stop the sweep of the dead
// notifications behind them, however many there are: ones whose records
// are gone; ones whose ids were enqueued again since, whose records,
// scheduled and not dead, stay; and dead ones their topic's set lacks,
// deleted with their records.
func TestDeadRetentionPastStaleEntries(t *testing.T) {
	t.Parallel()
	for _, stale := range []string{"WithoutRecords", "OfLiveRecords", "OfDeadRecordsNotInTheirTopic"} {
		t.Run(stale, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, store.Config{Shards: 1, DeadRetention: time.Minute})
			client := server.Client(t)
			key := b.store.Namespace() + ":{0}:dead"
			var ids []string
			for i := range 5 { // more than sweepAll's limit
				ids = append(ids, fmt.Sprint("stale-", i))
			}
			if stale == "OfDeadRecordsNotInTheirTopic" {
				killAll(t, b, ids...)
				require.NoError(t, client.ZRem(ctx, key+":jobs", ids).Err())
			}
			for _, id := range ids {
				require.NoError(t, client.ZAdd(ctx, key, redis.Z{Score: float64(b.clock.Now().UnixMilli()), Member: id}).Err())
				if stale == "OfLiveRecords" {
					b.enqueue(t, b.newNotification(t, id, time.Hour, 0))
				}
			}
			b.clock.Advance(time.Millisecond)
			killAll(t, b, "real")
			b.clock.Advance(time.Minute)
			require.Equal(t, 6, b.sweepAll(t), "the five entries and real")
			_, err := b.store.Get(ctx, "real")
			require.ErrorIs(t, err, notify.ErrNotFound, "dead a minute, behind stale entries")
			n, err := client.ZCard(ctx, key).Result()
			require.NoError(t, err)
			require.Zero(t, n)
			for _, id := range ids {
				n, err := b.store.Get(ctx, id)
				if stale != "OfLiveRecords" {
					require.ErrorIs(t, err, notify.ErrNotFound, id)
					continue
				}
				require.NoError(t, err, id)
				require.Equal(t, notify.StateScheduled, n.State, id)
			}
		})
	}
}
