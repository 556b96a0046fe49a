package schedule_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// enqueueMany stores count notifications id0..id{count-1} due now, in
// batches.
func (b *testBundle) enqueueMany(t *testing.T, count int, backoff []notify.Duration, ttr time.Duration) {
	t.Helper()
	var reqs []store.EnqueueRequest
	flush := func() {
		res, err := b.store.EnqueueBatch(context.Background(), reqs)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
		reqs = reqs[:0]
	}
	for i := range count {
		req := &notify.Request{ID: fmt.Sprintf("id%d", i), Topic: "orders", Channel: notify.ChannelWebhook,
			Target: "https://merchant.test/notify", Backoff: backoff, Policy: "fast"}
		if ttr > 0 {
			d := notify.Duration(ttr)
			req.TTR = &d
		}
		n, err := b.policies.Resolve(req, time.Now(), 0)
		require.NoError(t, err)
		reqs = append(reqs, store.EnqueueRequest{Notification: n})
		if len(reqs) == store.MaxBatch {
			flush()
		}
	}
	if len(reqs) > 0 {
		flush()
	}
}

// waitIdle waits until no notification of topic orders is scheduled or
// reserved.
func (b *testBundle) waitIdle(t *testing.T, timeout time.Duration) store.TopicStats {
	t.Helper()
	var st store.TopicStats
	require.Eventually(t, func() bool {
		all, err := b.store.Stats(context.Background())
		st = all["orders"]
		return err == nil && st.Scheduled == 0 && st.Reserved == 0
	}, timeout, 20*time.Millisecond, "still busy: %+v", st)
	return st
}

// plan decides, per id, how many failures precede success: 0-1 succeed,
// 2 always fails (dead after the array), 3 fails permanently.
func plan(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % 4)
}

func TestManyDispatchersNoOverlapNoneLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(func(_ context.Context, n *notify.Notification) error {
		switch p := plan(n.ID); {
		case p == 3:
			return notify.Permanent(errors.New("400 bad request"))
		case p == 2 || n.Attempts < p:
			return errUnavailable
		}
		return nil
	})
	const count = 10_000
	backoff := ms(0, 5, 5)
	// A ttr far above any attempt: on a starved machine a reservation
	// prefetched for 2s can expire before its attempt starts, which counts
	// as a failed attempt and would change the number of attempts checked
	// here (the reaping itself is TestTTRExpiryCountsAsFailedAttempt's).
	b.enqueueMany(t, count, backoff, 30*time.Second)
	for range 4 {
		own := setupOn(t, server.Client(t), b.store.Namespace())
		own.policies = b.policies
		own.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Concurrency: 32})
	}
	st := b.waitIdle(t, 3*time.Minute)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Zero(t, rec.overlaps, "two attempts of one notification ran at once")
	want := map[int]int{0: 1, 1: 2, 2: 3, 3: 1} // attempts per plan
	var succeeded, dead int64
	for i := range count {
		id := fmt.Sprintf("id%d", i)
		p := plan(id)
		require.Len(t, rec.starts[id], want[p], "attempts of %s (plan %d)", id, p)
		if p >= 2 {
			dead++
		} else {
			succeeded++
		}
	}
	require.Equal(t, succeeded, st.SucceededTotal)
	require.Equal(t, dead, st.Dead)
	for _, id := range []string{"id0", "id1", "id2", "id3", "id4"} {
		got, err := b.store.Get(context.Background(), id)
		require.NoError(t, err)
		wantState := notify.StateSucceeded
		if plan(id) >= 2 {
			wantState = notify.StateDead
		}
		require.Equal(t, wantState, got.State, id)
		require.Len(t, got.History, want[plan(id)], id)
	}
}

const crashChildEnv = "HERALDTEST_CRASH_CHILD"

// TestCrashChild is the dispatcher the tests of a killed dispatcher run
// in a child process and kill; run directly, it has nothing to do. It
// serves the webhook channel and the pull topics it is given, each through
// the same attempt: ids starting with "quick" succeed at once, and ids
// starting with "slow" after 100ms, and print "done <id>"; every other one
// prints "started <id>" and holds its worker until the process is killed.
func TestCrashChild(t *testing.T) {
	cfg := os.Getenv(crashChildEnv)
	if cfg == "" {
		return
	}
	f := strings.Split(cfg, "|")
	concurrency, err := strconv.Atoi(f[2])
	require.NoError(t, err)
	// One address names a single Redis, several a Cluster.
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(f[0], ",")})
	st, err := store.New(&store.Config{Client: client, Namespace: f[1], Shards: 8})
	require.NoError(t, err)
	var mu sync.Mutex // one line at a time
	say := func(what, id string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%s %s\n", what, id)
	}
	hang := notify.SenderFunc(func(ctx context.Context, n *notify.Notification) (notify.Response, error) {
		if slow := strings.HasPrefix(n.ID, "slow"); slow || strings.HasPrefix(n.ID, "quick") {
			if slow {
				time.Sleep(100 * time.Millisecond)
			}
			say("done", n.ID)
			return notify.Response{StatusCode: 200}, nil
		}
		say("started", n.ID)
		select {} // hold the reservation until killed
	})
	handlers := map[string]notify.Sender{}
	for _, topic := range strings.Split(f[3], ",") {
		if topic != "" {
			handlers[topic] = hang
		}
	}
	d, err := schedule.New(&schedule.Config{Store: st, Concurrency: concurrency,
		Senders: map[string]notify.Sender{notify.ChannelWebhook: hang}, Handlers: handlers})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	time.Sleep(time.Minute) // the parent kills this process long before
}

// startCrashChild runs TestCrashChild on namespace ns of the package's
// Redis with that many workers (0: the default), serving the webhook
// channel alone; see startCrashChildOn.
func startCrashChild(t *testing.T, ns string, concurrency int) (lines <-chan string, kill func()) {
	t.Helper()
	return startCrashChildOn(t, []string{server.Addr}, ns, concurrency, nil)
}

// startCrashChildOn runs TestCrashChild on namespace ns of the Redis at
// addrs (one address names a single Redis, several a Cluster's masters)
// with that many workers and the pull topics given, in a child process,
// and returns the lines it prints and the function that kills it with
// SIGKILL, also called at the test's end.
func startCrashChildOn(t *testing.T, addrs []string, ns string, concurrency int, topics []string) (lines <-chan string, kill func()) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d|%s", crashChildEnv, strings.Join(addrs, ","), ns, concurrency, strings.Join(topics, ",")))
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	ch := make(chan string, 256)
	go func() {
		defer close(ch)
		for scan := bufio.NewScanner(out); scan.Scan(); {
			ch <- scan.Text()
		}
	}()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = child.Process.Kill()
			_ = child.Wait()
		})
	}
	t.Cleanup(kill)
	return ch, kill
}

// runCrashChild runs TestCrashChild on namespace ns in a child process,
// waits until it started count attempts (or stopped printing), kills it
// with SIGKILL, and returns the ids it started.
func runCrashChild(t *testing.T, ns string, count int) map[string]bool {
	t.Helper()
	lines, kill := startCrashChild(t, ns, 0)
	started := map[string]bool{}
	for l := range lines {
		if id, ok := strings.CutPrefix(l, "started "); ok {
			started[id] = true
		}
		if len(started) == count {
			break
		}
	}
	waitStartsRecorded(t, ns, slices.Collect(maps.Keys(started)))
	kill()
	return started
}

// waitStartsRecorded waits until the starts of ids, made by a child's
// dispatcher, are recorded in Redis for the reaper (store.Start writes
// them in the background within about 10ms), so that a kill now counts
// them as attempts made. It reads the record where the store keeps it:
// the receipt's holder and number, under "started" in the namespace.
func waitStartsRecorded(t *testing.T, ns string, ids []string) {
	t.Helper()
	ctx := context.Background()
	client := server.Client(t)
	st, err := store.New(&store.Config{Client: client, Namespace: ns})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			n, err := st.Get(ctx, id)
			if err != nil {
				return false
			}
			mark := strings.LastIndex(n.Receipt, "+")
			number, err := strconv.ParseInt(n.Receipt[mark+1:], 10, 64)
			if mark < 16 || err != nil {
				return false
			}
			recorded, err := client.Get(ctx, ns+":started:"+n.Receipt[:16]+":"+store.QueuePush).Int64()
			if err != nil || recorded < number {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the child's starts were not recorded")
}

// TestKilledDispatcherBurnsNothingReservedAhead: a dispatcher killed
// (SIGKILL, an OOM kill) while notifications it reserved ahead wait for a
// worker costs those notifications no attempt: none reached a receiver,
// so none counts as a failed attempt, and one whose policy allows a
// single attempt is still delivered rather than dead-lettered unsent. The
// one its worker had started counts, as an attempt that ran out.
func TestKilledDispatcherBurnsNothingReservedAhead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.enqueue(t, "quick", ms(0), 0)
	lines, kill := startCrashChild(t, b.store.Namespace(), 1)
	waitLine(t, lines, "done ") // an attempt was timed: the child now reserves ahead
	b.waitState(t, "quick", notify.StateSucceeded)

	const total = 6
	ttr := notify.Duration(600 * time.Millisecond)
	for i := range total {
		b.enqueue(t, fmt.Sprint("ahead", i), ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	}
	held := waitLine(t, lines, "started ")
	waitStartsRecorded(t, b.store.Namespace(), []string{held})
	require.Eventually(t, func() bool {
		stats, err := b.store.Stats(ctx)
		return err == nil && stats["orders"].Reserved == total
	}, 10*time.Second, 5*time.Millisecond, "the child did not reserve the rest ahead of its busy worker")
	kill()

	rec := newRecorder(nil)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	for i := range total {
		id := fmt.Sprint("ahead", i)
		if id == held {
			got := b.waitState(t, id, notify.StateDead)
			require.Equal(t, 1, got.Attempts, "the attempt the killed child made counts")
			require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome)
			continue
		}
		got := b.waitState(t, id, notify.StateSucceeded)
		require.Len(t, got.History, 1, "%s: only the attempt that was made", id)
		require.Equal(t, 1, rec.attempts(id), id)
	}
}

func TestCrashedDispatcherWorkIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const count = 50
	// The child must start all and record the starts within the ttr, or
	// its own reaper takes them back and they are reserved afresh.
	ttr := 2 * time.Second
	b.enqueueMany(t, count, ms(0, 0, 0), ttr)

	started := runCrashChild(t, b.store.Namespace(), count)
	require.Len(t, started, count, "the child reserved and started everything")

	st, err := b.store.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(count), st["orders"].Reserved, "the dead child still holds the reservations")

	rec := newRecorder(nil)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	b.waitIdle(t, 30*time.Second)
	for i := range count {
		got, err := b.store.Get(context.Background(), fmt.Sprintf("id%d", i))
		require.NoError(t, err)
		require.Equal(t, notify.StateSucceeded, got.State)
		require.Len(t, got.History, 2)
		require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome)
		// The reaper records the expired attempt as started when it was
		// reserved: the retry comes a ttr after that, however late the
		// parent read the child's output and killed it.
		require.False(t, got.History[1].StartedAt.Before(got.History[0].StartedAt.Add(ttr)),
			"retried only after the ttr")
	}
}

// countingStore counts reservations and failed ones, to show that an
// outage causes no busy loop.
type countingStore struct {
	*store.Store
	reserves, failed atomic.Int64
}

func (c *countingStore) ReserveAhead(ctx context.Context, queue string, shards []int, limit int) ([]*notify.Notification, []store.Head, error) {
	c.reserves.Add(1)
	items, heads, err := c.Store.ReserveAhead(ctx, queue, shards, limit)
	if err != nil {
		c.failed.Add(1)
	}
	return items, heads, err
}

// setupOutage starts a redis-server of the test's own, to be killed and
// restarted, and a bundle on it whose client fails a refused call at once,
// without go-redis's own dial retries (5, 100 ms apart) and command retry:
// each of those would hold a call for about a second, longer than the
// outages under test, and hide what the dispatcher does about a failure.
func setupOutage(t *testing.T, namespace string) (*redistest.Server, *testBundle) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	opts := srv.Options()
	opts.DialerRetries, opts.MaxRetries = 1, -1
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return srv, setupOn(t, client, namespace)
}

// heldAttempt is an attempt a test holds, to end it when Redis cannot
// hear of it: started is closed as it begins, and it ends once release is
// closed.
type heldAttempt struct{ started, release chan struct{} }

// holdFirstAttempt returns a recorder that holds the first attempt of id.
func holdFirstAttempt(id string) (*recorder, *heldAttempt) {
	h := &heldAttempt{make(chan struct{}), make(chan struct{})}
	return newRecorder(func(_ context.Context, n *notify.Notification) error {
		if n.ID == id && n.Attempts == 0 {
			close(h.started)
			<-h.release
		}
		return nil
	}), h
}

// waitStarted waits until the held attempt begins.
func (h *heldAttempt) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.started:
	case <-time.After(10 * time.Second):
		t.Fatal("not attempted in 10s")
	}
}

func TestSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	srv, b := setupOutage(t, "outage")
	counting := &countingStore{Store: b.store}
	rec := newRecorder(nil)
	cfg := schedule.Config{Store: counting, Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
		PoliciesFunc: func() *policy.Set { return b.policies }, Logger: heraldtest.Logger(t), ReapInterval: 20 * time.Millisecond}
	d, err := schedule.New(&cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(d.Stop)

	b.enqueue(t, "before", ms(0, 10), 0)
	b.waitState(t, "before", notify.StateSucceeded)
	b.enqueue(t, "across", ms(0, 10), 400*time.Millisecond)

	srv.Kill()
	// "across" falls due 400ms into the outage; a loaded machine can
	// take longer than the second below to try it.
	require.Eventually(t, func() bool { return counting.failed.Load() > 0 }, 10*time.Second, 5*time.Millisecond,
		"no reservation failed during the outage")
	before := counting.reserves.Load()
	time.Sleep(time.Second) // the outage under test
	during := counting.reserves.Load() - before
	require.Less(t, during, int64(30), "reserve calls during a 1s outage: backoff, not a busy loop")
	require.NoError(t, srv.Restart())

	b.waitState(t, "across", notify.StateSucceeded)
	b.enqueue(t, "after", ms(0, 10), 0)
	b.waitState(t, "after", notify.StateSucceeded)
	require.Equal(t, 1, rec.attempts("across"))
}

// TestResumesWithinThePollInterval: after a 6 s outage the dispatcher asks
// Redis again within its poll interval, the longest it sleeps without
// asking, so what fell due during the outage starts soon after Redis is
// back rather than after a backoff grown to seconds.
func TestResumesWithinThePollInterval(t *testing.T) {
	t.Parallel()
	srv, b := setupOutage(t, "resume")
	rec := newRecorder(nil)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
		PollInterval: 200 * time.Millisecond})
	b.enqueue(t, "due-in-outage", ms(0), time.Second)
	srv.Kill()
	time.Sleep(6 * time.Second)
	require.NoError(t, srv.Restart())
	back := time.Now()
	b.waitState(t, "due-in-outage", notify.StateSucceeded)
	// Doubling from 10 ms, the wait under way would end some 4 s after
	// Redis is back; a machine loaded by twice CI's work took 2 s to
	// deliver within the poll interval.
	require.Less(t, time.Since(back), 3*time.Second, "delivered after Redis was back")
}

// TestOutcomesThroughAnOutage ends attempts while Redis is down: an outcome
// is recorded once Redis is back, with no second attempt, unless the
// reservation ran out meanwhile; then the attempt is made again.
func TestOutcomesThroughAnOutage(t *testing.T) {
	t.Parallel()
	srv, b := setupOutage(t, "outcomes")
	type gate struct{ started, release chan struct{} }
	gates := map[string]*gate{}
	for _, id := range []string{"recorded", "expired"} {
		gates[id] = &gate{make(chan struct{}), make(chan struct{})}
	}
	rec := newRecorder(func(_ context.Context, n *notify.Notification) error {
		if g := gates[n.ID]; n.Attempts == 0 {
			close(g.started)
			<-g.release
		}
		return nil
	})
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})

	for _, tc := range []struct {
		id          string
		ttr, outage time.Duration
		want        []notify.Outcome
	}{
		{"recorded", 10 * time.Second, 300 * time.Millisecond, []notify.Outcome{notify.OutcomeSuccess}},
		// The finish gives up within about 0.6 s; the outage outlasts that
		// with room, so that the reaper, not a late finish, settles it.
		{"expired", 200 * time.Millisecond, 2 * time.Second, []notify.Outcome{notify.OutcomeTTRExpired, notify.OutcomeSuccess}},
	} {
		ttr := notify.Duration(tc.ttr)
		b.enqueue(t, tc.id, ms(0, 10), 0, func(r *notify.Request) { r.TTR = &ttr })
		select {
		case <-gates[tc.id].started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not attempted in 10s", tc.id)
		}
		srv.Kill()
		close(gates[tc.id].release) // the attempt ends; Redis cannot hear of it
		time.Sleep(tc.outage)
		require.NoError(t, srv.Restart())

		got := b.waitState(t, tc.id, notify.StateSucceeded)
		outcomes := make([]notify.Outcome, len(got.History))
		for i, a := range got.History {
			outcomes[i] = a.Outcome
		}
		require.Equal(t, tc.want, outcomes, tc.id)
		require.Equal(t, len(tc.want), rec.attempts(tc.id), tc.id)
	}
}

// TestBacklogDrainsInLargeReservations drains a backlog with few workers:
// reservations run ahead of them, so each moves a batch, not the one
// notification a freed worker would ask for.
func TestBacklogDrainsInLargeReservations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const count = 3000
	b.enqueueMany(t, count, ms(0), 0)
	counting := &countingStore{Store: b.store}
	rec := newRecorder(nil)
	cfg := schedule.Config{Store: counting, Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
		PoliciesFunc: func() *policy.Set { return b.policies }, Logger: heraldtest.Logger(t), Concurrency: 8}
	d, err := schedule.New(&cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(d.Stop)
	st := b.waitIdle(t, time.Minute)
	require.EqualValues(t, count, st.SucceededTotal)
	perCall := float64(count) / float64(counting.reserves.Load())
	t.Logf("%d notifications in %d reservations: %.1f each", count, counting.reserves.Load(), perCall)
	require.Greater(t, perCall, 20.0, "reservations stay large under a backlog")
	heraldtest.RequireStatsMatch(t, b.store)
}

// TestStopThroughAnOutage: Stop is bounded while Redis is down, however
// long the reservations it cannot settle run. An outcome it could not record
// is left to the reaper (at least once), as if the process had died.
func TestStopThroughAnOutage(t *testing.T) {
	t.Parallel()
	srv, b := setupOutage(t, "stop-outage")
	rec, held := holdFirstAttempt("unrecorded")
	d := b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
		ShutdownTimeout: 200 * time.Millisecond})
	ttr := notify.Duration(time.Minute)
	b.enqueue(t, "unrecorded", ms(0, 10), 0, func(r *notify.Request) { r.TTR = &ttr })
	held.waitStarted(t)
	srv.Kill()
	close(held.release) // the attempt ends; Redis cannot hear of it
	// Bounded by the shutdown timeout, not by the ttr's minute.
	requireStopsWithin(t, d, 15*time.Second)
	require.NoError(t, srv.Restart())
	got, err := b.store.Get(context.Background(), "unrecorded")
	require.NoError(t, err)
	require.Equal(t, notify.StateReserved, got.State, "left to the reaper")
}

// refusingStore is a store whose Finish fails while refuse is set, as when
// Redis answers reservations but will not take outcomes (a Cluster master
// down, an outage under load).
type refusingStore struct {
	*store.Store
	refuse atomic.Bool
}

func (r *refusingStore) Finish(ctx context.Context, items []store.Finish) ([]error, error) {
	if r.refuse.Load() {
		return nil, errors.New("refused")
	}
	return r.Store.Finish(ctx, items)
}

// startBlockedFinisher starts a dispatcher with one worker, nothing reserved
// ahead and a minute's ttr, on a store that refuses outcomes, and returns
// once the worker is stuck: the finisher retries its batch, the queue of
// outcomes (one long) is full and the worker waits to hand over another.
func startBlockedFinisher(t *testing.T, b *testBundle, shutdown time.Duration, logger *slog.Logger) (*schedule.Dispatcher, *refusingStore, *recorder) {
	t.Helper()
	const count = 50
	b.enqueueMany(t, count, ms(0, 10), time.Minute)
	refusing := &refusingStore{Store: b.store}
	refusing.refuse.Store(true)
	rec := newRecorder(nil)
	cfg := schedule.Config{Store: refusing, Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
		PoliciesFunc: func() *policy.Set { return b.policies }, Concurrency: 1, Prefetch: -1,
		PollInterval: 50 * time.Millisecond, ReapInterval: 20 * time.Millisecond, ReapGrace: 10 * time.Millisecond,
		ShutdownTimeout: shutdown, Logger: logger}
	d, err := schedule.New(&cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(d.Stop)
	total := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.total
	}
	require.Eventually(t, func() bool {
		before := total()
		time.Sleep(100 * time.Millisecond)
		return before >= 2 && total() == before
	}, 10*time.Second, time.Millisecond, "the worker never stopped")
	require.Less(t, total(), count, "the worker stopped for want of work, not for the finisher")
	return d, refusing, rec
}

// TestStopWhileRedisRefusesOutcomes: Stop is bounded when Redis takes no
// outcomes and a worker waits to queue one behind the finisher's retries,
// however long the reservations of the finisher's batch run. What it could
// not record is left to the reaper, as if the process had died.
func TestStopWhileRedisRefusesOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _, rec := startBlockedFinisher(t, b, 200*time.Millisecond, heraldtest.Logger(t))
	// Bounded by the shutdown timeout, its grace and the wait for outcomes,
	// not by the ttr's minute.
	requireStopsWithin(t, d, 5*time.Second)
	all, err := b.store.Stats(context.Background())
	require.NoError(t, err)
	require.Zero(t, all["orders"].SucceededTotal)
	for id := range rec.starts {
		got, err := b.store.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, notify.StateReserved, got.State, "%s left to the reaper", id)
	}
}

// TestStopRecordsOutcomesRedisTakesInTime: an outcome a worker could not
// queue while Redis refused outcomes is still recorded when Redis takes
// them again while Stop waits for outcomes.
func TestStopRecordsOutcomesRedisTakesInTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := make(logLines, 10000)
	d, refusing, rec := startBlockedFinisher(t, b, time.Second, slog.New(slog.NewTextHandler(logs, nil)))
	stopped := make(chan struct{})
	go func() { d.Stop(); close(stopped) }()
	timeout := time.After(10 * time.Second)
	for waiting := true; waiting; {
		select {
		case line := <-logs:
			waiting = !strings.Contains(line, "leaving them reserved")
		case <-timeout:
			t.Fatal("Stop never gave up waiting for the worker")
		}
	}
	refusing.refuse.Store(false) // Redis takes outcomes again
	select {
	case <-stopped:
	case <-timeout:
		t.Fatal("Stop did not return")
	}
	for id := range rec.starts {
		got, err := b.store.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, notify.StateSucceeded, got.State, "%s recorded", id)
	}
}

// TestKilledDispatcherCountsWhatItStartedAhead: of what a killed
// dispatcher had reserved ahead of its busy worker, the attempt the worker
// had started counts, as one that ran out, and is not sent again; those
// still waiting for the worker cost no attempt, and are delivered once
// each.
func TestKilledDispatcherCountsWhatItStartedAhead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "quick", ms(0), 0)
	lines, kill := startCrashChild(t, b.store.Namespace(), 1)
	waitLine(t, lines, "done ")
	b.waitState(t, "quick", notify.StateSucceeded)

	// The worker is busy with slow attempts, 100ms each, while "held" and
	// then the "late" ones are reserved ahead of it: it starts "held"
	// after the slow ones, and "late" waits behind it. The ttr of "held"
	// leaves it a second to wait and still start, with the child's
	// policy, and the test 10s to see it reserved beside a late one;
	// theirs, shorter, has them given back sooner once the child is gone.
	ctx := context.Background()
	ttr, heldTTR := notify.Duration(5*time.Second), notify.Duration(10*time.Second)
	withTTR := func(r *notify.Request) { r.TTR = &ttr }
	const slow, late = 3, 3
	for i := range slow {
		b.enqueue(t, fmt.Sprint("slow", i), ms(0), 0, withTTR)
	}
	// Each is reserved after the ones before it, so behind them.
	require.Eventually(t, func() bool {
		for i := range slow {
			if n, err := b.store.Get(ctx, fmt.Sprint("slow", i)); err != nil || n.State == notify.StateScheduled {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
	b.enqueue(t, "held", ms(0), 0, func(r *notify.Request) { r.TTR = &heldTTR })
	b.waitState(t, "held", notify.StateReserved)
	for i := range late {
		b.enqueue(t, fmt.Sprint("late", i), ms(0), 0, withTTR)
	}
	require.Equal(t, "held", waitLine(t, lines, "started "))
	waitStartsRecorded(t, b.store.Namespace(), []string{"held"})
	// Before the kill, the child has recorded the slow ones' outcomes (the
	// reaper would count one it had not) and reserved late ones ahead. How
	// many follows its attempts' average time (Dispatcher.ahead: as many as
	// its worker starts within 100ms): about 3 after the slow ones, 2 when
	// load stretches them. One is enough: its worker is held, so it waits
	// unstarted.
	require.Eventually(t, func() bool {
		for i := range slow {
			if n, err := b.store.Get(ctx, fmt.Sprint("slow", i)); err != nil || n.State != notify.StateSucceeded {
				return false
			}
		}
		for i := range late {
			if n, err := b.store.Get(ctx, fmt.Sprint("late", i)); err == nil && n.State == notify.StateReserved {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the child did not record the slow ones, or reserved no late one ahead of its busy worker")
	kill()

	rec := newRecorder(nil)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	for i := range slow {
		got := b.waitState(t, fmt.Sprint("slow", i), notify.StateSucceeded)
		require.Len(t, got.History, 1, got.ID)
	}
	for i := range late {
		id := fmt.Sprint("late", i)
		got := b.waitState(t, id, notify.StateSucceeded)
		require.Len(t, got.History, 1, "%s: only the attempt that was made", id)
		require.Equal(t, 1, rec.attempts(id), id)
	}
	got := b.waitState(t, "held", notify.StateDead)
	require.Equal(t, 1, got.Attempts, "the attempt the killed child started counts")
	require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome)
	require.Zero(t, rec.attempts("held"), "its one attempt was made")
}

// waitLine returns the rest of the first line from a child's lines that
// starts with prefix, failing the test when the child ends, or prints none
// within 10s.
func waitLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the child ended before printing %q", prefix)
			if rest, found := strings.CutPrefix(l, prefix); found {
				return rest
			}
		case <-timeout:
			t.Fatalf("the child never printed %q", prefix)
		}
	}
}
