package schedule_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// server is the package's shared redis-server; tests isolate by namespace,
// and tests that break their server start their own.
var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }

// ms builds a backoff array from milliseconds.
func ms(vals ...int) []notify.Duration {
	out := make([]notify.Duration, len(vals))
	for i, v := range vals {
		out[i] = notify.Duration(time.Duration(v) * time.Millisecond)
	}
	return out
}

// recorder is a sender that records every attempt and any overlap of two
// attempts of one notification.
type recorder struct {
	mu       sync.Mutex
	starts   map[string][]time.Time
	running  map[string]int
	overlaps int
	total    int
	// behave decides an attempt's outcome; nil succeeds.
	behave func(ctx context.Context, n *notify.Notification) error
}

func newRecorder(behave func(ctx context.Context, n *notify.Notification) error) *recorder {
	return &recorder{starts: map[string][]time.Time{}, running: map[string]int{}, behave: behave}
}

func (r *recorder) Send(ctx context.Context, n *notify.Notification) (notify.Response, error) {
	r.mu.Lock()
	r.starts[n.ID] = append(r.starts[n.ID], time.Now())
	r.running[n.ID]++
	if r.running[n.ID] > 1 {
		r.overlaps++
	}
	r.total++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running[n.ID]--
		r.mu.Unlock()
	}()
	if r.behave == nil {
		return notify.Response{StatusCode: 200}, nil
	}
	return notify.Response{}, r.behave(ctx, n)
}

func (r *recorder) attempts(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.starts[id])
}

// holding returns a recorder whose attempt of id holds its worker:
// started is closed as that attempt starts, and it succeeds once release
// is closed. Other attempts succeed at once.
func holding(id string) (rec *recorder, started, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	rec = newRecorder(func(_ context.Context, n *notify.Notification) error {
		if n.ID == id {
			close(started)
			<-release
		}
		return nil
	})
	return rec, started, release
}

type testBundle struct {
	store    *store.Store
	policies *policy.Set
	client   *redis.Client
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupOn(t, server.Client(t), redistest.Namespace(t))
}

func setupOn(t *testing.T, client *redis.Client, namespace string) *testBundle {
	t.Helper()
	st, err := store.New(&store.Config{Client: client, Namespace: namespace, Shards: 8, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	set, err := policy.NewSet(map[string]policy.Policy{
		"fast": {Backoff: ms(0, 0, 20, 50, 100), TTR: notify.Duration(2 * time.Second), Timeout: notify.Duration(time.Second)},
	}, nil)
	require.NoError(t, err)
	return &testBundle{store: st, policies: set, client: client}
}

func (b *testBundle) start(t *testing.T, cfg schedule.Config) *schedule.Dispatcher {
	t.Helper()
	d := b.launch(t, cfg)
	select {
	case <-d.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("dispatcher not subscribed to wake-ups within 5s")
	}
	return d
}

// launch starts a dispatcher of cfg on the bundle's store, stopped at the
// test's end, without waiting for its subscription to wake-ups.
func (b *testBundle) launch(t *testing.T, cfg schedule.Config) *schedule.Dispatcher {
	t.Helper()
	cfg.Store = b.store
	cfg.PoliciesFunc = func() *policy.Set { return b.policies }
	cfg.ReapInterval = cmp.Or(cfg.ReapInterval, 20*time.Millisecond)
	cfg.ReapGrace = cmp.Or(cfg.ReapGrace, 10*time.Millisecond)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, heraldtest.Logger(t))
	d, err := schedule.New(&cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(d.Stop)
	return d
}

// enqueue stores a webhook notification with the given backoff and delay,
// and whatever more changes to its request (such as a ttr).
func (b *testBundle) enqueue(t *testing.T, id string, backoff []notify.Duration, delay time.Duration, more ...func(*notify.Request)) *notify.Notification {
	t.Helper()
	d := notify.Duration(delay)
	req := &notify.Request{
		ID: id, Topic: "orders", Channel: notify.ChannelWebhook, Target: "https://merchant.test/notify",
		Payload: json.RawMessage(`{"order":1}`), Backoff: backoff, Delay: &d, Policy: "fast",
	}
	for _, f := range more {
		f(req)
	}
	n, err := b.policies.Resolve(req, time.Now(), 0)
	require.NoError(t, err)
	_, _, err = b.store.Enqueue(context.Background(), n, false)
	require.NoError(t, err)
	return n
}

// waitState waits until id reaches state and returns its record.
func (b *testBundle) waitState(t *testing.T, id string, state notify.State) *notify.Notification {
	t.Helper()
	var rec *notify.Notification
	require.Eventually(t, func() bool {
		var err error
		rec, err = b.store.Get(context.Background(), id)
		return err == nil && rec.State == state
	}, 15*time.Second, 5*time.Millisecond, "%s never reached %s", id, state)
	return rec
}

// requireOnSchedule checks that no attempt in the history started before it
// was due: attempt 0 at send_at + backoff[0], attempt n at the previous
// attempt's end + backoff[n].
func requireOnSchedule(t *testing.T, rec *notify.Notification) {
	t.Helper()
	for i, a := range rec.History {
		due := rec.SendAt.Add(time.Duration(rec.Backoff[0]))
		if i > 0 {
			due = rec.History[i-1].FinishedAt.Add(time.Duration(rec.Backoff[a.Attempt]))
		}
		require.False(t, a.StartedAt.Before(due), "attempt %d started %s before it was due", i, due.Sub(a.StartedAt))
		require.Less(t, a.StartedAt.Sub(due), 2*time.Second, "attempt %d started far too late", i)
	}
}

var errUnavailable = errors.New("503 service unavailable")

func TestBackoffArrayRunsToDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(func(context.Context, *notify.Notification) error { return errUnavailable })
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})

	backoff := ms(0, 0, 20, 50, 100, 20, 20, 20, 20)
	b.enqueue(t, "n1", backoff, 0)
	got := b.waitState(t, "n1", notify.StateDead)
	require.Equal(t, 9, got.Attempts)
	require.Len(t, got.History, 9)
	require.Equal(t, 9, rec.attempts("n1"), "exactly one send per array entry")
	for i, a := range got.History {
		require.Equal(t, i, a.Attempt)
		require.Equal(t, notify.OutcomeRetry, a.Outcome)
		require.Equal(t, errUnavailable.Error(), a.Error)
	}
	requireOnSchedule(t, got)
	require.Nil(t, got.NextAttemptAt)
}

func TestSucceedsAfterFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	rec.behave = func(_ context.Context, n *notify.Notification) error {
		if n.Attempts < 2 {
			return notify.Retry(errUnavailable, 0)
		}
		return nil
	}
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	b.enqueue(t, "n1", ms(30, 20, 40, 100), 0)
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.Equal(t, 3, got.Attempts)
	require.Equal(t, []notify.Outcome{notify.OutcomeRetry, notify.OutcomeRetry, notify.OutcomeSuccess},
		[]notify.Outcome{got.History[0].Outcome, got.History[1].Outcome, got.History[2].Outcome})
	requireOnSchedule(t, got)
}

func TestPermanentFailureGoesDeadAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(func(context.Context, *notify.Notification) error {
		return notify.Permanent(errors.New("410 gone"))
	})
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	b.enqueue(t, "n1", ms(0, 0, 0, 0), 0)
	got := b.waitState(t, "n1", notify.StateDead)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, notify.OutcomePermanent, got.History[0].Outcome)
	require.Equal(t, 1, rec.attempts("n1"))
}

func TestDelayedStartsOnTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	const count = 200
	for i := range count {
		b.enqueue(t, fmt.Sprintf("n%d", i), ms(0), time.Duration(100+i*3)*time.Millisecond)
	}
	for i := range count {
		got := b.waitState(t, fmt.Sprintf("n%d", i), notify.StateSucceeded)
		requireOnSchedule(t, got)
	}
}

func TestTTRExpiryCountsAsFailedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d := notify.Duration(0)
	ttr := notify.Duration(100 * time.Millisecond)
	n, err := b.policies.Resolve(&notify.Request{ID: "job1", Topic: "jobs", Channel: notify.ChannelPull,
		Backoff: ms(0, 10, 10), Delay: &d, TTR: &ttr}, time.Now(), 0)
	require.NoError(t, err)
	_, _, err = b.store.Enqueue(ctx, n, false)
	require.NoError(t, err)
	// A consumer reserves it and vanishes.
	shards := heraldtest.AllShards(t, b.store)
	// Due times are rounded up to the millisecond: it is due within one.
	var items []*notify.Notification
	require.Eventually(t, func() bool {
		items, _, err = b.store.Reserve(ctx, store.PullQueue("jobs"), shards, 10)
		return err == nil && len(items) == 1
	}, time.Second, time.Millisecond)

	rec := newRecorder(nil)
	b.start(t, schedule.Config{Handlers: map[string]notify.Sender{"jobs": rec}})
	got := b.waitState(t, "job1", notify.StateSucceeded)
	require.Equal(t, 2, got.Attempts)
	require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome)
	require.Equal(t, notify.OutcomeSuccess, got.History[1].Outcome)
	require.False(t, got.History[1].StartedAt.Before(items[0].Deadline.Add(10*time.Millisecond)),
		"the retry starts only after the ttr ran out")
}

// TestCancelDuringAnAttempt: an attempt under way when its notification is
// cancelled goes on, as a cancel says; when it ends, it is recorded in the
// history, so that a reminder that went out after all shows there, and the
// notification stays cancelled.
func TestCancelDuringAnAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec, started, cancelled := holding("n1")
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	b.enqueue(t, "n1", ms(0, 0), 0)
	<-started
	_, err := b.store.Cancel(context.Background(), "n1")
	require.NoError(t, err)
	close(cancelled)
	var got *notify.Notification
	require.Eventually(t, func() bool {
		got, err = b.store.Get(context.Background(), "n1")
		return err == nil && len(got.History) > 0
	}, 15*time.Second, 5*time.Millisecond, "the attempt that went on after the cancel is not in the history")
	require.Equal(t, notify.StateCancelled, got.State, "not resurrected")
	require.Equal(t, 1, got.Attempts)
	require.Len(t, got.History, 1)
	require.Equal(t, notify.OutcomeSuccess, got.History[0].Outcome)
	require.Equal(t, 1, rec.attempts("n1"))
	// Recorded once: a later finish of the same reservation is stale.
	b.enqueue(t, "n2", ms(0), 0)
	b.waitState(t, "n2", notify.StateSucceeded)
	got, err = b.store.Get(context.Background(), "n1")
	require.NoError(t, err)
	require.Len(t, got.History, 1)
}

// TestCancelWinsOverReservedAhead: a notification reserved ahead of a busy
// worker, and cancelled while it waits for the worker, is not attempted:
// its cancel answered "cancelled", and an appointment's reminder cancelled
// must not go out. So too when the cancel is announced between Redis
// reserving it and the dispatcher listing what it reserved (its goroutine
// descheduled, on a busy machine).
func TestCancelWinsOverReservedAhead(t *testing.T) {
	t.Parallel()
	t.Run("WhileItWaits", func(t *testing.T) {
		t.Parallel()
		testCancelWinsOverReservedAhead(t, false)
	})
	t.Run("BeforeItIsListed", func(t *testing.T) {
		t.Parallel()
		testCancelWinsOverReservedAhead(t, true)
	})
}

func testCancelWinsOverReservedAhead(t *testing.T, early bool) {
	hold := &holdReservation{held: make(chan struct{}), let: make(chan struct{})}
	rdb := server.Client(t)
	rdb.AddHook(hold)
	b := setupOn(t, rdb, redistest.Namespace(t))
	ctx := context.Background()
	rec, started, release := holding("slow")
	// Only wake-ups reserve here, so that the reservation of "probe" below
	// shows the dispatcher has heard every message published before it.
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Concurrency: 1, PollInterval: time.Minute})
	b.enqueue(t, "quick", ms(0), 0) // a timed attempt: the dispatcher now reserves ahead
	b.waitState(t, "quick", notify.StateSucceeded)
	b.enqueue(t, "slow", ms(0), 0)
	<-started
	hold.armed.Store(early)
	b.enqueue(t, "reminder", ms(0), 0)
	if early {
		select {
		case <-hold.held: // reserved in Redis; the dispatcher has not read the answer
		case <-time.After(10 * time.Second):
			t.Fatal("the reminder was not reserved ahead within 10s")
		}
	} else {
		b.waitState(t, "reminder", notify.StateReserved)
	}
	got, err := b.store.Cancel(ctx, "reminder")
	require.NoError(t, err)
	require.Equal(t, notify.StateCancelled, got.State)
	if early {
		// Time for the announcement to reach the dispatcher before the
		// answer does; were it later, the case would be WhileItWaits.
		time.Sleep(100 * time.Millisecond)
		close(hold.let)
	}
	b.enqueue(t, "probe", ms(0), 0)
	b.waitState(t, "probe", notify.StateReserved)
	close(release)
	b.waitState(t, "probe", notify.StateSucceeded)
	require.Zero(t, rec.attempts("reminder"), "the cancelled reminder went out")
	got, err = b.store.Get(ctx, "reminder")
	require.NoError(t, err)
	require.Equal(t, notify.StateCancelled, got.State)
}

// holdReservation holds the answer of the first reservation made once
// armed: held closes when Redis has answered it, and the caller gets the
// answer when let closes.
type holdReservation struct {
	armed     atomic.Bool
	held, let chan struct{}
}

func (h *holdReservation) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdReservation) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdReservation) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		// A reservation's script, alone, names both the queue's ready
		// list and the reserved set.
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			args := fmt.Sprint(c.Args())
			return c.Name() == "evalsha" && strings.Contains(args, ":ready:") && strings.Contains(args, ":reserved ")
		}) && h.armed.CompareAndSwap(true, false) {
			close(h.held)
			<-h.let
		}
		return err
	}
}

func TestShutdownReleasesRunningAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 1)
	rec := newRecorder(func(ctx context.Context, _ *notify.Notification) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	d := b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, ShutdownTimeout: 50 * time.Millisecond})
	b.enqueue(t, "n1", ms(0, 0), 0)
	<-started
	d.Stop()
	got, err := b.store.Get(context.Background(), "n1")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, got.State, "given back, due now")
	require.Equal(t, 0, got.Attempts, "a release does not use up the array")
	require.Equal(t, notify.OutcomeReleased, got.History[0].Outcome)
}

func TestNoSenderForChannelIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelSMS: newRecorder(nil)}})
	b.enqueue(t, "n1", ms(0, 0), 0)
	got := b.waitState(t, "n1", notify.StateDead)
	require.Contains(t, got.History[0].Error, `no sender configured for channel "webhook"`)
}

func TestSenderPanicIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(func(_ context.Context, n *notify.Notification) error {
		if n.Attempts == 0 {
			panic("boom")
		}
		return nil
	})
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	b.enqueue(t, "n1", ms(0, 0), 0)
	got := b.waitState(t, "n1", notify.StateSucceeded)
	require.Contains(t, got.History[0].Error, "sender panicked: boom")
}

// observed records what the dispatcher reports to its observer.
type observed struct {
	mu       sync.Mutex
	finished map[string][]notify.Action
	failed   []string // the op of each StoreError
}

func (o *observed) AttemptFinished(n *notify.Notification, _ notify.Attempt, action notify.Action, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished[n.ID] = append(o.finished[n.ID], action)
}

func (o *observed) StoreError(op string, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed = append(o.failed, op)
}

// failures returns how many StoreErrors of op were reported.
func (o *observed) failures(op string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, f := range o.failed {
		if f == op {
			n++
		}
	}
	return n
}

func (o *observed) actions(id string) []notify.Action {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.finished[id]
}

// An attempt reaches the metrics only once its finish is recorded: one
// whose notification was cancelled meanwhile is counted once, as
// cancelled, and one whose reservation the reaper took over once at most,
// by whoever recorded it.
func TestObserverCountsRecordedAttemptsOnly(t *testing.T) {
	t.Parallel()

	t.Run("CancelledMeanwhile", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec, started, cancelled := holding("n1")
		obs := &observed{finished: map[string][]notify.Action{}}
		d := b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Observer: obs})
		b.enqueue(t, "n1", ms(0, 0), 0)
		<-started
		_, err := b.store.Cancel(context.Background(), "n1")
		require.NoError(t, err)
		close(cancelled)
		b.enqueue(t, "n2", ms(0), 0)
		b.waitState(t, "n2", notify.StateSucceeded)
		d.Stop() // every outcome is recorded, or refused, by now
		require.Equal(t, []notify.Action{notify.ActionCancelled}, obs.actions("n1"), "the attempt that went on after the cancel is counted once, as cancelled")
		require.Equal(t, []notify.Action{notify.ActionAck}, obs.actions("n2"))
	})

	t.Run("Reaped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		released := make(chan struct{})
		// The handler outlives its ttr and ignores its context: the reaper
		// records the attempt as expired, and the late success is refused.
		// The history alone reads as a crash; the log names the
		// notification, so that the operator can find the handler.
		rec := newRecorder(func(context.Context, *notify.Notification) error { <-released; return nil })
		obs := &observed{finished: map[string][]notify.Action{}}
		var logs heraldtest.Buffer
		d := b.start(t, schedule.Config{Handlers: map[string]notify.Sender{"jobs": rec}, Observer: obs,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		// A ttr long enough for the handler to start: with 50ms, a loaded
		// machine's reservation ran out while it waited for a worker, and
		// the reaper recorded an attempt the handler never began.
		zero, ttr := notify.Duration(0), notify.Duration(time.Second)
		n, err := b.policies.Resolve(&notify.Request{ID: "job1", Topic: "jobs", Channel: notify.ChannelPull,
			Backoff: ms(0), Delay: &zero, TTR: &ttr}, time.Now(), 0)
		require.NoError(t, err)
		_, _, err = b.store.Enqueue(context.Background(), n, false)
		require.NoError(t, err)
		got := b.waitState(t, "job1", notify.StateDead)
		require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome)
		close(released)
		d.Stop()
		require.Equal(t, []notify.Action{notify.ActionDead}, obs.actions("job1"), "counted once, by the reaper")
		require.Equal(t, 1, rec.attempts("job1"))
		require.Regexp(t, `level=WARN msg="schedule: an attempt outlived its reservation.* topic=jobs id=job1 `, logs.String())
	})
}

// TestReservedAheadKeepTheirTime: notifications reserved ahead of a busy
// worker wait while their ttr runs. Each must still get its time when it
// starts, and none may lose an attempt it never made: with one worker, five
// reserved at once and attempts of 150 ms against a ttr of 300 ms, the last
// would otherwise start after its reservation ran out.
func TestReservedAheadKeepTheirTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var left []time.Duration // what each attempt's context had left when it started
	rec := newRecorder(func(ctx context.Context, _ *notify.Notification) error {
		deadline, _ := ctx.Deadline()
		mu.Lock()
		left = append(left, time.Until(deadline))
		mu.Unlock()
		select {
		case <-time.After(150 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	ttr := notify.Duration(300 * time.Millisecond)
	ids := []string{"r1", "r2", "r3", "r4", "r5"}
	for _, id := range ids {
		b.enqueue(t, id, ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	}
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Concurrency: 1, Prefetch: 4})
	for _, id := range ids {
		got := b.waitState(t, id, notify.StateSucceeded)
		require.Len(t, got.History, 1, id)
		require.Equal(t, 1, rec.attempts(id), id)
	}
	mu.Lock()
	defer mu.Unlock()
	// Each is given back once it has waited for a worker longer than its
	// ttr less its timeout allows; the third in line would otherwise start
	// with none of its ttr left. A loaded machine can take a few tens of
	// milliseconds from a reservation's round trip and a worker's wake-up.
	for i, l := range left {
		require.GreaterOrEqual(t, l, 100*time.Millisecond, "attempt %d started with %s of its 300ms ttr left", i, l)
	}
}

// TestDispatcherThatCannotSubscribe: a dispatcher whose Redis user may not
// subscribe (an ACL user denied SUBSCRIBE, as behind a proxy without
// pub/sub) hears no wake-up and no cancel,
// and finds work by polling. A reminder that falls due while its one worker
// is busy starts as soon as the worker is free: it is not reserved ahead,
// where, waiting, it could not be told from one cancelled unheard and would
// go back until the next poll.
func TestDispatcherThatCannotSubscribe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := server.Client(t)
	user := redistest.Namespace(t)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-subscribe").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	opts := server.Options()
	opts.Username, opts.Password = user, "pw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	b := setupOn(t, rdb, redistest.Namespace(t))
	rec, started, release := holding("slow")
	b.enqueue(t, "quick", ms(0), 0) // a timed attempt, after which a dispatcher reserves ahead
	b.enqueue(t, "slow", ms(0), 100*time.Millisecond)
	reminder := b.enqueue(t, "reminder", ms(0), 300*time.Millisecond)
	// Polled once a minute: only the reservations' answers tell the
	// dispatcher what falls due.
	b.launch(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Concurrency: 1, PollInterval: time.Minute})
	<-started
	time.Sleep(time.Until(reminder.NextAttemptAt.Add(2 * store.HeardWithin)))
	freed := time.Now()
	close(release)
	got := b.waitState(t, "reminder", notify.StateSucceeded)
	require.Len(t, got.History, 1)
	require.Less(t, got.History[0].StartedAt.Sub(freed), 500*time.Millisecond, "the reminder started that long after the worker was free")
}

// TestShortTTRBehindASlowRedis: a reservation's round trip is not time spent
// waiting for a worker. With replies 60 ms late and a ttr of 200 ms, a
// notification taken by an idle worker as soon as it arrives is attempted,
// with what is left of its reservation, rather than given back and
// reserved again for ever.
func TestShortTTRBehindASlowRedis(t *testing.T) {
	t.Parallel()
	client := server.Client(t)
	client.AddHook(lateReplies(60 * time.Millisecond))
	b := setupOn(t, client, redistest.Namespace(t))
	rec := newRecorder(nil)
	ttr := notify.Duration(200 * time.Millisecond)
	b.enqueue(t, "slow-1", ms(0), 0, func(r *notify.Request) { r.TTR = &ttr })
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Concurrency: 1})
	b.waitState(t, "slow-1", notify.StateSucceeded)
	require.Equal(t, 1, rec.attempts("slow-1"))
}

// lateReplies is a go-redis hook that hands every pipeline's replies over
// this much later than Redis gave them.
type lateReplies time.Duration

func (lateReplies) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (lateReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (l lateReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		time.Sleep(time.Duration(l))
		return err
	}
}

// requireStopsWithin stops d and fails the test unless Stop returns within
// limit.
func requireStopsWithin(t *testing.T, d *schedule.Dispatcher, limit time.Duration) {
	t.Helper()
	stopped := make(chan struct{})
	go func() { d.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(limit):
		t.Fatalf("Stop did not return within %s", limit)
	}
}

// logLines is a log destination that hands the test its lines, for a
// goroutine that may log after the test's own log is closed.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}

// TestStopReturnsWhenASenderIgnoresItsContext: Stop is bounded even when a
// sender (a library handler, typically) never returns. Its notification is
// not given back while it may still run: it stays reserved until its ttr
// runs out, as it would had the process died, and the outcome it reports
// after Stop is dropped with a warning.
func TestStopReturnsWhenASenderIgnoresItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, unblock := make(chan struct{}), make(chan struct{})
	rec := newRecorder(func(context.Context, *notify.Notification) error {
		close(started)
		<-unblock
		return nil
	})
	logs := make(logLines, 100)
	d := b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
		ShutdownTimeout: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(func() { close(unblock) }) // before the Stop of start's cleanup
	b.enqueue(t, "stuck", ms(0, 0), 0)
	<-started
	requireStopsWithin(t, d, 10*time.Second)
	got, err := b.store.Get(context.Background(), "stuck")
	require.NoError(t, err)
	require.Equal(t, notify.StateReserved, got.State, "not given back while its attempt may still run")
	require.Empty(t, got.History)

	unblock <- struct{}{} // the sender returns at last
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line := <-logs:
			if strings.Contains(line, "an attempt ended after shutdown") {
				return
			}
		case <-timeout:
			t.Fatal("no warning that the late outcome is not recorded")
		}
	}
}

// TestNoOverlapWithAnAttemptPastItsTTR: a handler that ignores its context
// outlives its ttr; the reaper counts the attempt as expired, but the retry
// does not start while that attempt still runs in this dispatcher. A loaded
// machine may let a later reservation run out too (a retry, or one given
// back while the first attempt runs), so the history is checked for its
// first and last outcomes and for overlaps, not for its length.
func TestNoOverlapWithAnAttemptPastItsTTR(t *testing.T) {
	t.Parallel()
	b := setup(t)
	released := make(chan struct{})
	rec := newRecorder(func(_ context.Context, n *notify.Notification) error {
		if n.Attempts == 0 {
			<-released
		}
		return nil
	})
	b.start(t, schedule.Config{Handlers: map[string]notify.Sender{"jobs": rec}, PollInterval: 50 * time.Millisecond})
	zero, ttr := notify.Duration(0), notify.Duration(300*time.Millisecond)
	n, err := b.policies.Resolve(&notify.Request{ID: "job1", Topic: "jobs", Channel: notify.ChannelPull,
		Backoff: ms(0, 0, 0, 0, 0, 0, 0, 0), Delay: &zero, TTR: &ttr}, time.Now(), 0)
	require.NoError(t, err)
	_, _, err = b.store.Enqueue(context.Background(), n, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := b.store.Get(context.Background(), "job1")
		return err == nil && len(got.History) >= 1
	}, 10*time.Second, 5*time.Millisecond)
	// Due at once, the retry would start within milliseconds.
	require.Never(t, func() bool { return rec.attempts("job1") > 1 }, 500*time.Millisecond, 5*time.Millisecond,
		"a second attempt started while the first still ran")
	close(released)
	got := b.waitState(t, "job1", notify.StateSucceeded)
	require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome, "the first attempt expired")
	require.Equal(t, notify.OutcomeSuccess, got.History[len(got.History)-1].Outcome)
	for _, a := range got.History[1 : len(got.History)-1] {
		require.Equal(t, notify.OutcomeTTRExpired, a.Outcome, "only expiries before the success")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Zero(t, rec.overlaps, "two attempts ran at once")
	require.GreaterOrEqual(t, len(rec.starts["job1"]), 2, "the first attempt and a retry ran")
}
