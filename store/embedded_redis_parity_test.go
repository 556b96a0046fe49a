package store_test

import (
	"context"
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

// onBothRedis runs scenario on a redis-server and on the embedded Redis
// herald serve and herald demo run on with no redis.addrs, each in a store
// of its own, and requires what each noted, the outcomes a user would
// see, to be alike.
func onBothRedis(t *testing.T, cfg store.Config, scenario func(t *testing.T, b *testBundle, note func(format string, args ...any))) {
	t.Helper()
	var mu sync.Mutex
	got := map[string][]string{}
	t.Run("Runs", func(t *testing.T) {
		for name, client := range map[string]func(t *testing.T) redis.UniversalClient{
			"Redis":    func(t *testing.T) redis.UniversalClient { return server.Client(t) },
			"Embedded": func(t *testing.T) redis.UniversalClient { return embeddedRedis(t, nil) },
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				c := cfg
				c.Client = client(t)
				var out []string
				scenario(t, setup(t, c), func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) })
				mu.Lock()
				got[name] = out
				mu.Unlock()
			})
		}
	})
	if !t.Failed() {
		require.Equal(t, got["Redis"], got["Embedded"], "what the embedded Redis answered, against a redis-server's answers")
	}
}

// finishAll finishes every item of ns with action, the next attempt due
// at next, and returns how many the store took.
func (b *testBundle) finishAll(t *testing.T, ns []*notify.Notification, action notify.Action, next time.Time) int {
	t.Helper()
	fs := make([]store.Finish, len(ns))
	for i, n := range ns {
		fs[i] = b.finish(action, n, next)
	}
	errs, err := b.store.Finish(context.Background(), fs)
	require.NoError(t, err)
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	return ok
}

// TestBigBatchesOnEmbeddedRedis: batches of a thousand, the most one
// script call takes, in one shard, so that each is one call: enqueued with
// and without order keys, reserved, retried, killed with a long history,
// replayed and purged, the embedded Redis (its scripts on gopher-lua,
// whose stack is not Lua 5.1's) does what a redis-server does.
func TestBigBatchesOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	onBothRedis(t, store.Config{Shards: 1}, func(t *testing.T, b *testBundle, note func(format string, args ...any)) {
		backoff := make([]time.Duration, 4)
		for i := range backoff {
			backoff[i] = time.Millisecond
		}
		for _, keyed := range []bool{false, true} {
			reqs := make([]store.EnqueueRequest, store.MaxBatch)
			for i := range reqs {
				opts := []heraldtest.NotificationOption{heraldtest.Backoff(backoff...)}
				id := fmt.Sprint("plain-", i)
				if keyed {
					id = fmt.Sprint("keyed-", i)
					opts = append(opts, heraldtest.OrderKey(fmt.Sprint("k", i%3)))
				}
				reqs[i] = store.EnqueueRequest{Notification: heraldtest.Notification(t, id, b.clock.Now(), opts...)}
			}
			res, err := b.store.EnqueueBatch(ctx, reqs)
			require.NoError(t, err)
			created := 0
			for _, r := range res {
				require.NoError(t, r.Err)
				if r.Status == store.Created {
					created++
				}
			}
			note("keyed %v: %d created", keyed, created)
		}
		for round := range len(backoff) {
			b.clock.Advance(time.Second)
			got := b.reserveAll(t)
			action := notify.ActionRetry
			if round == len(backoff)-1 {
				action = notify.ActionDead
			}
			note("round %d: %d reserved, %d finished", round, len(got), b.finishAll(t, got, action, b.clock.Now().Add(time.Millisecond)))
		}
		matched, replayed, err := b.store.Replay(ctx, store.DeadFilter{Topic: "jobs"}, store.DeadOptions{})
		require.NoError(t, err)
		note("replay: %d matched, %d replayed", matched, replayed)
		b.clock.Advance(time.Second)
		got := b.reserveAll(t)
		note("after the replay: %d reserved, %d killed", len(got), b.finishAll(t, got, notify.ActionDead, time.Time{}))
		matched, purged, err := b.store.Purge(ctx, store.DeadFilter{Topic: "jobs"}, store.DeadOptions{})
		require.NoError(t, err)
		note("purge: %d matched, %d purged", matched, purged)
		stats, err := b.store.Stats(ctx)
		require.NoError(t, err)
		note("stats: %+v", stats["jobs"])
	})
}

// TestDueTimesOnEmbeddedRedis: due times at the edges of what a score
// holds, where the embedded Redis's numbers (gopher-lua's, and miniredis's
// scores) could part from a redis-server's: a send_at with a fraction of a
// millisecond, due at the next one and not before; the epoch and the last
// millisecond of 9999, the first and last due times Herald takes, kept
// exactly, and reserved in due order; and the parking of a paused topic's
// notifications at 2^52 ms and more, until its resume.
func TestDueTimesOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	onBothRedis(t, store.Config{Shards: 2}, func(t *testing.T, b *testBundle, note func(format string, args ...any)) {
		reserved := func(what string) {
			got := b.reserveAll(t)
			note("%s: %v", what, ids(got))
			b.finishAll(t, got, notify.ActionAck, time.Time{})
		}
		last := time.Date(9999, time.December, 31, 23, 59, 59, int(999*time.Millisecond), time.UTC)
		b.enqueue(t, heraldtest.Notification(t, "fraction", b.clock.Now(), heraldtest.SendAt(b.clock.Now().Add(1500*time.Microsecond))))
		b.enqueue(t, heraldtest.Notification(t, "last", b.clock.Now(), heraldtest.SendAt(last)))
		b.enqueue(t, heraldtest.Notification(t, "now", b.clock.Now(), heraldtest.SendAt(b.clock.Now())))
		b.enqueue(t, heraldtest.Notification(t, "epoch", b.clock.Now(), heraldtest.SendAt(time.Unix(0, 0))))
		b.enqueue(t, heraldtest.Notification(t, "past", b.clock.Now(), heraldtest.SendAt(b.clock.Now().Add(-time.Hour))))
		for _, id := range []string{"fraction", "last", "epoch"} {
			n, err := b.store.Get(ctx, id)
			require.NoError(t, err)
			note("%s due %s", id, n.NextAttemptAt.Format(time.RFC3339Nano))
		}
		reserved("at once")
		b.clock.Advance(time.Millisecond)
		reserved("1ms later")
		b.clock.Advance(time.Millisecond)
		reserved("2ms later")

		require.NoError(t, b.store.Pause(ctx, store.PauseTopic, "jobs"))
		for _, id := range []string{"p1", "p2", "p3"} {
			b.enqueue(t, b.newNotification(t, id, 0, 0))
		}
		b.park(t, 3)
		n, err := b.store.Get(ctx, "p2")
		require.NoError(t, err)
		note("p2 parked %v, due %s", store.Parked(n), n.NextAttemptAt.Format(time.RFC3339Nano))
		paused, err := b.store.Paused(ctx)
		require.NoError(t, err)
		moved, err := b.store.UnparkStray(ctx, []string{store.PullQueue("jobs")}, paused)
		require.NoError(t, err)
		note("unparked while paused: %d", moved)
		reserved("while paused")
		moved, err = b.store.Resume(ctx, store.PauseTopic, "jobs")
		require.NoError(t, err)
		note("resumed: %d", moved)
		reserved("resumed")
	})
}
