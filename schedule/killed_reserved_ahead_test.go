package schedule_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// pullTopics returns the names of count pull topics.
func pullTopics(count int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprint("jobs", i)
	}
	return out
}

// resolve builds the notification of a request with one attempt allowed
// and the given ttr, due now: of topic orders by webhook, or of the pull
// topic given.
func (b *testBundle) resolve(t *testing.T, id, pullTopic string, ttr time.Duration) *notify.Notification {
	t.Helper()
	d, tr := notify.Duration(0), notify.Duration(ttr)
	req := &notify.Request{ID: id, Topic: "orders", Channel: notify.ChannelWebhook, Target: "https://merchant.test/notify",
		Backoff: ms(0), Delay: &d, TTR: &tr, Policy: "fast"}
	if pullTopic != "" {
		req.Topic, req.Channel, req.Target = pullTopic, notify.ChannelPull, ""
	}
	n, err := b.policies.Resolve(req, time.Now(), 0)
	require.NoError(t, err)
	return n
}

// enqueueAll stores ns in one batch, so that their queues are woken at
// the same moment.
func (b *testBundle) enqueueAll(t *testing.T, ns []*notify.Notification) {
	t.Helper()
	reqs := make([]store.EnqueueRequest, len(ns))
	for i, n := range ns {
		reqs[i] = store.EnqueueRequest{Notification: n}
	}
	res, err := b.store.EnqueueBatch(context.Background(), reqs)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
}

// reservedOf returns how many notifications of the topics given are
// reserved.
func (b *testBundle) reservedOf(t *testing.T, topics []string) int64 {
	t.Helper()
	all, err := b.store.Stats(context.Background())
	require.NoError(t, err)
	var sum int64
	for _, topic := range topics {
		sum += all[topic].Reserved
	}
	return sum
}

// receipts describes the reservations of ids, for a failure message.
func (b *testBundle) receipts(t *testing.T, ids []string) string {
	t.Helper()
	var out []string
	for _, id := range ids {
		n, err := b.store.Get(context.Background(), id)
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%s %s %q", id, n.State, n.Receipt))
	}
	return strings.Join(out, "; ")
}

// waitReserved waits until at least that many notifications of the
// topics given are reserved, and no more are for 200ms: a dispatcher
// reserves ahead as many as its workers' pace says, which a loaded
// machine makes fewer.
func (b *testBundle) waitReserved(t *testing.T, topics []string, count int) {
	t.Helper()
	last, since := int64(-1), time.Now()
	require.Eventually(t, func() bool {
		if n := b.reservedOf(t, topics); n != last {
			last, since = n, time.Now()
		}
		return last >= int64(count) && time.Since(since) >= 200*time.Millisecond
	}, 15*time.Second, 5*time.Millisecond, "never %d reserved", count)
}

// startDelivering starts a dispatcher on the bundle's store that succeeds
// at every attempt of the webhook channel and of the pull topics given,
// and returns what it records.
func (b *testBundle) startDelivering(t *testing.T, topics []string) *recorder {
	t.Helper()
	rec := newRecorder(nil)
	handlers := map[string]notify.Sender{}
	for _, topic := range topics {
		handlers[topic] = rec
	}
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Handlers: handlers})
	return rec
}

// requireDeliveredOnce waits until id succeeded, and checks that the one
// attempt rec made is its only one.
func (b *testBundle) requireDeliveredOnce(t *testing.T, rec *recorder, id string) {
	t.Helper()
	got := b.waitState(t, id, notify.StateSucceeded)
	require.Len(t, got.History, 1, "%s: only the attempt that was made: %+v", id, got.History)
	require.Equal(t, 1, rec.attempts(id), id)
}

// requireCountedOnce waits until id, allowed one attempt, is dead, and
// checks that the attempt a killed dispatcher made counts, as one that ran
// out, and was not made again.
func (b *testBundle) requireCountedOnce(t *testing.T, rec *recorder, id string) {
	t.Helper()
	got := b.waitState(t, id, notify.StateDead)
	require.Len(t, got.History, 1, id)
	require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome, id)
	require.Zero(t, rec.attempts(id), "%s: its one attempt was made", id)
}

// primedChild enqueues a quick notification, starts TestQueuesChild on
// the bundle's namespace at addrs (the package's Redis when none) and
// waits until it delivered that one: an attempt was timed, so the child
// now reserves ahead of its workers.
func (b *testBundle) primedChild(t *testing.T, addrs []string, concurrency int, topics []string) (lines <-chan string, kill func()) {
	t.Helper()
	b.enqueue(t, "quick", ms(0), 0)
	if addrs == nil {
		addrs = []string{server.Addr}
	}
	lines, kill = startCrashChildOn(t, addrs, b.store.Namespace(), concurrency, topics)
	waitLine(t, lines, "done ")
	b.waitState(t, "quick", notify.StateSucceeded)
	return lines, kill
}

// holdThenWait has the child's one worker start "held", which it holds,
// then enqueues count webhook notifications "ahead0" and up, and waits
// until the child reserved at least one of them ahead of its worker, and
// no more.
func (b *testBundle) holdThenWait(t *testing.T, lines <-chan string, count int) []*notify.Notification {
	t.Helper()
	b.enqueueAll(t, []*notify.Notification{b.resolve(t, "held", "", time.Second)})
	require.Equal(t, "held", waitLine(t, lines, "started "))
	var ns []*notify.Notification
	for i := range count {
		ns = append(ns, b.resolve(t, fmt.Sprint("ahead", i), "", time.Second))
	}
	b.enqueueAll(t, ns)
	b.waitReserved(t, []string{"orders"}, 2)
	return ns
}

// TestCancelWhileReservedAheadThenKilled: a notification cancelled while
// it waits reserved ahead of a busy worker stays cancelled, with no
// attempt, when its dispatcher is then killed; those that waited with it
// are delivered once each, and the attempt the worker had started counts.
func TestCancelWhileReservedAheadThenKilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	lines, kill := b.primedChild(t, nil, 1, nil)
	const waiting = 4
	var cancelled string
	for _, n := range b.holdThenWait(t, lines, waiting) {
		if got, err := b.store.Get(ctx, n.ID); err == nil && got.State == notify.StateReserved {
			cancelled = n.ID
		}
	}
	require.NotEmpty(t, cancelled, "none waits reserved ahead")
	got, err := b.store.Cancel(ctx, cancelled)
	require.NoError(t, err)
	require.Equal(t, notify.StateCancelled, got.State)
	// The attempt of held started long before the kill.
	time.Sleep(100 * time.Millisecond)
	kill()

	rec := b.startDelivering(t, nil)
	b.requireCountedOnce(t, rec, "held")
	for i := range waiting {
		if id := fmt.Sprint("ahead", i); id != cancelled {
			b.requireDeliveredOnce(t, rec, id)
		}
	}
	got, err = b.store.Get(ctx, cancelled)
	require.NoError(t, err)
	require.Equal(t, notify.StateCancelled, got.State)
	require.Zero(t, got.Attempts)
	require.Empty(t, got.History)
	require.Zero(t, rec.attempts(cancelled))
}

// TestKilledBesideALiveDispatcher: two dispatchers share a namespace and
// its backlog; one is killed while its workers hold attempts and more
// notifications wait reserved ahead of them. The other delivers the rest:
// each notification the killed one never started once, none of them
// counted twice or dead-lettered unsent, no two attempts of one at once,
// and the attempts the killed one started count.
func TestKilledBesideALiveDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lines, kill := b.primedChild(t, nil, 2, nil)

	const count = 300
	var ns []*notify.Notification
	for i := range count {
		ns = append(ns, b.resolve(t, fmt.Sprint("n", i), "", time.Second))
	}
	b.enqueueAll(t, ns[:count/2])
	held := map[string]bool{waitLine(t, lines, "started "): true}
	held[waitLine(t, lines, "started ")] = true
	// It holds two attempts and reserves more ahead of its workers.
	b.waitReserved(t, []string{"orders"}, 3)
	// The other dispatcher joins, and more comes due.
	live := setupOn(t, server.Client(t), b.store.Namespace())
	live.policies = b.policies
	rec := live.startDelivering(t, nil)
	b.enqueueAll(t, ns[count/2:])
	time.Sleep(100 * time.Millisecond) // the held attempts started long before the kill
	kill()

	for _, n := range ns {
		if held[n.ID] {
			b.requireCountedOnce(t, rec, n.ID)
		} else {
			b.requireDeliveredOnce(t, rec, n.ID)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Zero(t, rec.overlaps)
}

// TestKilledOnACluster: on a three-master Redis Cluster, a dispatcher
// killed while its worker holds an attempt and notifications of several
// shards wait reserved ahead of it costs those no attempt: each is
// delivered once afterwards. The attempt it had started counts.
func TestKilledOnACluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	ns := redistest.Namespace(t)
	st, err := store.New(&store.Config{Client: cluster.Client(t), Namespace: ns, Shards: 8, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	b := &testBundle{store: st, policies: setup(t).policies}
	var addrs []string
	for _, node := range cluster.Nodes {
		addrs = append(addrs, node.Addr)
	}
	lines, kill := b.primedChild(t, addrs, 1, nil)
	ahead := b.holdThenWait(t, lines, 40)
	time.Sleep(100 * time.Millisecond) // the attempt of held started long before the kill
	kill()

	rec := b.startDelivering(t, nil)
	b.requireCountedOnce(t, rec, "held")
	for _, n := range ahead {
		b.requireDeliveredOnce(t, rec, n.ID)
	}
}

// TestKilledDispatcherOfSeveralQueuesBurnsNothingUnstarted: a dispatcher
// serving the webhook channel and several pull topics, with one worker,
// is killed while its worker holds one attempt and the notifications of
// the other queues, due at the same moment, wait for that worker. Those
// never reached a receiver: each is delivered afterwards, once, rather
// than dead-lettered unsent as an attempt that ran out. Only the attempt
// that was made counts.
//
// Whether the queues' reservations meet is up to timing: the test kills
// a dispatcher several times, each in a namespace of its own.
func TestKilledDispatcherOfSeveralQueuesBurnsNothingUnstarted(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		t.Run(fmt.Sprint(round), killedWithSeveralQueues)
	}
}

func killedWithSeveralQueues(t *testing.T) {
	b := setup(t)
	topics := pullTopics(16)
	lines, kill := b.primedChild(t, nil, 1, topics)

	ns := []*notify.Notification{b.resolve(t, "hook", "", time.Second)}
	for _, topic := range topics {
		ns = append(ns, b.resolve(t, "job-"+topic, topic, time.Second))
	}
	b.enqueueAll(t, ns)
	held := waitLine(t, lines, "started ")
	all := append([]string{"orders"}, topics...)
	b.waitReserved(t, all, 2)
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.ID
	}
	before := b.receipts(t, ids)
	kill()

	rec := b.startDelivering(t, topics)
	for _, id := range ids {
		if id == held {
			got := b.waitState(t, id, notify.StateDead)
			require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome, "the attempt the killed child made counts")
			continue
		}
		require.Eventually(t, func() bool {
			got, err := b.store.Get(context.Background(), id)
			return err == nil && (got.State == notify.StateSucceeded || got.State == notify.StateDead)
		}, 15*time.Second, 5*time.Millisecond, "%s never ended", id)
		got, err := b.store.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, notify.StateSucceeded, got.State,
			"%s never reached a receiver, yet is %s with history %+v (held %s; reservations at the kill: %s)",
			id, got.State, got.History, held, before)
		require.Len(t, got.History, 1, id)
		require.Equal(t, 1, rec.attempts(id), id)
	}
}

// TestAttemptStartedThroughABlipCounts: a dispatcher's worker starts an
// attempt reserved ahead during a short break in its link to Redis; the
// link comes back and the dispatcher goes on, its attempt still running,
// and is then cut off for good (killed). The attempt started some 300ms
// before, far more than 10ms: it counts, as one that ran out, and
// with one attempt allowed it is not made again; its receiver hears of it
// once.
func TestAttemptStartedThroughABlipCounts(t *testing.T) {
	t.Parallel()
	var xOnce atomic.Bool
	b, link, rec, _ := startAheadWhileDown(t, schedule.Config{}, 3*time.Second, func(ctx context.Context) error {
		if xOnce.CompareAndSwap(false, true) {
			<-ctx.Done() // runs until its timeout
			return ctx.Err()
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond)
	link.Down.Store(false)
	// The dispatcher goes on: it records the outcome of hold.
	b.waitState(t, "hold", notify.StateSucceeded)
	time.Sleep(200 * time.Millisecond)
	link.Down.Store(true) // killed, while x runs on (the policy's timeout is 1s)
	require.Equal(t, 1, rec.attempts("x"), "x still runs")

	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}})
	require.Eventually(t, func() bool {
		got, err := b.store.Get(context.Background(), "x")
		return err == nil && (got.State == notify.StateDead || got.State == notify.StateSucceeded)
	}, 15*time.Second, 5*time.Millisecond)
	got, err := b.store.Get(context.Background(), "x")
	require.NoError(t, err)
	require.Equal(t, 1, rec.attempts("x"), "x was attempted again, its first attempt uncounted: history %+v", got.History)
	require.Equal(t, notify.StateDead, got.State)
	require.Equal(t, notify.OutcomeTTRExpired, got.History[0].Outcome)
}

// startAheadWhileDown starts a dispatcher of cfg with one worker, on the
// namespace of the bundle it returns but behind a link to Redis the test
// cuts (link.Down), and has its worker start "x" (ttr xTTR, sent by sendX),
// reserved ahead while "hold" kept the worker busy, once the link is cut.
// It returns, with that dispatcher, when x has started: the start cannot be
// written.
func startAheadWhileDown(t *testing.T, cfg schedule.Config, xTTR time.Duration, sendX func(context.Context) error) (*testBundle, *heraldtest.LoseReservation, *recorder, *schedule.Dispatcher) {
	t.Helper()
	b := setup(t)
	link := &heraldtest.LoseReservation{} // Down: every command fails unsent
	client := server.Client(t)
	client.AddHook(link)
	a := setupOn(t, client, b.store.Namespace())
	a.policies = b.policies

	holding, release := make(chan struct{}), make(chan struct{})
	rec := newRecorder(func(ctx context.Context, n *notify.Notification) error {
		switch n.ID {
		case "hold":
			close(holding)
			<-release
		case "x":
			return sendX(ctx)
		}
		return nil
	})
	cfg.Senders, cfg.Concurrency = map[string]notify.Sender{notify.ChannelWebhook: rec}, 1
	d := a.start(t, cfg)

	b.enqueueAll(t, []*notify.Notification{b.resolve(t, "quick", "", time.Second)})
	b.waitState(t, "quick", notify.StateSucceeded) // an attempt was timed: the dispatcher reserves ahead
	b.enqueueAll(t, []*notify.Notification{b.resolve(t, "hold", "", 10*time.Second)})
	<-holding
	b.enqueueAll(t, []*notify.Notification{b.resolve(t, "x", "", xTTR)})
	b.waitState(t, "x", notify.StateReserved) // ahead of the busy worker

	link.Down.Store(true)
	close(release) // the worker takes x and starts it
	require.Eventually(t, func() bool { return rec.attempts("x") == 1 }, 5*time.Second, time.Millisecond)
	return b, link, rec, d
}

// TestUnwrittenStartsAreReported: while the link to Redis is down, the
// start of an attempt reserved ahead cannot be written; the dispatcher says
// so, in its log and to its observer (op "start"), while it runs and again
// as it stops, since should it die another dispatcher would give that
// attempt back uncounted.
func TestUnwrittenStartsAreReported(t *testing.T) {
	t.Parallel()
	obs := &observed{finished: map[string][]notify.Action{}}
	var logs heraldtest.Buffer
	cfg := schedule.Config{Observer: obs, ShutdownTimeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	_, _, _, d := startAheadWhileDown(t, cfg, 10*time.Second, func(context.Context) error { return nil })
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "cannot record which attempts reserved ahead started")
	}, 5*time.Second, 5*time.Millisecond, "no warning while running; log:\n%s", logs.String())
	running := obs.failures("start")
	require.Positive(t, running)

	requireStopsWithin(t, d, 10*time.Second)
	require.Contains(t, logs.String(), "could not record which attempts reserved ahead started before the shutdown")
	require.Greater(t, obs.failures("start"), running, "the failure at shutdown is reported too")
}
