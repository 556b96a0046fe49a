package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestDueTimes checks that a notification is due at the instant asked for,
// rounded up to the millisecond and never earlier, at the edges of what the
// store holds.
func TestDueTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		sendAt time.Time
		// due is when the notification must be reserved, first: not a
		// millisecond earlier.
		due time.Time
	}{
		{"Nanosecond", time.Date(2026, 3, 1, 12, 0, 0, 1, time.UTC), time.Date(2026, 3, 1, 12, 0, 0, int(time.Millisecond), time.UTC)},
		{"SubMillisecond", time.Date(2026, 3, 1, 12, 0, 0, 999_999, time.UTC), time.Date(2026, 3, 1, 12, 0, 0, int(time.Millisecond), time.UTC)},
		{"WholeMillisecond", time.Date(2026, 3, 1, 12, 0, 0, int(2*time.Millisecond), time.UTC), time.Date(2026, 3, 1, 12, 0, 0, int(2*time.Millisecond), time.UTC)},
		{"Epoch", time.Unix(0, 0).UTC(), time.Unix(0, 0).UTC()},
		{"Year2300", time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store.Config{})
			got := b.enqueue(t, heraldtest.Notification(t, "n", b.clock.Now(), heraldtest.SendAt(tc.sendAt)))
			require.Equal(t, tc.due, *got.NextAttemptAt)
			rec, err := b.store.Get(ctx, "n")
			require.NoError(t, err)
			require.Equal(t, tc.due, *rec.NextAttemptAt, "Get reads the same due time")
			if b.clock.Now().Before(tc.due) {
				b.clock.Advance(tc.due.Sub(b.clock.Now()) - time.Nanosecond)
				require.Empty(t, b.reserveAll(t), "not due a nanosecond before")
				b.clock.Advance(time.Nanosecond)
			}
			if tc.due.Year() > 2100 {
				return // the clock is not moved three centuries
			}
			items := b.reserveAll(t)
			require.Len(t, items, 1)
			require.Equal(t, tc.due, *items[0].NextAttemptAt)
		})
	}

	t.Run("OutOfRangeNamesTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t, store.Config{})
		n := heraldtest.Notification(t, "n", b.clock.Now())
		n.SendAt = time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)
		_, _, err := b.store.Enqueue(ctx, n, false)
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "send_at", fe.Field)
		_, err = b.store.Get(ctx, "n")
		require.ErrorIs(t, err, notify.ErrNotFound, "nothing half-written")
	})
}

// TestConcurrentEnqueuesOutliveCancelledCallers has a third of many
// concurrent enqueuers give up at once: the others all get their answer, what
// was answered as stored is stored, and later enqueues still go through.
func TestConcurrentEnqueuesOutliveCancelledCallers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.New(&store.Config{Client: srv.Client(t), Shards: 4})
	require.NoError(t, err)

	const n = 300
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx := context.Background()
			if i%3 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			_, _, errs[i] = st.Enqueue(ctx, heraldtest.Notification(t, fmt.Sprintf("n%d", i), time.Now()), false)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%3 != 0 {
			require.NoError(t, err, "n%d", i)
		}
		if err == nil {
			_, err := st.Get(context.Background(), fmt.Sprintf("n%d", i))
			require.NoError(t, err, "n%d was answered as stored", i)
		}
	}
	_, status, err := st.Enqueue(context.Background(), heraldtest.Notification(t, "after", time.Now()), false)
	require.NoError(t, err)
	require.Equal(t, store.Created, status)
}

// TestConcurrentEnqueuesShareScripts enqueues from many goroutines at once:
// each gets its own answer, and the store writes them in fewer scripts
// than notifications.
func TestConcurrentEnqueuesShareScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	client := srv.Client(t)
	st, err := store.New(&store.Config{Client: client, Shards: 4})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, client.ConfigResetStat(ctx).Err())

	const n = 200
	var wg sync.WaitGroup
	statuses := make([]store.EnqueueStatus, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("n%d", i)
			got, status, err := st.Enqueue(ctx, heraldtest.Notification(t, id, time.Now()), false)
			if err == nil && got.ID != id {
				err = fmt.Errorf("answer for %s went to %s", got.ID, id)
			}
			require.NoError(t, err)
			statuses[i] = status
		})
	}
	wg.Wait()
	for i, s := range statuses {
		require.Equal(t, store.Created, s, "n%d", i)
	}
	evals := commandCalls(t, client.Info(ctx, "commandstats").Val(), "evalsha") + commandCalls(t, client.Info(ctx, "commandstats").Val(), "eval")
	require.Less(t, evals, int64(n), "concurrent enqueues share scripts")
	t.Logf("%d concurrent enqueues ran %d scripts", n, evals)
}

// TestSteadyProducersShareScripts has 8 producers each making single
// enqueues one after another, as an API under steady load does: their
// enqueues keep sharing scripts. Then one caller alone makes as many: each
// of its enqueues is written at once, one script each.
func TestSteadyProducersShareScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	client := srv.Client(t)
	st, err := store.New(&store.Config{Client: client})
	require.NoError(t, err)
	ctx := context.Background()
	scripts := func() int64 {
		info := client.Info(ctx, "commandstats").Val()
		return commandCalls(t, info, "evalsha") + commandCalls(t, info, "eval")
	}
	// The first enqueue loads the scripts; count from after it.
	_, _, err = st.Enqueue(ctx, heraldtest.Notification(t, "first", time.Now()), false)
	require.NoError(t, err)

	const producers, each = 8, 100
	before := scripts()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				_, status, err := st.Enqueue(ctx, heraldtest.Notification(t, fmt.Sprintf("p%d-%d", p, i), time.Now()), false)
				require.NoError(t, err)
				require.Equal(t, store.Created, status)
			}
		})
	}
	wg.Wait()
	shared := scripts() - before
	require.Less(t, shared, int64(producers*each/2), "steady producers write at least 2 to a script on average")

	before = scripts()
	for i := range each {
		_, status, err := st.Enqueue(ctx, heraldtest.Notification(t, fmt.Sprintf("alone-%d", i), time.Now()), false)
		require.NoError(t, err)
		require.Equal(t, store.Created, status)
	}
	require.Equal(t, int64(each), scripts()-before, "a lone caller's enqueues are written one by one")
	t.Logf("%d enqueues of %d steady producers ran %d scripts", producers*each, producers, shared)
}

// commandCalls reads a command's call count from INFO commandstats.
func commandCalls(t *testing.T, info, cmd string) int64 {
	t.Helper()
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		return n
	}
	return 0
}

// TestImport stores notifications brought over from another system: one
// with attempts already made continues at the next attempt; one that
// already failed for good lands in the dead-letter set with its last error,
// and replays like any other.
func TestImport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.Config{})
	retried := b.newNotification(t, "retried", 0, 0, time.Minute, time.Hour)
	archived := b.newNotification(t, "archived", 0, 0)
	last := notify.Attempt{Attempt: 3, StartedAt: b.clock.Now(), FinishedAt: b.clock.Now(), Outcome: notify.OutcomeRetry, Error: "500 from the merchant"}
	res, err := b.store.EnqueueBatch(ctx, []store.EnqueueRequest{
		{Notification: retried, Attempts: 2},
		{Notification: archived, Attempts: 4, Dead: &last},
	})
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
		require.Equal(t, store.Created, r.Status)
	}
	require.Equal(t, notify.StateDead, res[1].Notification.State)

	got := b.reserveAll(t)
	require.Len(t, got, 1, "the dead one is not handed out")
	require.Equal(t, "retried", got[0].ID)
	require.Equal(t, 2, got[0].Attempts, "the next attempt is the third")

	dead, _, err := b.store.ListDead(ctx, "jobs", 10, "")
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, 4, dead[0].Attempts)
	require.Equal(t, []notify.Attempt{last}, dead[0].History)
	_, replayed, err := b.store.Replay(ctx, store.DeadFilter{IDs: []string{"archived"}}, store.DeadOptions{Reset: true})
	require.NoError(t, err)
	require.Equal(t, 1, replayed)
	again := b.reserveAll(t)
	require.Len(t, again, 1)
	require.Equal(t, 0, again[0].Attempts)
}
