package store_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// server is the package's redis-server; tests isolate by namespace.
var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }

type testBundle struct {
	store *store.Store
	clock *heraldtest.Clock
}

// setup opens a store in a namespace of the test's own whose clock moves
// only when the test says so.
func setup(t *testing.T, cfg store.Config) *testBundle {
	t.Helper()
	clock := heraldtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if cfg.Client == nil {
		cfg.Client = server.Client(t)
	}
	cfg.Namespace = redistest.Namespace(t)
	cfg.Shards = cmp.Or(cfg.Shards, 4)
	cfg.TimeNowFunc = clock.Now
	cfg.Logger = heraldtest.Logger(t)
	st, err := store.New(&cfg)
	require.NoError(t, err)
	t.Cleanup(func() { heraldtest.RequireStatsMatch(t, st) })
	return &testBundle{store: st, clock: clock}
}

// newNotification resolves a pull notification of topic jobs, sent delay
// from the store's now, with the given backoff.
func (b *testBundle) newNotification(t *testing.T, id string, delay time.Duration, backoff ...time.Duration) *notify.Notification {
	t.Helper()
	return heraldtest.Notification(t, id, b.clock.Now(), heraldtest.Delay(delay), heraldtest.Backoff(backoff...))
}

func (b *testBundle) enqueue(t *testing.T, n *notify.Notification) *notify.Notification {
	t.Helper()
	got, status, err := b.store.Enqueue(context.Background(), n, false)
	require.NoError(t, err)
	require.Equal(t, store.Created, status)
	return got
}

// reserveAll reserves everything due in the pull queue of topic jobs.
func (b *testBundle) reserveAll(t *testing.T) []*notify.Notification {
	t.Helper()
	items, _, err := b.store.Reserve(context.Background(), store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), store.MaxReserve)
	require.NoError(t, err)
	return items
}

func (b *testBundle) finish(action notify.Action, n *notify.Notification, next time.Time) store.Finish {
	now := b.clock.Now()
	outcome := map[notify.Action]notify.Outcome{
		notify.ActionAck: notify.OutcomeSuccess, notify.ActionRetry: notify.OutcomeRetry,
		notify.ActionDead: notify.OutcomePermanent, notify.ActionRelease: notify.OutcomeReleased,
	}[action]
	return store.Finish{Notification: n, Action: action, NextAt: next,
		Attempt: notify.Attempt{Attempt: n.Attempts, StartedAt: now, FinishedAt: now, Outcome: outcome}}
}

func TestEnqueueAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t, store.Config{})
	n := b.newNotification(t, "order-1", time.Hour, 5*time.Second, time.Minute)
	got := b.enqueue(t, n)
	require.Equal(t, notify.StateScheduled, got.State)
	require.Equal(t, n.SendAt.Add(5*time.Second), *got.NextAttemptAt, "the clock is on a whole millisecond")

	rec, err := b.store.Get(context.Background(), "order-1")
	require.NoError(t, err)
	require.Equal(t, "jobs", rec.Topic)
	require.JSONEq(t, `{"n":1}`, string(rec.Payload))
	require.Equal(t, []notify.Duration{notify.Duration(5 * time.Second), notify.Duration(time.Minute)}, rec.Backoff)
	require.Empty(t, rec.History)

	_, err = b.store.Get(context.Background(), "missing")
	require.ErrorIs(t, err, notify.ErrNotFound)
}

func TestEnqueueIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SameContentReturnsExisting", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", time.Hour, 0))
		_, status, err := b.store.Enqueue(ctx, b.newNotification(t, "a", time.Hour, 0), false)
		require.NoError(t, err)
		require.Equal(t, store.Existing, status)
	})

	t.Run("OtherContentConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", time.Hour, 0))
		existing, _, err := b.store.Enqueue(ctx, b.newNotification(t, "a", 2*time.Hour, 0), false)
		require.ErrorIs(t, err, notify.ErrConflict)
		require.Equal(t, "a", existing.ID)
	})

	t.Run("ReplaceReschedules", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", time.Hour, 0))
		moved := b.newNotification(t, "a", 0, 0)
		got, status, err := b.store.Enqueue(ctx, moved, true)
		require.NoError(t, err)
		require.Equal(t, store.Replaced, status)
		require.Equal(t, moved.SendAt, *got.NextAttemptAt)
		items := b.reserveAll(t)
		require.Len(t, items, 1, "the moved notification is due now, once")
	})

	t.Run("ReplaceIntoOtherQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0))
		hook := b.newNotification(t, "a", 0, 0)
		hook.Channel, hook.Target = notify.ChannelWebhook, "https://example.test/hook"
		hook.Digest = hook.ComputeDigest("now")
		_, status, err := b.store.Enqueue(ctx, hook, true)
		require.NoError(t, err)
		require.Equal(t, store.Replaced, status)
		require.Empty(t, b.reserveAll(t), "nothing is left in the old pull queue")
	})

	t.Run("ReplaceReservedRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0))
		require.Len(t, b.reserveAll(t), 1)
		_, _, err := b.store.Enqueue(ctx, b.newNotification(t, "a", time.Hour, 0), true)
		require.ErrorIs(t, err, notify.ErrReserved)
	})
}

func TestReserveOnlyWhatIsDue(t *testing.T) {
	t.Parallel()
	b := setup(t, store.Config{})
	b.enqueue(t, b.newNotification(t, "now", 0, 0))
	b.enqueue(t, b.newNotification(t, "later", time.Hour, 0))
	items := b.reserveAll(t)
	require.Len(t, items, 1)
	n := items[0]
	require.Equal(t, "now", n.ID)
	require.Equal(t, notify.StateReserved, n.State)
	require.NotEmpty(t, n.Receipt)
	require.Equal(t, b.clock.Now().Add(time.Duration(n.TTR)), *n.Deadline)
	require.JSONEq(t, `{"n":1}`, string(n.Payload))
	require.Empty(t, b.reserveAll(t), "a reserved notification is not handed out twice")
}

// TestReserveEarliestFirst reserves from shards holding a mix of due and
// later notifications, in small and large calls: every due one comes out
// once and none of the later ones; a call of one takes its shard's
// earliest, and once all due ones are out every head is a later one.
func TestReserveEarliestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, store.Config{})
	due := map[string]bool{}
	for i := range 60 {
		id := fmt.Sprintf("n-%02d", i)
		if i%3 == 0 {
			b.enqueue(t, b.newNotification(t, id, time.Duration(i+1)*time.Minute))
			continue
		}
		b.enqueue(t, heraldtest.Notification(t, id, b.clock.Now(), heraldtest.SendAt(b.clock.Now().Add(-time.Duration(i)*time.Millisecond))))
		due[id] = true
	}
	shards := heraldtest.AllShards(t, b.store)
	got := map[string]bool{}
	for _, limit := range []int{1, 2, 3, 5, store.MaxReserve} {
		items, heads, err := b.store.Reserve(context.Background(), store.PullQueue("jobs"), shards, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(items), limit)
		var latest time.Time
		for _, n := range items {
			require.True(t, due[n.ID], "%s is not due yet", n.ID)
			require.False(t, got[n.ID], "%s handed out twice", n.ID)
			got[n.ID] = true
			if n.NextAttemptAt.After(latest) {
				latest = *n.NextAttemptAt
			}
		}
		for _, h := range heads {
			if limit == store.MaxReserve {
				require.True(t, h.Due.After(b.clock.Now()), "shard %d: only later ones are left", h.Shard)
			}
		}
		if limit == 1 {
			// One from one shard: the shard's head is no earlier.
			require.Len(t, items, 1)
			require.Len(t, heads, 1)
			for _, h := range heads {
				require.False(t, !h.Due.IsZero() && h.Due.Before(latest), "shard %d kept %s, earlier than the one handed out", h.Shard, h.Due)
			}
		}
	}
	require.Equal(t, due, got)
}

func TestHeads(t *testing.T) {
	t.Parallel()
	b := setup(t, store.Config{})
	queue := store.PullQueue("jobs")
	heads, err := b.store.Heads(context.Background(), queue)
	require.NoError(t, err)
	require.Len(t, heads, len(heraldtest.AllShards(t, b.store)))
	for i, h := range heads {
		require.Equal(t, i, h.Shard)
		require.True(t, h.Due.IsZero(), "an empty queue has no head")
	}
	later := b.enqueue(t, b.newNotification(t, "later", time.Hour, 0))
	sooner := b.enqueue(t, b.newNotification(t, "sooner", time.Minute, 0))
	heads, err = b.store.Heads(context.Background(), queue)
	require.NoError(t, err)
	var dues []time.Time
	for _, h := range heads {
		if !h.Due.IsZero() {
			dues = append(dues, h.Due)
		}
	}
	require.Subset(t, []time.Time{*later.NextAttemptAt, *sooner.NextAttemptAt}, dues)
	require.Contains(t, dues, *sooner.NextAttemptAt, "the earliest is every shard's head")
}

func TestFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("AckSucceedsAndRecordsHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0))
		n := b.reserveAll(t)[0]
		errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, n, time.Time{})})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		rec, err := b.store.Get(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, notify.StateSucceeded, rec.State)
		require.Equal(t, 1, rec.Attempts)
		require.Nil(t, rec.NextAttemptAt)
		require.Len(t, rec.History, 1)
		require.Equal(t, notify.OutcomeSuccess, rec.History[0].Outcome)
	})

	t.Run("StaleReceiptCannotAck", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0, 0))
		n := b.reserveAll(t)[0]
		stale := *n
		stale.Receipt = "someone-else"
		errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, &stale, time.Time{})})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], notify.ErrStaleReceipt)
		rec, _ := b.store.Get(ctx, "a")
		require.Equal(t, notify.StateReserved, rec.State)
	})

	t.Run("TakenOverCannotFinish", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0, 0))
		first := b.reserveAll(t)[0]
		require.Equal(t, b.clock.Now(), *first.NextAttemptAt, "a first attempt is due at its first due time")
		// Its ttr runs out: the reaper fails the attempt, due again now,
		// and another consumer takes it.
		b.clock.Advance(time.Hour)
		expired, err := b.store.Expired(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, expired, 1)
		errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionRetry, expired[0], b.clock.Now())})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		second := b.reserveAll(t)[0]
		require.Equal(t, 1, second.Attempts)
		require.Equal(t, b.clock.Now(), *second.NextAttemptAt)

		errs, err = b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, first, time.Time{})})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], notify.ErrStaleReceipt, "the first holder's ack comes too late")
		errs, err = b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, second, time.Time{})})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		errs, err = b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, second, time.Time{})})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], notify.ErrStaleReceipt, "a finish applies once")
		rec, err := b.store.Get(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, notify.StateSucceeded, rec.State)
		require.Equal(t, 2, rec.Attempts)
		require.Len(t, rec.History, 2)
	})

	t.Run("RetryReschedules", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0, time.Hour))
		n := b.reserveAll(t)[0]
		next := b.clock.Now().Add(time.Hour)
		errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionRetry, n, next)})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		rec, _ := b.store.Get(ctx, "a")
		require.Equal(t, notify.StateScheduled, rec.State)
		require.Equal(t, 1, rec.Attempts)
		require.True(t, next.Equal(*rec.NextAttemptAt))
		require.Empty(t, b.reserveAll(t), "not due before the retry time")
	})

	t.Run("MixedBatchAcrossShards", func(t *testing.T) {
		// One Finish of every action over notifications of every shard:
		// on a single Redis a single script, which must send each to its
		// own shard's sets.
		t.Parallel()
		b := setup(t, store.Config{Shards: 8})
		const n = 40
		for i := range n {
			b.enqueue(t, b.newNotification(t, fmt.Sprintf("m%02d", i), 0, 0, 0))
		}
		reserved := b.reserveAll(t)
		require.Len(t, reserved, n)
		actions := []notify.Action{notify.ActionAck, notify.ActionRetry, notify.ActionDead, notify.ActionRelease}
		var fs []store.Finish
		want := map[notify.Action][]string{}
		for i, r := range reserved {
			a := actions[i%len(actions)]
			fs = append(fs, b.finish(a, r, b.clock.Now()))
			want[a] = append(want[a], r.ID)
		}
		errs, err := b.store.Finish(ctx, fs)
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
		for _, id := range want[notify.ActionAck] {
			rec, err := b.store.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, notify.StateSucceeded, rec.State, id)
		}
		dead, _, err := b.store.ListDead(ctx, "jobs", 100, "")
		require.NoError(t, err)
		var deadIDs []string
		for _, d := range dead {
			deadIDs = append(deadIDs, d.ID)
		}
		require.ElementsMatch(t, want[notify.ActionDead], deadIDs)
		attempts := map[string]int{}
		for _, r := range b.reserveAll(t) {
			attempts[r.ID] = r.Attempts
		}
		require.Len(t, attempts, len(want[notify.ActionRetry])+len(want[notify.ActionRelease]), "retried and released are due again")
		for _, id := range want[notify.ActionRetry] {
			require.Equal(t, 1, attempts[id], id)
		}
		for _, id := range want[notify.ActionRelease] {
			require.Equal(t, 0, attempts[id], id)
		}
	})

	t.Run("ReleaseDoesNotCount", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0))
		n := b.reserveAll(t)[0]
		_, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionRelease, n, b.clock.Now())})
		require.NoError(t, err)
		again := b.reserveAll(t)
		require.Len(t, again, 1)
		require.Equal(t, 0, again[0].Attempts)
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Scheduled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0))
		rec, err := b.store.Cancel(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, notify.StateCancelled, rec.State)
		require.Nil(t, rec.NextAttemptAt)
		require.Empty(t, b.reserveAll(t))
		_, err = b.store.Cancel(ctx, "a")
		require.NoError(t, err, "cancelling twice is fine")
	})

	// The attempt under way goes on; when it ends it is recorded, once,
	// and the notification stays cancelled, its counters as the cancel
	// left them (setup's cleanup recounts them).
	t.Run("ReservedThenLateAck", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0, 0))
		n := b.reserveAll(t)[0]
		cancelled, err := b.store.Cancel(ctx, "a")
		require.NoError(t, err)
		b.clock.Advance(time.Second)
		for _, action := range []notify.Action{notify.ActionRetry, notify.ActionAck, notify.ActionDead} {
			errs, err := b.store.Finish(ctx, []store.Finish{b.finish(action, n, b.clock.Now())})
			require.NoError(t, err)
			if action == notify.ActionRetry {
				require.ErrorIs(t, errs[0], notify.ErrCancelledMeanwhile)
			} else {
				require.ErrorIs(t, errs[0], notify.ErrStaleReceipt, "recorded once")
				require.NotErrorIs(t, errs[0], notify.ErrCancelledMeanwhile, "recorded once")
			}
		}
		rec, err := b.store.Get(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, notify.StateCancelled, rec.State, "a late finish does not resurrect it")
		require.Equal(t, cancelled.UpdatedAt, rec.UpdatedAt, "cancelled when it was")
		require.Nil(t, rec.NextAttemptAt)
		require.Equal(t, 1, rec.Attempts)
		require.Len(t, rec.History, 1)
		require.Equal(t, notify.OutcomeRetry, rec.History[0].Outcome)
		require.Empty(t, b.reserveAll(t))
		stats, err := b.store.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, store.TopicStats{FailedAttemptsTotal: 1}, stats["jobs"], "a failed attempt, and no move")
	})

	// A dispatcher gives back unattempted what it held for a worker when
	// the cancel comes: nothing to record.
	t.Run("ReservedThenGivenBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0))
		n := b.reserveAll(t)[0]
		_, err := b.store.Cancel(ctx, "a")
		require.NoError(t, err)
		errs, err := b.store.Finish(ctx, []store.Finish{{Notification: n, Action: notify.ActionRelease, NextAt: b.clock.Now()}})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], notify.ErrStaleReceipt)
		require.NotErrorIs(t, errs[0], notify.ErrCancelledMeanwhile)
		rec, err := b.store.Get(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, notify.StateCancelled, rec.State)
		require.Zero(t, rec.Attempts)
		require.Empty(t, rec.History)
	})

	t.Run("FinishedAndUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		b.enqueue(t, b.newNotification(t, "a", 0, 0))
		n := b.reserveAll(t)[0]
		_, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, n, time.Time{})})
		require.NoError(t, err)
		_, err = b.store.Cancel(ctx, "a")
		require.ErrorIs(t, err, notify.ErrFinished)
		_, err = b.store.Cancel(ctx, "nope")
		require.ErrorIs(t, err, notify.ErrNotFound)
	})
}

func TestExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	n := b.newNotification(t, "a", 0, 0, 0)
	n.TTR = notify.Duration(50 * time.Millisecond)
	b.enqueue(t, n)
	reserved := b.reserveAll(t)[0]

	b.clock.Advance(50 * time.Millisecond)
	got, err := b.store.Expired(ctx, 0, 10)
	require.NoError(t, err)
	require.Empty(t, got, "not expired at its deadline")
	b.clock.Advance(time.Millisecond)
	got, err = b.store.Expired(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, reserved.Receipt, got[0].Receipt)
}

// TestExpiredSkipsLaterReservations: the reaper reads the expired ids, then
// their records. A notification whose expired reservation is finished late
// and which another dispatcher reserves again in between holds a fresh
// reservation: reaping that would start a second attempt beside it.
func TestExpiredSkipsLaterReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, between := setupHooked(t, store.Config{})
	n := b.newNotification(t, "a", 0, 0, 0)
	n.TTR = notify.Duration(50 * time.Millisecond)
	b.enqueue(t, n)
	first := b.reserveAll(t)[0]
	b.clock.Advance(time.Second)

	var again *notify.Notification
	between.arm(func() {
		errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionRetry, first, b.clock.Now())})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		again = b.reserveAll(t)[0]
	})
	got, err := b.store.Expired(ctx, 0, 10)
	require.NoError(t, err)
	require.NotNil(t, again, "the hook ran")
	require.Empty(t, got)
	require.Empty(t, b.reserveAll(t), "reserved once, by the second dispatcher")
}

// setupHooked is setup with an afterPipeline hook on the store's client.
func setupHooked(t *testing.T, cfg store.Config) (*testBundle, *afterPipeline) {
	t.Helper()
	client := server.Client(t)
	between := &afterPipeline{}
	client.AddHook(between)
	cfg.Client = client
	return setup(t, cfg), between
}

// afterPipeline is a go-redis hook that runs a function once, right after
// the next pipeline: a way to make something happen between the first
// round trip of a store call and the rest.
type afterPipeline struct {
	fn atomic.Pointer[func()]
}

// arm makes h run fn after the next pipeline; fn's own calls run unhooked.
func (h *afterPipeline) arm(fn func()) { h.fn.Store(&fn) }

func (h *afterPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *afterPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *afterPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if fn := h.fn.Swap(nil); fn != nil {
			(*fn)()
		}
		return err
	}
}

// killAll makes every notification dead through the store's transitions.
func killAll(t *testing.T, b *testBundle, ids ...string) {
	t.Helper()
	for _, id := range ids {
		b.enqueue(t, b.newNotification(t, id, 0, 0))
	}
	var fs []store.Finish
	for _, n := range b.reserveAll(t) {
		fs = append(fs, b.finish(notify.ActionDead, n, time.Time{}))
	}
	require.Len(t, fs, len(ids))
	_, err := b.store.Finish(context.Background(), fs)
	require.NoError(t, err)
}

// TestGetStates: the states of many ids, in their order, nil for an id
// with no record, across more than one batch.
func TestGetStates(t *testing.T) {
	t.Parallel()
	b := setup(t, store.Config{})
	killAll(t, b, "dead")
	b.enqueue(t, b.newNotification(t, "waiting", time.Hour, 0))
	ids := []string{"waiting"}
	for i := range store.MaxBatch {
		ids = append(ids, fmt.Sprintf("unknown-%d", i))
	}
	ids = append(ids, "dead")
	got, err := b.store.GetStates(context.Background(), ids)
	require.NoError(t, err)
	require.Len(t, got, len(ids))
	require.Equal(t, notify.StateScheduled, got[0].State)
	require.Equal(t, "dead", got[len(got)-1].ID)
	require.Equal(t, notify.StateDead, got[len(got)-1].State)
	for _, n := range got[1 : len(got)-1] {
		require.Nil(t, n)
	}
}

// TestDeadWindowGoesWithATopic: a window of the time of death narrows a
// topic's replay or purge; given with ids it would be ignored, and more
// done than asked, so it is refused naming it, for every caller of the
// store, and nothing moves.
func TestDeadWindowGoesWithATopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	killAll(t, b, "w0")
	later := b.clock.Now().Add(time.Hour)
	var fe *notify.FieldError
	_, _, err := b.store.Replay(ctx, store.DeadFilter{IDs: []string{"w0"}, Since: &later}, store.DeadOptions{})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "since", fe.Field)
	_, _, err = b.store.Purge(ctx, store.DeadFilter{IDs: []string{"w0"}, Until: &later}, store.DeadOptions{})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "until", fe.Field)
	rec, err := b.store.Get(ctx, "w0")
	require.NoError(t, err)
	require.Equal(t, notify.StateDead, rec.State, "neither replayed nor purged")
}

// TestDeadBoundBeforeTheEpoch: the zero time, which a caller's
// 0001-01-01T00:00:00Z parses to, is a bound like any other, not "no
// bound": a purge until then would otherwise delete the whole topic. No
// one died before 1970, so a bound before it is refused naming its field,
// whoever passed it, and nothing moves.
func TestDeadBoundBeforeTheEpoch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	killAll(t, b, "z0")
	var zero time.Time
	justBefore := time.Unix(0, 0).Add(-time.Millisecond)
	for _, tc := range []struct {
		field string
		f     store.DeadFilter
	}{
		{"until", store.DeadFilter{Topic: "jobs", Until: &zero}},
		{"since", store.DeadFilter{Topic: "jobs", Since: &zero}},
		{"since", store.DeadFilter{Topic: "jobs", Since: &justBefore}},
	} {
		var fe *notify.FieldError
		_, _, err := b.store.Purge(ctx, tc.f, store.DeadOptions{})
		require.ErrorAs(t, err, &fe)
		require.Equal(t, tc.field, fe.Field)
		_, _, err = b.store.Replay(ctx, tc.f, store.DeadOptions{})
		require.ErrorAs(t, err, &fe)
		require.Equal(t, tc.field, fe.Field)
	}
	rec, err := b.store.Get(ctx, "z0")
	require.NoError(t, err)
	require.Equal(t, notify.StateDead, rec.State, "neither replayed nor purged")
	epoch := time.Unix(0, 0)
	matched, _, err := b.store.Purge(ctx, store.DeadFilter{Topic: "jobs", Since: &epoch}, store.DeadOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 1, matched, "the epoch itself is a bound")
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Every one dies in the same millisecond (the test's clock stands
	// still), so the pages part entries of one score, in one shard.
	for _, tc := range []struct{ dead, limit int }{{25, 10}, {300, 1}, {store.MaxBatch, store.MaxBatch}} {
		t.Run(fmt.Sprintf("ListPages%dBy%d", tc.dead, tc.limit), func(t *testing.T) {
			t.Parallel()
			b := setup(t, store.Config{Shards: 1})
			var ids []string
			for i := range tc.dead {
				ids = append(ids, fmt.Sprintf("d%03d", i))
			}
			killAll(t, b, ids...)
			seen := map[string]bool{}
			cursor := ""
			for pages := 0; ; pages++ {
				require.LessOrEqual(t, pages, tc.dead/tc.limit)
				page, next, err := b.store.ListDead(ctx, "", tc.limit, cursor)
				require.NoError(t, err)
				for _, n := range page {
					require.False(t, seen[n.ID], "listed twice: %s", n.ID)
					require.Equal(t, notify.StateDead, n.State)
					seen[n.ID] = true
				}
				if next == "" {
					break
				}
				cursor = next
			}
			require.Len(t, seen, tc.dead)
			_, _, err := b.store.ListDead(ctx, "", 10, "garbage")
			require.Error(t, err)
		})
	}

	t.Run("ReplayByIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		killAll(t, b, "a", "b", "c")
		matched, replayed, err := b.store.Replay(ctx, store.DeadFilter{IDs: []string{"a", "b", "unknown"}}, store.DeadOptions{Reset: true, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, [2]int{2, 0}, [2]int{matched, replayed}, "dry run counts only")
		matched, replayed, err = b.store.Replay(ctx, store.DeadFilter{IDs: []string{"a", "b", "unknown"}}, store.DeadOptions{Reset: true})
		require.NoError(t, err)
		require.Equal(t, [2]int{2, 2}, [2]int{matched, replayed})
		items := b.reserveAll(t)
		require.Len(t, items, 2)
		for _, n := range items {
			require.Equal(t, 0, n.Attempts, "reset_attempts starts the array again")
		}
		st, err := b.store.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, store.TopicStats{Reserved: 2, Dead: 1, FailedAttemptsTotal: 3}, st["jobs"])
	})

	t.Run("ReplayByTopicAndRange", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		killAll(t, b, "old")
		b.clock.Advance(time.Millisecond)
		since := b.clock.Now()
		killAll(t, b, "new")
		matched, replayed, err := b.store.Replay(ctx, store.DeadFilter{Topic: "jobs", Since: &since}, store.DeadOptions{})
		require.NoError(t, err)
		require.Equal(t, [2]int{1, 1}, [2]int{matched, replayed})
		items := b.reserveAll(t)
		require.Len(t, items, 1)
		require.Equal(t, "new", items[0].ID)
		require.Equal(t, 1, items[0].Attempts, "without reset the attempt count stays")
	})

	t.Run("Purge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		killAll(t, b, "a", "b")
		matched, purged, err := b.store.Purge(ctx, store.DeadFilter{Topic: "jobs"}, store.DeadOptions{})
		require.NoError(t, err)
		require.Equal(t, [2]int{2, 2}, [2]int{matched, purged})
		_, err = b.store.Get(ctx, "a")
		require.ErrorIs(t, err, notify.ErrNotFound)
		st, _ := b.store.Stats(ctx)
		require.Zero(t, st["jobs"].Dead)
	})

	t.Run("FilterNamesField", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		_, _, err := b.store.Replay(ctx, store.DeadFilter{}, store.DeadOptions{})
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "topic", fe.Field)
	})
}

func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Retention: 50 * time.Millisecond})
	killAll(t, b, "dead")
	b.enqueue(t, b.newNotification(t, "done", 0, 0))
	n := b.reserveAll(t)[0]
	_, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, n, time.Time{})})
	require.NoError(t, err)
	b.enqueue(t, b.newNotification(t, "gone", time.Hour, 0))
	_, err = b.store.Cancel(ctx, "gone")
	require.NoError(t, err)

	b.clock.Advance(49 * time.Millisecond)
	deleted, _, err := b.store.Sweep(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, deleted, "kept while within retention")
	b.clock.Advance(time.Millisecond)
	deleted, _, err = b.store.Sweep(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 2, deleted)
	for _, id := range []string{"done", "gone"} {
		_, err = b.store.Get(ctx, id)
		require.ErrorIs(t, err, notify.ErrNotFound, id)
	}
	_, err = b.store.Get(ctx, "dead")
	require.NoError(t, err, "dead records stay until replayed or purged")
}

// TestRetentionOfChangedRecords: the records one finish call acknowledged
// expire together, but one replaced since is kept at that time: while it
// waits again, and, once it has succeeded again, until its own retention
// has passed. A record finished before finished entries held batches (an
// entry that is a bare id) expires as it did.
func TestRetentionOfChangedRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{Retention: 50 * time.Millisecond})
	ack := func(want int) {
		t.Helper()
		var fs []store.Finish
		for _, n := range b.reserveAll(t) {
			fs = append(fs, b.finish(notify.ActionAck, n, time.Time{}))
		}
		require.Len(t, fs, want)
		errs, err := b.store.Finish(ctx, fs)
		require.NoError(t, err)
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	for _, id := range []string{"a", "b", "c", "d", "old"} {
		b.enqueue(t, b.newNotification(t, id, 0, 0))
	}
	ack(5)
	// "old" as an earlier version wrote it: its own entry, its bare id.
	client := server.Client(t)
	var moved bool
	iter := client.Scan(ctx, 0, b.store.Namespace()+":*:finished", 100).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		entries, err := client.ZRangeWithScores(ctx, key, 0, -1).Result()
		require.NoError(t, err)
		for _, e := range entries {
			ua, ids, _ := strings.Cut(e.Member.(string), "|")
			require.NotEmpty(t, ua, "an entry names its finish's time")
			if rest := strings.Fields(ids); slices.Contains(rest, "old") {
				rest = slices.DeleteFunc(rest, func(id string) bool { return id == "old" })
				require.NoError(t, client.ZRem(ctx, key, e.Member).Err())
				entry := []redis.Z{{Score: e.Score, Member: "old"}}
				if len(rest) > 0 {
					entry = append(entry, redis.Z{Score: e.Score, Member: ua + "|" + strings.Join(rest, " ")})
				}
				require.NoError(t, client.ZAdd(ctx, key, entry...).Err())
				moved = true
			}
		}
	}
	require.NoError(t, iter.Err())
	require.True(t, moved)

	b.clock.Advance(10 * time.Millisecond)
	_, status, err := b.store.Enqueue(ctx, b.newNotification(t, "b", time.Hour, 0), true)
	require.NoError(t, err)
	require.Equal(t, store.Replaced, status, "b waits again, an hour")
	_, status, err = b.store.Enqueue(ctx, b.newNotification(t, "c", 0, 0, time.Second), true)
	require.NoError(t, err)
	require.Equal(t, store.Replaced, status)
	b.clock.Advance(10 * time.Millisecond)
	ack(1) // c succeeds again

	b.clock.Advance(30 * time.Millisecond) // the first finish's retention has passed
	deleted, _, err := b.store.Sweep(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 3, deleted, "a, d and old")
	for _, id := range []string{"a", "d", "old"} {
		_, err = b.store.Get(ctx, id)
		require.ErrorIs(t, err, notify.ErrNotFound, id)
	}
	got, err := b.store.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, got.State)
	got, err = b.store.Get(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, notify.StateSucceeded, got.State, "kept until its own retention")

	b.clock.Advance(19 * time.Millisecond)
	deleted, _, err = b.store.Sweep(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, deleted)
	b.clock.Advance(time.Millisecond)
	deleted, _, err = b.store.Sweep(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, deleted)
	_, err = b.store.Get(ctx, "c")
	require.ErrorIs(t, err, notify.ErrNotFound)
	_, err = b.store.Get(ctx, "b")
	require.NoError(t, err, "b still waits")
}

// TestSweepGoesOnPastChangedRecords: a sweep whose entries all name
// records replaced since deletes nothing, yet says more may be due, so that
// the dispatcher's sweep does not stop before the records behind them.
func TestSweepGoesOnPastChangedRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One shard, so that both entries are due in the same sweep call.
	b := setup(t, store.Config{Shards: 1, Retention: 50 * time.Millisecond})
	ack := func(id string) {
		t.Helper()
		b.enqueue(t, b.newNotification(t, id, 0, 0))
		got := b.reserveAll(t)
		require.Len(t, got, 1)
		b.finishOne(t, b.finish(notify.ActionAck, got[0], time.Time{}))
	}
	ack("x")
	b.clock.Advance(10 * time.Millisecond)
	_, status, err := b.store.Enqueue(ctx, b.newNotification(t, "x", time.Hour, 0), true)
	require.NoError(t, err)
	require.Equal(t, store.Replaced, status, "x waits again, an hour")
	ack("y")
	b.clock.Advance(time.Minute) // both finished entries are due

	deleted, more, err := b.store.Sweep(ctx, 1)
	require.NoError(t, err)
	require.Zero(t, deleted, "x's entry: x was replaced since")
	require.True(t, more, "y's entry is due behind it")
	deleted, _, err = b.store.Sweep(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 1, deleted)
	deleted, more, err = b.store.Sweep(ctx, 1)
	require.NoError(t, err)
	require.Zero(t, deleted)
	require.False(t, more)

	_, err = b.store.Get(ctx, "y")
	require.ErrorIs(t, err, notify.ErrNotFound)
	got, err := b.store.Get(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, got.State)
}

// TestReadOnlyStoreWhenACountIsRecordedLater: a read-only store opened on
// a namespace nothing has recorded yet reads it with the count recording
// would choose (1 on a single Redis). Once a process configured with
// another count records it and enqueues, the reader does not read the
// wrong shards, missing what that process stored: it says to open it
// again, and a reader opened afterwards finds everything.
func TestReadOnlyStoreWhenACountIsRecordedLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := server.Client(t)
	ns := redistest.Namespace(t)
	reader, err := store.New(&store.Config{Client: client, Namespace: ns, ReadOnly: true, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	stats, err := reader.Stats(ctx)
	require.NoError(t, err)
	require.Empty(t, stats)

	writer, err := store.New(&store.Config{Client: client, Namespace: ns, Shards: 4, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	var ids []string
	for i := range 8 {
		id := "n" + strconv.Itoa(i)
		_, _, err := writer.Enqueue(ctx, heraldtest.Notification(t, id, time.Now()), false)
		require.NoError(t, err)
		ids = append(ids, id)
	}

	later, err := store.New(&store.Config{Client: client, Namespace: ns, ReadOnly: true, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	for _, id := range ids {
		_, err := later.Get(ctx, id)
		require.NoError(t, err, "a reader opened after the count was recorded finds %s", id)
	}
	_, err = reader.Get(ctx, ids[0])
	require.ErrorContains(t, err, "was read with 1 shards before a count was recorded, and 4 has been recorded since: open the store again")
	_, err = reader.Stats(ctx)
	require.ErrorContains(t, err, "open the store again")
}

// TestShardCount opens namespaces on a single Redis: a new one records one
// shard, one written before counts were recorded keeps 16, and a store
// configured with another count than the recorded one refuses to work.
func TestShardCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(t *testing.T, ns string, shards int) *store.Store {
		t.Helper()
		st, err := store.New(&store.Config{Client: server.Client(t), Namespace: ns, Shards: shards, Logger: heraldtest.Logger(t)})
		require.NoError(t, err)
		return st
	}

	t.Run("NewNamespace", func(t *testing.T) {
		t.Parallel()
		ns := redistest.Namespace(t)
		// Producers and workers starting together agree on one count.
		counts := make(chan int, 4)
		for range cap(counts) {
			go func() {
				n, err := open(t, ns, 0).Shards(ctx)
				assert.NoError(t, err)
				counts <- n
			}()
		}
		for range cap(counts) {
			require.Equal(t, store.ShardsSingleDefault, <-counts)
		}
		st := open(t, ns, 0)
		n := heraldtest.Notification(t, "a", time.Now())
		_, _, err := st.Enqueue(ctx, n, false)
		require.NoError(t, err)
		got, err := open(t, ns, 1).Get(ctx, "a")
		require.NoError(t, err, "an explicit count equal to the recorded one")
		require.Equal(t, "a", got.ID)

		_, err = open(t, ns, 4).Get(ctx, "a")
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "shards", fe.Field)
		require.ErrorContains(t, err, "has 1 shards")
	})

	t.Run("WrittenBeforeCounts", func(t *testing.T) {
		t.Parallel()
		ns := redistest.Namespace(t)
		// A record of the last version, in one of its 16 shards.
		old := open(t, ns, store.ShardsDefault)
		n := heraldtest.Notification(t, "legacy", time.Now())
		_, _, err := old.Enqueue(ctx, n, false)
		require.NoError(t, err)
		client := server.Client(t)
		require.NoError(t, client.Del(ctx, ns+":meta").Err())

		st := open(t, ns, 0)
		count, err := st.Shards(ctx)
		require.NoError(t, err)
		require.Equal(t, store.ShardsDefault, count)
		got, err := st.Get(ctx, "legacy")
		require.NoError(t, err)
		require.Equal(t, "legacy", got.ID)
		shards, err := client.HGet(ctx, ns+":meta", "shards").Result()
		require.NoError(t, err)
		require.Equal(t, "16", shards, "recorded now")
	})

	// A tool that only reads, pointed at a namespace nothing ever used
	// (the wrong Redis, a misspelt namespace), finds it empty and leaves
	// nothing there; pointed at one in use, it reads it by its count,
	// recorded or not.
	t.Run("ReadOnly", func(t *testing.T) {
		t.Parallel()
		client := server.Client(t)
		openRead := func(ns string) *store.Store {
			st, err := store.New(&store.Config{Client: client, Namespace: ns, ReadOnly: true, Logger: heraldtest.Logger(t)})
			require.NoError(t, err)
			return st
		}
		keysOf := func(ns string) []string {
			keys, err := client.Keys(ctx, ns+":*").Result()
			require.NoError(t, err)
			return keys
		}

		unused := redistest.Namespace(t)
		reader := openRead(unused)
		_, err := reader.Get(ctx, "a")
		require.ErrorIs(t, err, notify.ErrNotFound)
		stats, err := reader.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, stats)
		dead, _, err := reader.ListDead(ctx, "", 10, "")
		require.NoError(t, err)
		require.Empty(t, dead)
		require.Empty(t, keysOf(unused), "nothing written")

		used := redistest.Namespace(t)
		_, _, err = open(t, used, 4).Enqueue(ctx, heraldtest.Notification(t, "a", time.Now()), false)
		require.NoError(t, err)
		got, err := openRead(used).Get(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, "a", got.ID)

		legacy := redistest.Namespace(t)
		_, _, err = open(t, legacy, store.ShardsDefault).Enqueue(ctx, heraldtest.Notification(t, "legacy", time.Now()), false)
		require.NoError(t, err)
		require.NoError(t, client.Del(ctx, legacy+":meta").Err())
		got, err = openRead(legacy).Get(ctx, "legacy")
		require.NoError(t, err)
		require.Equal(t, "legacy", got.ID)
		require.NotContains(t, keysOf(legacy), legacy+":meta", "the count is left unrecorded")
	})

	// Redis restarted without its data while a process kept writing with
	// the count it had read: the next process to open the namespace, and
	// the writer's own maintenance, agree with it.
	lose := func(t *testing.T, ns string) {
		t.Helper()
		client := server.Client(t)
		for it := client.Scan(ctx, 0, ns+":*", 0).Iterator(); it.Next(ctx); {
			require.NoError(t, client.Del(ctx, it.Val()).Err())
		}
	}
	t.Run("LostWithRedis", func(t *testing.T) {
		t.Parallel()
		ns := redistest.Namespace(t)
		st := open(t, ns, 0)
		_, _, err := st.Enqueue(ctx, heraldtest.Notification(t, "before", time.Now()), false)
		require.NoError(t, err)
		lose(t, ns)
		_, _, err = st.Enqueue(ctx, heraldtest.Notification(t, "after", time.Now()), false)
		require.NoError(t, err)
		other := open(t, ns, 0)
		count, err := other.Shards(ctx)
		require.NoError(t, err)
		require.Equal(t, store.ShardsSingleDefault, count, "one shard's records are no older layout's")
		got, err := other.Get(ctx, "after")
		require.NoError(t, err)
		require.Equal(t, "after", got.ID)
	})
	t.Run("RecordedAgainBySweep", func(t *testing.T) {
		t.Parallel()
		ns := redistest.Namespace(t)
		st := open(t, ns, 4)
		_, err := st.Shards(ctx)
		require.NoError(t, err)
		lose(t, ns)
		var ids []string
		for i := range 20 {
			ids = append(ids, fmt.Sprint("n", i))
			_, _, err := st.Enqueue(ctx, heraldtest.Notification(t, ids[i], time.Now()), false)
			require.NoError(t, err)
		}
		_, _, err = st.Sweep(ctx, 10)
		require.NoError(t, err)
		other := open(t, ns, 0)
		for _, id := range ids {
			got, err := other.Get(ctx, id)
			require.NoError(t, err, "a store opened after the loss reads what was written since")
			require.Equal(t, id, got.ID)
		}
	})
}
