package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// snapshot returns every key of ns with its DUMP, to show a call changed
// nothing, byte for byte.
func snapshot(t *testing.T, c *redis.Client, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, ns+":*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := c.Dump(ctx, iter.Val()).Result()
		require.NoError(t, err)
		out[iter.Val()] = v
	}
	require.NoError(t, iter.Err())
	return out
}

// setupFull opens a store with shards on a Redis of the test's own, which
// the test fills with redistest.Fill.
func setupFull(t *testing.T, shards int) (*testBundle, *redis.Client) {
	t.Helper()
	c := redistest.Start(t, redistest.Options{}).Client(t)
	return setup(t, store.Config{Client: c, Shards: shards}), c
}

// TestEnqueueWhenRedisIsFull: a Redis at maxmemory refuses every kind of
// enqueue with notify.ErrOutOfMemory, which the API answers as 503 naming
// the cause, and the refused call leaves Redis as it was, byte for byte:
// no record without its queue entry, no stub without its record. Once the
// limit is lifted the same enqueues succeed.
func TestEnqueueWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, shards := range []int{1, 4} {
		t.Run("Shards"+strconv.Itoa(shards), func(t *testing.T) {
			t.Parallel()
			b, c := setupFull(t, shards)
			b.enqueue(t, b.newNotification(t, "old", time.Hour, 0))
			b.enqueue(t, heraldtest.Notification(t, "first-in-line", b.clock.Now(), heraldtest.OrderKey("k")))
			lift := redistest.Fill(t, c)
			before := snapshot(t, c, b.store.Namespace())

			enqueues := map[string]func() error{
				"Single": func() error {
					_, _, err := b.store.Enqueue(ctx, b.newNotification(t, "new", 0, 0), false)
					return err
				},
				"SameIDAndContent": func() error {
					_, _, err := b.store.Enqueue(ctx, b.newNotification(t, "old", time.Hour, 0), false)
					return err
				},
				"Batch": func() error {
					_, err := b.store.EnqueueBatch(ctx, []store.EnqueueRequest{
						{Notification: b.newNotification(t, "b1", 0, 0)}, {Notification: b.newNotification(t, "b2", time.Minute, 0)}})
					return err
				},
				"Ordered": func() error {
					_, _, err := b.store.Enqueue(ctx, heraldtest.Notification(t, "second-in-line", b.clock.Now(), heraldtest.OrderKey("k")), false)
					return err
				},
			}
			for name, enqueue := range enqueues {
				require.ErrorIs(t, enqueue(), notify.ErrOutOfMemory, name)
				require.Equal(t, before, snapshot(t, c, b.store.Namespace()), "%s changed Redis", name)
			}

			lift()
			for name, enqueue := range enqueues {
				require.NoError(t, enqueue(), name)
			}
		})
	}
}

// TestDispatchWhenRedisIsFull: reservations and their outcomes do not
// wait for memory, since an outcome that could not be recorded would
// have its attempt made again: every attempt reserved while Redis is full
// is recorded, once, and so are its start, a cancel and a reap. (Their scripts delete
// before they write, and Redis lets a script that has written go on.)
func TestDispatchWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := setupFull(t, 4)
	for _, id := range []string{"ok", "retry", "dies", "expires"} {
		b.enqueue(t, b.newNotification(t, id, 0, 0, time.Minute))
	}
	b.enqueue(t, b.newNotification(t, "cancelled", time.Hour, 0))
	b.clock.Advance(time.Millisecond)
	redistest.Fill(t, c)

	// Reserved ahead of the workers, each is started before its attempt.
	got, _, err := b.store.ReserveAhead(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, b.store), store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, got, 4)
	var items []store.Finish
	var expires *notify.Notification
	for _, n := range got {
		require.True(t, store.Ahead(n))
		b.store.Start(n)
		switch n.ID {
		case "ok":
			items = append(items, b.finish(notify.ActionAck, n, time.Time{}))
		case "retry":
			items = append(items, b.finish(notify.ActionRetry, n, b.clock.Now().Add(time.Minute)))
		case "dies":
			items = append(items, b.finish(notify.ActionDead, n, time.Time{}))
		default:
			expires = n
		}
	}
	errs, err := b.store.Finish(ctx, items)
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil, nil}, errs)
	_, err = b.store.Cancel(ctx, "cancelled")
	require.NoError(t, err)

	require.NoError(t, b.store.Started(ctx), "the starts are recorded")
	b.clock.Advance(time.Hour)
	expired, err := b.store.Expired(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, expires.ID, expired[0].ID)
	errs, err = b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionRetry, expired[0], b.clock.Now())})
	require.NoError(t, err)
	require.Equal(t, []error{nil}, errs)

	for id, want := range map[string]notify.State{"ok": notify.StateSucceeded, "retry": notify.StateScheduled,
		"dies": notify.StateDead, "expires": notify.StateScheduled, "cancelled": notify.StateCancelled} {
		n, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, n.State, id)
		require.Len(t, n.History, map[bool]int{true: 0, false: 1}[id == "cancelled"], id)
	}
}

// TestMaintenanceWhenRedisIsFull: the calls that free memory work while
// Redis is full, so that an operator can make room: a purge of dead
// letters, and the sweep of finished records past their retention, which
// reports success and whether more are left rather than failing.
func TestMaintenanceWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := setupFull(t, 4)
	for i := range 6 {
		b.enqueue(t, b.newNotification(t, "n"+strconv.Itoa(i), 0, 0))
	}
	b.clock.Advance(time.Millisecond)
	var items []store.Finish
	for i, n := range b.reserveAll(t) {
		items = append(items, b.finish([]notify.Action{notify.ActionAck, notify.ActionDead}[i%2], n, time.Time{}))
	}
	_, err := b.store.Finish(ctx, items)
	require.NoError(t, err)
	redistest.Fill(t, c)

	matched, purged, err := b.store.Purge(ctx, store.DeadFilter{Topic: "jobs"}, store.DeadOptions{})
	require.NoError(t, err)
	require.Equal(t, [2]int{3, 3}, [2]int{matched, purged})

	b.clock.Advance(store.RetentionDefault + time.Minute)
	deleted, more, err := b.store.Sweep(ctx, 2)
	require.NoError(t, err, "the sweep frees memory: a full Redis must not fail it")
	require.Positive(t, deleted)
	for more {
		var n int
		n, more, err = b.store.Sweep(ctx, 2)
		require.NoError(t, err)
		deleted += n
	}
	require.Equal(t, 3, deleted)
}

// TestQuarantineWhenRedisIsFull: a notification whose record cannot be
// decoded is moved aside while Redis is full too, rather than left
// reserved, failing again at each reap and logged each time.
func TestQuarantineWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := setupFull(t, 1)
	b.enqueue(t, b.newNotification(t, "a", 0, 0))
	b.enqueue(t, b.newNotification(t, "bad", 0, 0))
	b.clock.Advance(time.Millisecond)
	job, quarantine := b.store.Namespace()+":{0}:job", b.store.Namespace()+":{0}:quarantine"
	require.NoError(t, c.HSet(ctx, job, "bad", "d u 1000 jobs\nnot a body").Err())
	redistest.Fill(t, c)

	got := b.reserveAll(t)
	require.Len(t, got, 1)
	require.Equal(t, "a", got[0].ID)
	require.EqualValues(t, 1, b.store.Quarantined())
	why, err := c.HGet(ctx, quarantine, "bad").Result()
	require.NoError(t, err)
	require.Contains(t, why, "not a body")
	_, err = b.store.Get(ctx, "bad")
	require.ErrorIs(t, err, notify.ErrNotFound)
}

// TestResumeWhenRedisIsFull: a resume ends its pause and makes what was
// parked under it due while Redis is full, as it takes nothing more: a
// resume that ended the pause but left its notifications parked, and
// answered that Redis refused it, would leave them to a dispatcher's
// stray sweep, which a full Redis refuses too.
func TestResumeWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := setupFull(t, 4)
	for _, id := range []string{"a", "b", "c"} {
		b.enqueue(t, b.newNotification(t, id, 0, 0, time.Minute))
	}
	require.NoError(t, b.store.Pause(ctx, store.PauseTopic, "jobs"))
	b.park(t, 3)
	redistest.Fill(t, c)

	moved, err := b.store.Resume(ctx, store.PauseTopic, "jobs")
	require.NoError(t, err)
	require.Equal(t, 3, moved)
	require.Len(t, b.reserveAll(t), 3)
}

// TestEndpointDisabledWhenRedisIsFull: an endpoint whose attempts have
// failed for its disable_after is disabled while Redis is full too, so
// that its notifications wait parked rather than burn their attempts: the
// disable takes a field or two, and a refusal would leave them to be
// attempted, and to die, for as long as Redis stays full. A streak that
// begins while Redis is full counts too.
func TestEndpointDisabledWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := setupFull(t, 4)
	_, err := b.store.Shards(ctx) // a namespace opened before, as one in use is
	require.NoError(t, err)
	redistest.Fill(t, c)

	disabled, err := b.store.EndpointFailed(ctx, "merchant", time.Minute)
	require.NoError(t, err, "a streak begins")
	require.False(t, disabled)
	b.clock.Advance(30 * time.Second)
	disabled, err = b.store.EndpointFailed(ctx, "merchant", time.Minute)
	require.NoError(t, err)
	require.False(t, disabled)
	b.clock.Advance(time.Minute)
	disabled, err = b.store.EndpointFailed(ctx, "merchant", time.Minute)
	require.NoError(t, err)
	require.True(t, disabled)
	paused, err := b.store.IsPaused(ctx, store.PauseDisabled, "merchant")
	require.NoError(t, err)
	require.True(t, paused)
	h, err := b.store.EndpointHealth(ctx, "merchant")
	require.NoError(t, err)
	require.NotNil(t, h.DisabledAt)
}

// TestEndpointPutWhenRedisIsFull: a registration a full Redis refuses
// changes nothing, as the API's 503 says, the failing streak that decides
// when disable_after disables the endpoint included, though the put ends
// the streak before it writes the endpoint.
func TestEndpointPutWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := setupFull(t, 1)
	_, err := b.store.PutEndpoint(ctx, "merchant", &endpoint.Endpoint{URL: "https://m.example/notify", DisableAfter: notify.Duration(time.Hour)})
	require.NoError(t, err)
	_, err = b.store.EndpointFailed(ctx, "merchant", time.Hour)
	require.NoError(t, err)
	before, err := b.store.EndpointHealth(ctx, "merchant")
	require.NoError(t, err)
	require.NotNil(t, before.FailingSince)
	redistest.Fill(t, c)

	// Without disable_after, which would end the streak had it gone through.
	_, err = b.store.PutEndpoint(ctx, "merchant", &endpoint.Endpoint{URL: "https://m.example/notify"})
	require.ErrorIs(t, err, notify.ErrOutOfMemory)
	after, err := b.store.EndpointHealth(ctx, "merchant")
	require.NoError(t, err)
	require.Equal(t, before, after)
	got, err := b.store.Endpoint(ctx, "merchant")
	require.NoError(t, err)
	require.Equal(t, notify.Duration(time.Hour), got.DisableAfter)
}

// TestGiveBackWhenRedisIsFull: what a reservation whose answer was lost
// holds is given back while Redis is full, as the rest of a reservation's
// life is: its mark, written first, takes a few bytes Redis would refuse
// as a script's first write, and a refused give-back would leave the
// notification reserved for no one until its ttr.
func TestGiveBackWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := setupFull(t, 1)
	b.enqueue(t, b.newNotification(t, "a", 0, 0))
	lost := store.LostReservation{Queue: store.PullQueue("jobs"), Shards: []int{0}, At: b.clock.Now()}
	got := b.reserveAll(t)
	require.Len(t, got, 1)
	lost.Receipt = strings.TrimSuffix(got[0].Receipt, "0")
	redistest.Fill(t, c)

	given, err := b.store.GiveBack(ctx, lost)
	require.NoError(t, err)
	require.Equal(t, 1, given)
	again := b.reserveAll(t)
	require.Len(t, again, 1, "due again")
	require.Zero(t, again[0].Attempts)
}

// TestDeadRetentionWhenRedisIsFull: the sweep deletes the dead letters past
// DeadRetention while Redis is full, as it does finished records, since
// that is what frees the memory of a deployment whose receivers stay
// broken.
func TestDeadRetentionWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.Start(t, redistest.Options{}).Client(t)
	b := setup(t, store.Config{Client: c, Shards: 4, DeadRetention: time.Hour})
	var dead []string
	for i := range 6 {
		id := "d" + strconv.Itoa(i)
		b.enqueue(t, heraldtest.Notification(t, id, b.clock.Now(), heraldtest.Backoff(0), heraldtest.OrderKey(id)))
		dead = append(dead, id)
	}
	require.Len(t, b.kill(t, "jobs"), 6)
	redistest.Fill(t, c)

	b.clock.Advance(time.Hour)
	require.Equal(t, 6, b.sweepAll(t), "the sweep frees memory: a full Redis must not fail it")
	for _, id := range dead {
		_, err := b.store.Get(ctx, id)
		require.ErrorIs(t, err, notify.ErrNotFound, id)
	}
	b.requireDeadListed(t, "")
	stats, err := b.store.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, stats["jobs"].Dead)
}

// TestSignOutWhenRedisIsFull: a dashboard session is signed out while Redis
// is full, since an operator who cannot sign out keeps a session open on
// every API process until it ends.
func TestSignOutWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := setupFull(t, 1)
	b.enqueue(t, b.newNotification(t, "a", 0, 0))
	redistest.Fill(t, c)

	require.NoError(t, b.store.SignOut(ctx, "session", time.Minute))
	out, err := b.store.SignedOut(ctx, "session")
	require.NoError(t, err)
	require.True(t, out)
}

// TestSignOutWhenRedisIsFullWithWaitReplicas: a sign-out goes through a
// full Redis when every write waits for a replica too, and a ttl of a
// millisecond and a half is kept as at least one.
func TestSignOutWhenRedisIsFullWithWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t, redistest.Options{})
	redistest.StartReplica(t, master)
	c := master.Client(t)
	st, err := store.New(&store.Config{Client: c, Namespace: redistest.Namespace(t), WaitReplicas: 1, WaitTimeout: 2 * time.Second, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	_, err = st.Shards(ctx)
	require.NoError(t, err)
	redistest.Fill(t, c)

	require.NoError(t, st.SignOut(ctx, "session", time.Hour))
	out, err := st.SignedOut(ctx, "session")
	require.NoError(t, err)
	require.True(t, out)
	require.NoError(t, st.SignOut(ctx, "brief", 1500*time.Microsecond))
}

// TestSignOutWhenAClusterIsFull: the same on a Cluster whose master of the
// session's slot is full.
func TestSignOutWhenAClusterIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	st, err := store.New(&store.Config{Client: cc, Namespace: redistest.Namespace(t), Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	_, err = st.Shards(ctx)
	require.NoError(t, err)
	// Fill cannot fill a master of a Cluster (its fillers' slots live
	// elsewhere): a limit far below what each uses refuses every write
	// that may grow memory all the same.
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.ConfigSet(ctx, "maxmemory", "1").Err()
	}))
	require.ErrorContains(t, cc.Set(ctx, "{x}probe", "1", 0).Err(), "OOM")
	require.NoError(t, st.SignOut(ctx, "session", time.Hour))
	out, err := st.SignedOut(ctx, "session")
	require.NoError(t, err)
	require.True(t, out)
}
