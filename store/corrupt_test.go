package store_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// rawEnv is a one-shard store and its Redis, for tests that write Redis by
// hand as an operator, a restore or a bug might, and so leave the gauges
// off (no stats check at the end).
type rawEnv struct {
	st    *store.Store
	rdb   *redis.Client
	ns    string
	clock *heraldtest.Clock
}

func setupRaw(t *testing.T) *rawEnv {
	t.Helper()
	clock := heraldtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rdb := server.Client(t)
	ns := redistest.Namespace(t)
	st, err := store.New(&store.Config{Client: rdb, Namespace: ns, Shards: 1, TimeNowFunc: clock.Now, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	_, err = st.Shards(context.Background())
	require.NoError(t, err)
	return &rawEnv{st: st, rdb: rdb, ns: ns, clock: clock}
}

func (e *rawEnv) key(suffix string) string { return e.ns + ":{0}:" + suffix }

func (e *rawEnv) notification(t *testing.T, id string, opts ...heraldtest.NotificationOption) *notify.Notification {
	t.Helper()
	return heraldtest.Notification(t, id, e.clock.Now(), opts...)
}

// snapshot is every key of the namespace with its dump and whether it
// expires.
func (e *rawEnv) snapshot(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := e.rdb.Scan(ctx, 0, e.ns+":*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		d, err := e.rdb.Dump(ctx, k).Result()
		require.NoError(t, err)
		out[k] = fmt.Sprintf("%q expires=%v", d, e.rdb.PTTL(ctx, k).Val() > 0)
	}
	require.NoError(t, iter.Err())
	return out
}

// changed names the keys that differ between two snapshots.
func changed(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if b, ok := before[k]; !ok || b != v {
			out = append(out, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// farFuture is past what a time's Unix milliseconds hold: they wrap
// around to 1970.
var farFuture = time.Unix(18446744073709552, 0).UTC()

// TestTimesPastWhatTheStoreHolds: a time too far for the store is refused
// naming its field, where its milliseconds wrapped to 1970 and the
// notification started at once, or a purge since then took the topic.
func TestTimesPastWhatTheStoreHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SendAt", func(t *testing.T) {
		t.Parallel()
		e := setupRaw(t)
		// The parking band starts in the year 144683: a notification sent
		// there would be taken for parked and made due by UnparkStray.
		for _, at := range []time.Time{farFuture, store.ParkAt(store.PauseTopic, "other")} {
			n := e.notification(t, "far", heraldtest.Backoff(0))
			n.SendAt = at
			before := e.snapshot(t)
			_, _, err := e.st.Enqueue(ctx, n, false)
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe, "%s", at)
			require.Equal(t, "send_at", fe.Field)
			require.Empty(t, changed(before, e.snapshot(t)))
		}
	})

	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		e := setupRaw(t)
		_, _, err := e.st.Enqueue(ctx, e.notification(t, "r1", heraldtest.Backoff(0, time.Minute)), false)
		require.NoError(t, err)
		items, _, err := e.st.Reserve(ctx, store.PullQueue("jobs"), []int{0}, 10)
		require.NoError(t, err)
		require.Len(t, items, 1)
		now := e.clock.Now()
		errs, err := e.st.Finish(ctx, []store.Finish{{Notification: items[0], Action: notify.ActionRetry, NextAt: farFuture,
			Attempt: notify.Attempt{Attempt: 0, StartedAt: now, FinishedAt: now, Outcome: notify.OutcomeRetry}}})
		require.NoError(t, err)
		require.ErrorContains(t, errs[0], "later than the store can hold")
		again, _, err := e.st.Reserve(ctx, store.PullQueue("jobs"), []int{0}, 10)
		require.NoError(t, err)
		require.Empty(t, again, "still reserved, not due at once")
	})

	t.Run("DeadWindow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		killAll(t, b, "d1", "d2")
		for _, f := range []store.DeadFilter{{Topic: "jobs", Since: &farFuture}, {Topic: "jobs", Until: &farFuture}} {
			_, purged, err := b.store.Purge(ctx, f, store.DeadOptions{})
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Zero(t, purged)
		}
		matched, _, err := b.store.Purge(ctx, store.DeadFilter{Topic: "jobs"}, store.DeadOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 2, matched, "nothing purged")
	})
}

// TestRefusedCallsWriteNothing: calls refused for input the API never
// sends, by a Go caller of the store, are refused before the first write.
func TestRefusedCallsWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("UnknownChannel", func(t *testing.T) {
		t.Parallel()
		e := setupRaw(t)
		n := e.notification(t, "h1", heraldtest.OrderKey("k"))
		n.Channel = "email"
		before := e.snapshot(t)
		res, err := e.st.EnqueueBatch(ctx, []store.EnqueueRequest{{Notification: n}})
		require.NoError(t, err)
		var fe *notify.FieldError
		require.ErrorAs(t, res[0].Err, &fe)
		require.Equal(t, "channel", fe.Field)
		require.Empty(t, changed(before, e.snapshot(t)))
		// Its key's line was not taken: the next one starts.
		got, _, err := e.st.Enqueue(ctx, e.notification(t, "h2", heraldtest.OrderKey("k")), false)
		require.NoError(t, err)
		require.Empty(t, got.WaitingFor)
	})

	t.Run("EnableEndpointBadName", func(t *testing.T) {
		t.Parallel()
		e := setupRaw(t)
		before := e.snapshot(t)
		for _, call := range []func() error{
			func() error { _, err := e.st.EndpointFailed(ctx, "bad|name", time.Millisecond); return err },
			func() error { _, err := e.st.EnableEndpoint(ctx, "bad|name"); return err },
		} {
			var fe *notify.FieldError
			require.ErrorAs(t, call(), &fe)
			require.Equal(t, "name", fe.Field)
		}
		require.Empty(t, changed(before, e.snapshot(t)))
	})
}

// reapUntilFound reaps, limit at a time, until a reap returns expired
// reservations, and returns their ids; a few reaps at most, as each sets
// aside what stood first.
func reapUntilFound(t *testing.T, e *rawEnv, limit int) []string {
	t.Helper()
	for range 3 {
		expired, err := e.st.Expired(context.Background(), 0, limit)
		require.NoError(t, err)
		if len(expired) > 0 {
			ids := make([]string, len(expired))
			for i, n := range expired {
				ids[i] = n.ID
			}
			return ids
		}
	}
	return nil
}

// TestReapingPastBrokenReservations: reservations a hand, a restore or a
// bug broke are set aside, and the reaper goes on to the ones behind them,
// where they came first at every reap and stopped it.
func TestReapingPastBrokenReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RecordGone", func(t *testing.T) {
		t.Parallel()
		e := setupRaw(t)
		_, _, err := e.st.Enqueue(ctx, e.notification(t, "real", heraldtest.Backoff(0, time.Minute)), false)
		require.NoError(t, err)
		items, _, err := e.st.Reserve(ctx, store.PullQueue("jobs"), []int{0}, 10)
		require.NoError(t, err)
		require.Len(t, items, 1)
		require.NoError(t, e.rdb.ZAdd(ctx, e.key("reserved"), redis.Z{Score: 1000, Member: "ghost1"}, redis.Z{Score: 1001, Member: "ghost2"}).Err())
		e.clock.Advance(time.Hour)
		require.Equal(t, []string{"real"}, reapUntilFound(t, e, 2))
		require.Zero(t, e.st.Quarantined(), "nothing was there to move aside")
		require.Equal(t, []string{"real"}, e.rdb.ZRange(ctx, e.key("reserved"), 0, -1).Val())
	})

	t.Run("StateLineGone", func(t *testing.T) {
		t.Parallel()
		e := setupRaw(t)
		for _, id := range []string{"s1", "s2"} {
			_, _, err := e.st.Enqueue(ctx, e.notification(t, id, heraldtest.Backoff(0, time.Minute)), false)
			require.NoError(t, err)
			items, _, err := e.st.Reserve(ctx, store.PullQueue("jobs"), []int{0}, 1)
			require.NoError(t, err)
			require.Len(t, items, 1)
			e.clock.Advance(time.Second)
		}
		require.NoError(t, e.rdb.HDel(ctx, e.key("st"), "s1").Err())
		e.clock.Advance(time.Hour)
		require.Equal(t, []string{"s2"}, reapUntilFound(t, e, 1))
		require.EqualValues(t, 1, e.st.Quarantined())
		why := e.rdb.HGet(ctx, e.key("quarantine"), "s1").Val()
		require.True(t, strings.HasPrefix(why, "reserved, but its state line is missing\n"), why)
	})

	t.Run("HeaderOnlyTheScriptsRead", func(t *testing.T) {
		t.Parallel()
		// A header whose due time is not a number: the scripts read its
		// topic, Go does not. The one behind it in its key's line must
		// become due in its own topic's queue.
		e := setupRaw(t)
		for _, id := range []string{"a", "b"} {
			_, _, err := e.st.Enqueue(ctx, e.notification(t, id, heraldtest.OrderKey("k"), heraldtest.Backoff(0, time.Minute)), false)
			require.NoError(t, err)
		}
		items, _, err := e.st.Reserve(ctx, store.PullQueue("jobs"), []int{0}, 10)
		require.NoError(t, err)
		require.Len(t, items, 1)
		c := e.rdb.HGet(ctx, e.key("job"), "a").Val()
		digest, rest, _ := strings.Cut(c, ":")
		_, rest, _ = strings.Cut(rest, " ")
		require.NoError(t, e.rdb.HSet(ctx, e.key("job"), "a", digest+":x "+rest).Err())
		e.clock.Advance(time.Hour)
		_, err = e.st.Expired(ctx, 0, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, e.st.Quarantined())
		got, _, err := e.st.Reserve(ctx, store.PullQueue("jobs"), []int{0}, 10)
		require.NoError(t, err)
		require.Len(t, got, 1, "b heads its line and is due in its topic's queue")
		require.Equal(t, "b", got[0].ID)
	})
}
