package store_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
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

// TestWaitReplicas checks acknowledged writes with redis.wait_replicas: with
// the replica up an enqueue, a reservation's finish and a cancel succeed;
// with the replica paused each fails with ErrNotReplicated within the
// timeout, and the Go client, the API and the CLI report nothing as done.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, replica, st := startReplicated(t, store.Config{WaitTimeout: 200 * time.Millisecond})

	_, status, err := st.Enqueue(ctx, heraldtest.Notification(t, "a", time.Now()), false)
	require.NoError(t, err)
	require.Equal(t, store.Created, status)
	got := reserveEventually(t, st, 1)
	errs, err := st.Finish(ctx, []store.Finish{{Notification: got[0], Action: notify.ActionAck,
		Attempt: notify.Attempt{Outcome: notify.OutcomeSuccess}}})
	require.NoError(t, err)
	require.Equal(t, []error{nil}, errs)

	replica.Pause()
	t.Cleanup(replica.Resume)
	start := time.Now()
	_, _, err = st.Enqueue(ctx, heraldtest.Notification(t, "b", time.Now()), false)
	require.ErrorIs(t, err, notify.ErrNotReplicated)
	require.Less(t, time.Since(start), 2*time.Second, "the wait is bounded by wait_timeout")
	_, err = st.Cancel(ctx, "b")
	require.ErrorIs(t, err, notify.ErrNotReplicated)

	replica.Resume()
	_, _, err = st.Enqueue(ctx, heraldtest.Notification(t, "c", time.Now()), false)
	require.NoError(t, err, "acknowledged again once the replica catches up")
}

// TestWaitTimeoutInMilliseconds: WAIT takes whole milliseconds, and WAIT n
// 0 waits for ever, so a wait_timeout under a millisecond is refused rather
// than made endless.
func TestWaitTimeoutInMilliseconds(t *testing.T) {
	t.Parallel()
	_, err := store.New(&store.Config{Client: server.Client(t), WaitReplicas: 1, WaitTimeout: 500 * time.Microsecond})
	require.ErrorContains(t, err, "wait_timeout must be at least 1ms")
}

// reserveEventually reserves from the pull queue of jobs until n
// notifications are handed out; due times are rounded up to the
// millisecond, so ones enqueued just now are due within one.
func reserveEventually(t *testing.T, st *store.Store, n int) []*notify.Notification {
	t.Helper()
	var got []*notify.Notification
	require.Eventually(t, func() bool {
		items, _, err := st.Reserve(context.Background(), store.PullQueue("jobs"), heraldtest.AllShards(t, st), store.MaxReserve)
		require.NoError(t, err)
		got = append(got, items...)
		return len(got) >= n
	}, 5*time.Second, time.Millisecond)
	return got
}

// TestLateRepliesRunScriptsOnce: when Redis answers a reservation later
// than the client's read timeout (here: stopped for half a second), the
// call fails, and its script runs once when Redis comes back. go-redis's
// own retries (3 by default) would send it again behind the first, and the
// caller would hear the later run's answer: an empty queue, while the first
// run had reserved what was due, for no one. What it reserved is then
// given back, unattempted: by Reserve itself once Redis answers, or, when
// Redis is still away, by the caller's GiveBack.
func TestLateRepliesRunScriptsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, client, st := lateReplyStore(t, func(o *redis.Options) { o.MaxRetries = 3 })
	require.NoError(t, client.ConfigResetStat(ctx).Err())

	srv.Pause()
	t.Cleanup(srv.Resume)
	resumed := time.AfterFunc(500*time.Millisecond, srv.Resume)
	defer resumed.Stop()
	items, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), 10)
	require.Error(t, err, "no answer within the read timeout, not an empty queue (%d items)", len(items))
	giveBackLost(t, st, err)

	n, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, n.State, "reserved once Redis was back, then given back")
	require.Zero(t, n.Attempts)
	require.Empty(t, n.History)
	stats, err := client.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	// The reservation's script alone pops the ready list.
	require.Contains(t, stats, "cmdstat_lpop:calls=1,", "the reservation's script ran once")
}

// TestReservationBehindAWritePause: a reservation whose script waits
// behind CLIENT PAUSE WRITE (as an operator's switchover pauses writes)
// past the client's read timeout fails, and leaves nothing reserved for no
// one once the pause ends: the notification is due and handed out when
// asked again, with no attempt counted. (Redis drops a paused command
// whose client hung up, and the give-back, whose reads a write pause lets
// through, finds nothing to give back.)
func TestReservationBehindAWritePause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, _, st := lateReplyStore(t, func(o *redis.Options) { o.MaxRetries = 1 })
	admin := srv.Client(t)
	require.NoError(t, admin.Do(ctx, "client", "pause", 1000, "write").Err())
	items, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), 10)
	require.Error(t, err, "no answer within the read timeout (%d items)", len(items))
	giveBackLost(t, st, err)
	require.NoError(t, admin.Do(ctx, "client", "unpause").Err())
	// Redis answers a write sent after the unpause once it has run what the
	// pause held, if anything.
	require.NoError(t, admin.Set(ctx, redistest.Namespace(t)+":after", "1", time.Minute).Err())

	n, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, n.State, "reserved for no one after the pause")
	require.Zero(t, n.Attempts)
	got, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "due, and handed out once asked again")
}

// TestReservationArrivingAfterItsGiveBack: a reservation whose request
// reaches Redis only after the caller gave up on it, and after the
// give-back looked for what it reserved and found nothing (a request held
// up on its way, as a stalled link's retransmission is), reserves nothing:
// the notification stays due, where it was left reserved for no one, to
// wait out its ttr and count an attempt never made.
func TestReservationArrivingAfterItsGiveBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	held := &heldWrite{}
	_, _, st := lateReplyStore(t, func(o *redis.Options) { o.Dialer = held.dial })

	held.armed.Store(true)
	items, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), 10)
	require.Error(t, err, "no answer within the read timeout (%d items)", len(items))
	var lost *store.ReserveError
	require.False(t, errors.As(err, &lost), "Redis answered the give-back: %v", err)
	held.release(t)

	n, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, n.State, "not reserved for no one")
	got, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "due, and handed out once asked again")
	require.Zero(t, got[0].Attempts)
}

// heldWrite is a dialer whose connections, once armed, keep the first
// script call written from Redis until release: the client takes it as
// sent, times out waiting for the answer and closes the connection, which
// stays open underneath for release to deliver the call late.
type heldWrite struct {
	armed atomic.Bool
	mu    sync.Mutex
	conn  net.Conn
	call  []byte
}

func (h *heldWrite) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &holdingConn{Conn: c, h: h}, nil
}

// release writes the held call to Redis and waits for its answer, so that
// the call has run when release returns.
func (h *heldWrite) release(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotNil(t, h.conn, "a script call was held")
	defer func() { _ = h.conn.Close() }()
	_, err := h.conn.Write(h.call)
	require.NoError(t, err)
	require.NoError(t, h.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = h.conn.Read(make([]byte, 1))
	require.NoError(t, err, "Redis answered the late call")
}

type holdingConn struct {
	net.Conn
	h       *heldWrite
	holding atomic.Bool
}

func (c *holdingConn) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("evalsha")) && c.h.armed.CompareAndSwap(true, false) {
		c.h.mu.Lock()
		c.h.conn, c.h.call = c.Conn, bytes.Clone(b)
		c.h.mu.Unlock()
		c.holding.Store(true)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// Close leaves a connection holding a call open for release.
func (c *holdingConn) Close() error {
	if c.holding.Load() {
		return nil
	}
	return c.Conn.Close()
}

// lateReplyStore opens a store on a Redis of the test's own, through a
// client that gives up on a reply after 200ms, with the rest of its
// options as opt sets them, notification "a" due and the reserve script
// loaded.
func lateReplyStore(t *testing.T, opt func(*redis.Options)) (*redistest.Server, *redis.Client, *store.Store) {
	t.Helper()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	opts := srv.Options()
	opts.ReadTimeout = 200 * time.Millisecond
	opt(opts)
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	st, err := store.New(&store.Config{Client: client, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	_, _, err = st.Enqueue(ctx, heraldtest.Notification(t, "a", time.Now().Add(-time.Second)), false)
	require.NoError(t, err)
	_, _, err = st.Reserve(ctx, store.PullQueue("other"), heraldtest.AllShards(t, st), 1) // loads the script
	require.NoError(t, err)
	return srv, client, st
}

// giveBackLost gives back what the failed Reserve whose error is err left
// reserved, when Reserve could not do so itself before Redis came back.
func giveBackLost(t *testing.T, st *store.Store, err error) {
	t.Helper()
	var lost *store.ReserveError
	if errors.As(err, &lost) {
		require.Eventually(t, func() bool {
			_, err := st.GiveBack(context.Background(), lost.Lost)
			return err == nil
		}, 10*time.Second, 10*time.Millisecond)
	}
}

// TestWaitReplicasCoverSettings: with redis.wait_replicas, the changes an
// operator is answered about besides notifications (a pause and a resume,
// an endpoint stored, enabled or deleted, a dashboard sign-out) wait for
// the replicas too, and fail with ErrNotReplicated while the replica is
// paused, rather than being reported done and lost with the master: a lost
// pause lets attempts run that the operator was told were held back, a
// lost sign-out brings a signed-out session back.
func TestWaitReplicasCoverSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := heraldtest.NewClock(time.Now())
	_, replica, st := startReplicated(t, store.Config{WaitTimeout: 100 * time.Millisecond, TimeNowFunc: clock.Now})
	e := &endpoint.Endpoint{URL: "https://m.example", DisableAfter: notify.Duration(time.Hour)}
	changes := []struct {
		name   string
		change func() error
	}{
		{"Pause", func() error { return st.Pause(ctx, store.PauseTopic, "jobs") }},
		{"Resume", func() error { _, err := st.Resume(ctx, store.PauseTopic, "jobs"); return err }},
		{"PutEndpoint", func() error { _, err := st.PutEndpoint(ctx, "m", e); return err }},
		{"EnableEndpoint", func() error {
			for range 2 { // failing for its disable_after, then disabled
				if _, err := st.EndpointFailed(ctx, "m", time.Millisecond); err != nil {
					return err
				}
				clock.Advance(time.Millisecond)
			}
			_, err := st.EnableEndpoint(ctx, "m")
			return err
		}},
		{"DeleteEndpoint", func() error { return st.DeleteEndpoint(ctx, "m") }},
		{"SignOut", func() error { return st.SignOut(ctx, "session", time.Minute) }},
	}
	for _, c := range changes {
		require.NoError(t, c.change(), "%s with the replica up", c.name)
	}

	replica.Pause()
	t.Cleanup(replica.Resume)
	for _, c := range changes {
		if c.name == "DeleteEndpoint" {
			_, err := st.PutEndpoint(ctx, "m", e)
			require.ErrorIs(t, err, notify.ErrNotReplicated)
		}
		require.ErrorIs(t, c.change(), notify.ErrNotReplicated, "%s with the replica paused", c.name)
	}
}

// TestWaitReplicasCoverReservations: with redis.wait_replicas, a
// reservation is handed out only once the replicas have it. One that the
// master alone held would be lost with it: the promoted replica would find
// the notification due and start a second attempt while the first ran.
// While the replica is behind, what was reserved is given back unstarted
// and the call fails; after a failover the notification is handed out once.
func TestWaitReplicasCoverReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const timeout = time.Second
	master, replica, st := startReplicated(t, store.Config{WaitTimeout: timeout})
	_ = reserveEventually(t, st, 0) // loads the script, whose first run would wait twice
	_, _, err := st.Enqueue(ctx, heraldtest.Notification(t, "a", time.Now().Add(-time.Second)), false)
	require.NoError(t, err)

	replica.Pause()
	t.Cleanup(replica.Resume)
	start := time.Now()
	items, _, err := st.Reserve(ctx, store.PullQueue("jobs"), heraldtest.AllShards(t, st), store.MaxReserve)
	require.ErrorContains(t, err, "replicas")
	require.Empty(t, items, "nothing is handed out that the replica does not have")
	// The give-back waits for no replica: the replicas never had the
	// reservation either.
	require.Less(t, time.Since(start), 2*timeout-200*time.Millisecond, "one wait_timeout, not two")
	n, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, n.State, "given back on the master")
	require.Zero(t, n.Attempts)

	master.Kill()
	replica.Resume()
	promoted := replica.Client(t)
	require.NoError(t, promoted.Do(ctx, "replicaof", "no", "one").Err())
	after, err := store.New(&store.Config{Client: promoted, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	got := reserveEventually(t, after, 1)
	require.Equal(t, "a", got[0].ID)
	require.Zero(t, got[0].Attempts, "the only attempt")
}

// startReplicated starts a master with a replica, and a store of cfg on
// the master that waits for the replica.
func startReplicated(t *testing.T, cfg store.Config) (master, replica *redistest.Server, st *store.Store) {
	t.Helper()
	master = redistest.Start(t, redistest.Options{})
	replica = redistest.StartReplica(t, master)
	cfg.Client, cfg.WaitReplicas, cfg.Logger = master.Client(t), 1, heraldtest.Logger(t)
	st, err := store.New(&cfg)
	require.NoError(t, err)
	return master, replica, st
}
