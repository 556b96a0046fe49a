// Package schedule is Herald's dispatcher: it reserves due notifications in
// batches, runs each attempt on a fixed pool of workers through the sender
// of its channel (or a library-mode handler registered for its topic),
// records the outcomes in batches, reaps reservations whose ttr ran out, and
// deletes finished records past their retention and dead ones past their
// dead retention.
//
// # Timing
//
// The dispatcher does not poll on a fixed tick. It remembers, for every shard
// of every queue it serves, when the earliest notification is due, sleeps
// until the earliest of those, and wakes early when an enqueue or a retry
// publishes an earlier head. A notification due now therefore starts within
// milliseconds, and none starts before it is due: the reserve script only
// takes notifications whose due time has passed by the dispatcher's clock,
// and due times are stored rounded up to the millisecond. That clock is its
// host's: one that runs ahead starts attempts early by as much, and a skew
// between hosts beyond ReapGrace lets a reaper take back a reservation
// whose attempt still runs. So each dispatcher compares its clock with
// Redis's every minute, and warns while they differ by more than 100ms.
//
// # Throughput
//
// Reservations run ahead of the workers by up to Prefetch notifications, so
// that under a backlog each reservation moves a large batch instead of one
// notification per freed worker: as many as the workers start within about
// a tenth of a second, fewer while reserved ones wait too long for a worker
// (see Config.Prefetch). Where attempts are slow, a burst is thus shared
// with the idle workers of other dispatchers rather than queued here. A
// notification cancelled while it waits here for a worker is dropped: its
// cancel announces it on the wake channel. Outcomes are written together,
// one script per shard for all the attempts that ended while the previous
// write was under way.
//
// # Safety
//
// Reservations carry a receipt and a deadline (now + ttr). An attempt's
// context ends at that deadline, the reaper only takes a reservation back
// after its deadline plus a grace for clock skew, and a finish with a stale
// receipt changes nothing, so two attempts of one notification never overlap
// however many dispatchers run. A sender that ignores the end of its
// context can outlive its reservation: the dispatcher running it then holds
// back the retry the reaper made due until the sender returns, and warns
// that its outcome is dropped, but another dispatcher cannot know of it, so
// senders must heed their context. What a reservation whose answer was
// lost (a read timeout, a broken connection, a Stop) reserved is given back
// unattempted, by the store at once or, when Redis does not answer, by the
// dispatcher once it does, rather than left to wait out its ttr and count
// an attempt never made.
//
// A dispatcher killed outright leaves its reservations to the reaper. An
// attempt it had started counts, as one that ran out (ttr_expired); one it
// had reserved and not started goes back uncounted. The starts are
// recorded in Redis for this (store.Start): one number per queue, raised
// as the workers start notifications in the order they were reserved, and
// written in the background every 10ms at most, so that an attempt
// started within about that long before the kill may go back uncounted
// too, and be made again.
package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// Defaults of Config.
const (
	ConcurrencyDefault     = 64
	BatchDefault           = 100
	PollIntervalDefault    = time.Second
	ReapIntervalDefault    = time.Second
	ReapGraceDefault       = time.Second
	ShutdownTimeoutDefault = 10 * time.Second
	// finishBatchMax bounds the outcomes one write records.
	finishBatchMax = 1000
	// finishLinger is how long the first outcome of a write waits for
	// others, and finishLingerBatch how many end the wait early.
	finishLinger      = 5 * time.Millisecond
	finishLingerBatch = 128
	// cancelGrace is how long Stop waits for attempts to end once their
	// context is cancelled. A sender that ignores its context would
	// otherwise hold Stop, and the process, for ever.
	cancelGrace = time.Second
)

// Store is what the dispatcher needs of the store; *store.Store implements
// it.
type Store interface {
	Shards(ctx context.Context) (int, error)
	Now() time.Time
	ReserveAhead(ctx context.Context, queue string, shards []int, limit int) ([]*notify.Notification, []store.Head, error)
	Start(n *notify.Notification)
	Started(ctx context.Context) error
	Finish(ctx context.Context, items []store.Finish) ([]error, error)
	Expired(ctx context.Context, grace time.Duration, limit int) ([]*notify.Notification, error)
	Sweep(ctx context.Context, limit int) (deleted int, more bool, err error)
	Subscribe(ctx context.Context, onCancel func(id, receipt string)) *store.Subscription
	ClockSkew(ctx context.Context) (skew, within time.Duration, err error)
	GiveBack(ctx context.Context, lost store.LostReservation) (int, error)
}

var _ Store = (*store.Store)(nil)

// Observer is told about attempts and store failures; the metrics adapter
// implements it. Calls come from many goroutines and must not block.
type Observer interface {
	// AttemptFinished reports an attempt whose outcome the store recorded,
	// what was done with the notification, and how late the attempt started
	// (start minus due time): notify.ActionCancelled for one whose
	// notification was cancelled while it ran, which stays cancelled. An
	// attempt whose outcome could not be recorded (its reservation was
	// taken over) is not reported.
	AttemptFinished(n *notify.Notification, a notify.Attempt, action notify.Action, lateness time.Duration)
	// StoreError reports a failed store call ("reserve", "finish", "reap",
	// "sweep", "start": the write of which attempts reserved ahead started).
	StoreError(op string, err error)
}

// Tracer traces attempts; the tracing package implements it with
// OpenTelemetry. Calls come from many goroutines.
type Tracer interface {
	// StartAttempt is called as an attempt of n starts, with the context
	// its sender gets, and returns the context to give the sender instead.
	// It may set headers on n for this attempt (a trace context): senders
	// send them, and they are not stored. The returned function is called
	// once the attempt has ended, with the outcome and next step about to
	// be recorded.
	StartAttempt(ctx context.Context, n *notify.Notification) (context.Context, func(f *store.Finish))
	// AttemptRecorded is called once the reaper has recorded an attempt
	// whose reservation ran out (f, a ttr_expired): it ran from its
	// reservation to its deadline wherever it ran, a consumer that never
	// answered or a dispatcher that died, and no span of its own ended.
	AttemptRecorded(ctx context.Context, f *store.Finish)
}

// Config configures a Dispatcher.
type Config struct {
	// Store is the notifications' state. Required.
	Store Store
	// Senders deliver the push channels, by channel name (webhook, sms,
	// poll). A notification whose channel has no sender fails permanently.
	// With no senders the dispatcher serves only Handlers.
	Senders map[string]notify.Sender
	// Handlers are library-mode consumers, by topic: the dispatcher reserves
	// the topic's pull queue and calls the handler, as an HTTP consumer
	// would reserve and ack.
	Handlers map[string]notify.Sender
	// PoliciesFunc returns the current policies (it may change on reload).
	// Default: the built-in default policy only.
	PoliciesFunc func() *policy.Set
	// Concurrency is the most attempts running at once: the number of
	// workers. Default 64.
	Concurrency int
	// Prefetch is the most due notifications that may wait reserved for a
	// free worker, so that a backlog drains in large reservations. Fewer
	// wait where attempts are slow: as many as the workers start within
	// about 100ms, by the average attempt's time, and none before an
	// attempt was timed, so that other dispatchers' idle workers take the
	// rest of a burst; none while the subscription to wake-ups is down,
	// when a cancel of one waiting could go unheard. Their ttr runs while
	// they wait: one that waited until its reservation no longer leaves its
	// attempt the policy's timeout (or nine tenths of its ttr, where
	// shorter) is given back unstarted and reserved afresh, and the
	// dispatcher then reserves fewer ahead, growing back while workers find
	// nothing waiting. Default Batch; -1 reserves only for idle workers.
	Prefetch int
	// Batch is the most notifications one reservation takes from one shard
	// and the most the reaper and sweeper move per call. Default 100.
	Batch int
	// PollInterval is the longest the dispatcher sleeps without asking Redis,
	// also while Redis is unreachable: a safety net for wake-ups lost while
	// disconnected, and the most it waits to resume after an outage.
	// Default 1s.
	PollInterval time.Duration
	// ReapInterval is how often expired reservations are taken back and
	// retention is enforced. Default 1s.
	ReapInterval time.Duration
	// ReapGrace is how long past its deadline a reservation is left alone,
	// to absorb clock skew between dispatchers. Default 1s.
	ReapGrace time.Duration
	// ShutdownTimeout is how long Stop waits for running attempts before it
	// cancels them and releases their notifications. An attempt that does
	// not end within a second of that is left running, its outcome
	// unrecorded: its notification stays reserved until its ttr runs out,
	// when the reaper retries it. Stop then waits as long again, at most,
	// for the outcomes to be recorded; those Redis has not taken by then
	// are left to the reaper too. Default 10s.
	ShutdownTimeout time.Duration
	// Endpoints finds the endpoints notifications name, whose max_in_flight
	// and rate every dispatcher together respects. nil: no limits.
	Endpoints endpoint.Lookup
	// Observer receives attempt outcomes and store errors. Optional.
	Observer Observer
	// Tracer traces attempts. Nil, the default, traces nothing and costs
	// nothing.
	Tracer Tracer
	// Logger defaults to a warn-level text handler on stderr. A store call
	// that keeps failing, as through a Redis outage, is warned of once and
	// then every 30s while it fails, and logged at info once it works
	// again.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.Concurrency = cmp.Or(out.Concurrency, ConcurrencyDefault)
	out.Batch = cmp.Or(out.Batch, BatchDefault)
	out.Prefetch = cmp.Or(out.Prefetch, out.Batch)
	if out.Prefetch < 0 {
		out.Prefetch = 0
	}
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	out.ReapInterval = cmp.Or(out.ReapInterval, ReapIntervalDefault)
	out.ReapGrace = cmp.Or(out.ReapGrace, ReapGraceDefault)
	out.ShutdownTimeout = cmp.Or(out.ShutdownTimeout, ShutdownTimeoutDefault)
	if out.PoliciesFunc == nil {
		set, _ := policy.NewSet(nil, nil)
		out.PoliciesFunc = func() *policy.Set { return set }
	}
	if out.Observer == nil {
		out.Observer = nopObserver{}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("schedule: Store is required")
	case len(c.Senders) == 0 && len(c.Handlers) == 0:
		return errors.New("schedule: give at least one sender or handler")
	case c.Concurrency < 1 || c.Batch < 1:
		return errors.New("schedule: concurrency and batch must be positive")
	case c.ShutdownTimeout < 0:
		return errors.New("schedule: ShutdownTimeout must not be negative")
	}
	for topic := range c.Handlers {
		if !notify.ValidTopic(topic) {
			return fmt.Errorf("schedule: handler topic %q is not a valid topic", topic)
		}
	}
	return nil
}

type nopObserver struct{}

func (nopObserver) AttemptFinished(*notify.Notification, notify.Attempt, notify.Action, time.Duration) {
}
func (nopObserver) StoreError(string, error) {}

// Dispatcher runs attempts. Start it once; Stop it once or more.
type Dispatcher struct {
	cfg   *Config
	store Store
	log   *slog.Logger

	// capacity counts the notifications the dispatcher may still reserve:
	// Concurrency and as many ahead as it reserves now (up to Prefetch),
	// less those reserved whose attempt has not ended.
	capacity *capacity
	// work holds reserved notifications waiting for a worker.
	work chan queued
	// finishes carries ended attempts to the finisher, which records them
	// in batches.
	finishes chan pendingFinish
	// finishMu guards finishesClosed, which Stop sets as it closes
	// finishes: an attempt left running past the shutdown must not send on
	// it then. A worker waiting to send holds it only until finishCtx is
	// cancelled, so that Stop cannot wait behind it for longer.
	finishMu       sync.RWMutex
	finishesClosed bool

	mu       sync.Mutex // guards started, stop
	started  bool
	stop     context.CancelFunc
	stopOnce sync.Once
	ready    chan struct{}

	// attemptCtx outlives the reserve loops at shutdown and is cancelled
	// only when ShutdownTimeout runs out, releasing what still runs.
	attemptCtx    context.Context
	cancelAttempt context.CancelFunc
	// finishCtx bounds the finisher's writes and a worker's wait to queue
	// an outcome; Stop cancels it ShutdownTimeout after it stops waiting
	// for attempts, so that an outage cannot hold Stop until the longest
	// reservation runs out.
	finishCtx    context.Context
	giveUpFinish context.CancelFunc

	// attemptNS is how long an attempt lasts, in ns, averaged over recent
	// ones; 0 until one was timed (ahead).
	attemptNS atomic.Int64

	// sub is the subscription to wake-ups and cancels.
	sub *store.Subscription

	// waitingMu guards waiting, reserving and early. waiting holds the
	// reservations handed to the workers and not yet taken by one, by
	// reservation, true once a cancel ended one meanwhile. By
	// reservation, not by id: a notification cancelled, then enqueued
	// again and reserved afresh, may wait here twice. reserving counts
	// the reservations under way, and early holds the cancels heard
	// meanwhile for reservations not waiting: a cancel can be announced
	// between Redis reserving a notification and the reserve loop listing
	// it.
	waitingMu sync.Mutex
	waiting   map[reservation]bool
	reserving int
	early     map[reservation]bool

	// runningMu guards running, the ids whose attempt a sender of this
	// dispatcher is making: one that outlived its ttr, ignoring its
	// context, still runs when the reaper has made its retry due.
	runningMu sync.Mutex
	running   map[string]struct{}

	// pauses is what is paused, read from the store (pause.go).
	pauses pauses
	// limits is what the dispatcher knows of endpoints at their limits
	// (limit.go).
	limits limits
	// streakEnded holds the endpoints without disable_after whose failing
	// streak this dispatcher has ended since (health.go).
	streakEnded sync.Map

	loops    sync.WaitGroup // reserve loops, maintenance, wake-up fan-out, pauses
	workers  sync.WaitGroup
	finisher sync.WaitGroup
}

// pendingFinish is an ended attempt on its way to the store, with what the
// observer is told once it is recorded.
type pendingFinish struct {
	store.Finish
	lateness time.Duration
	// report is false for a notification given back unstarted: no attempt
	// to report.
	report bool
}

// New returns a dispatcher for cfg.
func New(cfg *Config) (*Dispatcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	total := cfg.Concurrency + cfg.Prefetch
	return &Dispatcher{
		cfg:      cfg,
		store:    cfg.Store,
		log:      cfg.Logger,
		capacity: newCapacity(cfg.Concurrency, total),
		work:     make(chan queued, total),
		finishes: make(chan pendingFinish, total),
		ready:    make(chan struct{}),
		running:  map[string]struct{}{},
		waiting:  map[reservation]bool{},
		early:    map[reservation]bool{},
		pauses:   pauses{read: make(chan struct{})},
	}, nil
}

// Ready is closed once the dispatcher listens for wake-ups, after which a
// notification due now starts without waiting for a poll.
func (d *Dispatcher) Ready() <-chan struct{} { return d.ready }

// Start launches the dispatcher's goroutines and returns at once. It fails
// only when called twice.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return errors.New("schedule: dispatcher already started")
	}
	d.started = true
	ctx, d.stop = context.WithCancel(ctx)
	d.attemptCtx, d.cancelAttempt = context.WithCancel(context.WithoutCancel(ctx))
	d.finishCtx, d.giveUpFinish = context.WithCancel(context.WithoutCancel(ctx))

	queues := map[string]chan store.Wake{}
	if len(d.cfg.Senders) > 0 {
		queues[store.QueuePush] = make(chan store.Wake, 64)
	}
	for topic := range d.cfg.Handlers {
		queues[store.PullQueue(topic)] = make(chan store.Wake, 64)
	}
	d.startPauses(ctx, slices.Collect(maps.Keys(queues)))
	d.sub = d.store.Subscribe(ctx, d.cancelWaiting)
	d.loops.Add(2 + len(queues))
	go func() {
		defer d.loops.Done()
		d.fanOutWakes(ctx, queues)
	}()
	for _, q := range slices.Sorted(maps.Keys(queues)) {
		go func() {
			defer d.loops.Done()
			d.reserveLoop(ctx, q, queues[q])
		}()
	}
	go func() {
		defer d.loops.Done()
		d.maintenanceLoop(ctx)
	}()
	d.workers.Add(d.cfg.Concurrency)
	for range d.cfg.Concurrency {
		go func() {
			defer d.workers.Done()
			d.worker(ctx)
		}()
	}
	d.finisher.Add(1)
	go func() {
		defer d.finisher.Done()
		d.finishLoop()
	}()
	d.log.InfoContext(ctx, "schedule: dispatcher started", "queues", len(queues), "concurrency", d.cfg.Concurrency,
		"prefetch", d.cfg.Prefetch)
	return nil
}

// Stop stops reserving, gives back the notifications reserved ahead that no
// worker started, waits up to ShutdownTimeout for running attempts,
// releases those still running (without counting an attempt), records
// every outcome and start, and returns. An attempt that ignores the
// cancellation for a further second is left behind, reserved, as if its
// process had died. A second Stop does nothing.
func (d *Dispatcher) Stop() {
	d.mu.Lock()
	stop := d.stop
	d.mu.Unlock()
	if stop == nil {
		return
	}
	d.stopOnce.Do(func() {
		stop()
		d.loops.Wait()
		close(d.work) // no reserve loop sends any more
		// What was reserved ahead goes back now, not once a worker is free
		// of an attempt that may take the whole ShutdownTimeout: another
		// dispatcher can start it meanwhile. Nothing reserves any more, so
		// the room it frees is not given back.
		d.workers.Add(1)
		go func() {
			defer d.workers.Done()
			for q := range d.work {
				if !d.cancelledWhileWaiting(q.n) {
					d.releaseAt(q.n, q.n.DueAt(d.store.Now()))
				}
			}
		}()
		done := make(chan struct{})
		go func() { d.workers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(d.cfg.ShutdownTimeout):
			d.log.Warn("schedule: shutdown timeout; releasing running attempts")
			d.cancelAttempt()
			select {
			case <-done:
			case <-time.After(cancelGrace):
				d.log.Warn("schedule: attempts ignored their cancellation; leaving them reserved until their ttr runs out")
			}
		}
		// Armed before the lock: a worker that waits to queue an outcome
		// while Redis takes none holds the lock until the give-up.
		giveUp := time.AfterFunc(d.cfg.ShutdownTimeout, d.giveUpFinish)
		d.finishMu.Lock()
		d.finishesClosed = true
		close(d.finishes)
		d.finishMu.Unlock()
		d.finisher.Wait()
		giveUp.Stop()
		d.giveUpFinish()
		d.cancelAttempt()
		// The starts are recorded before Stop returns, for any attempt left
		// running: nothing is written after it.
		started, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
		defer cancel()
		if err := d.store.Started(started); err != nil {
			d.cfg.Observer.StoreError("start", err)
			d.log.Error("schedule: could not record which attempts reserved ahead started before the shutdown; "+
				"those still reserved may be given back uncounted once their reservations expire, and made again",
				"error", err)
		}
	})
}

// fanOutWakes routes wake-ups to the loop of their queue.
func (d *Dispatcher) fanOutWakes(ctx context.Context, queues map[string]chan store.Wake) {
	select {
	case <-d.sub.Ready:
		close(d.ready)
	case <-ctx.Done():
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case w, ok := <-d.sub.Wakes:
			if !ok {
				return
			}
			if ch, ok := queues[w.Queue]; ok {
				select {
				case ch <- w:
				default: // the loop is busy reserving and will re-plan anyway
				}
			}
		}
	}
}

// never marks a shard whose queue is empty: only a wake-up or the next poll
// makes the loop look at it again.
const never = math.MaxInt64

// reserveLoop serves one queue until ctx ends: it waits until a shard has
// due work and there is room to take it, reserves as much as there is room
// for in one call, and hands what it got to the workers.
func (d *Dispatcher) reserveLoop(ctx context.Context, queue string, wakes <-chan store.Wake) {
	shards, ok := d.shards(ctx)
	if !ok {
		return
	}
	select {
	case <-d.pauses.read:
	case <-ctx.Done():
		return
	}
	// heads[s] is the due time (ms) of shard s's earliest notification as
	// last seen; 0 means "look now", never means empty.
	heads := make([]int64, shards)
	lastPoll := d.store.Now()
	failures, rotate := 0, 0
	failing := d.newFailureLog("schedule: reserve failed; backing off", "schedule: reserve recovered", "queue", queue)
	// lowWater is the room worth a round trip while workers are busy: under
	// a backlog the loop waits for this much rather than reserving one
	// notification per freed worker.
	lowWater := max(1, min(d.cfg.Batch, d.capacity.total/4))
	// lost keeps the reservations whose answers were lost, to be given
	// back once Redis answers again.
	var lost store.Unanswered
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		now := d.store.Now()
		if now.Sub(lastPoll) >= d.cfg.PollInterval {
			clear(heads)
			lastPoll = now
		}
		nowMS := now.UnixMilli()
		var due []int
		next := lastPoll.Add(d.cfg.PollInterval).UnixMilli()
		for s, h := range heads {
			if h <= nowMS {
				due = append(due, s)
			} else {
				next = min(next, h)
			}
		}
		if len(due) > 0 {
			changed := d.capacity.changed() // before the look, so no give is missed
			room := d.capacity.free(d.ahead())
			if room < lowWater && (room == 0 || len(d.work) > 0) {
				// Busy: wait for room, or for news of this queue.
				select {
				case <-ctx.Done():
					return
				case <-changed:
				case w := <-wakes:
					heads[w.Shard%shards] = min(heads[w.Shard%shards], w.Due.UnixMilli())
				}
				continue
			}
			got := d.capacity.take(min(room, len(due)*d.cfg.Batch, store.MaxReserve))
			ask := pickShards(due, got, rotate)
			rotate++
			d.reserveStarts()
			mark, sent := d.sub.Mark(), time.Now()
			// Every one is reserved ahead, and its start recorded
			// (store.Start), so that a killed dispatcher's unstarted ones
			// go back uncounted: even one an idle worker would take at
			// once may wait behind another queue's in the channel.
			items, hs, err := d.store.ReserveAhead(ctx, queue, ask, got)
			d.listReserved(items)
			d.capacity.give(got - len(items))
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				lost.Keep(err)
				failures++
				wait := d.retryDelay(failures)
				d.cfg.Observer.StoreError("reserve", err)
				failing.failed(ctx, err, "retry_in", wait)
				sleep(ctx, wait)
				continue
			}
			failures = 0
			failing.ok(ctx)
			given, _ := lost.GiveBack(ctx, d.store)
			for queue, n := range given {
				d.log.WarnContext(ctx, "schedule: a reservation's answer was lost; gave back what it had reserved, unattempted",
					"queue", queue, "notifications", n)
			}
			for _, h := range hs {
				if h.Due.IsZero() {
					heads[h.Shard] = never
				} else {
					heads[h.Shard] = h.Due.UnixMilli()
				}
			}
			handed := d.store.Now()
			for _, n := range items {
				d.work <- queued{n, handed, mark, sent} // never blocks: work holds as many as capacity
			}
			continue
		}
		timer.Reset(time.Duration(next-nowMS) * time.Millisecond)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case w := <-wakes:
			heads[w.Shard%shards] = min(heads[w.Shard%shards], w.Due.UnixMilli())
			drainTimer(timer)
		}
	}
}

// shards returns the store's shard count, waiting out a Redis that cannot
// tell it yet; false when ctx ends first.
func (d *Dispatcher) shards(ctx context.Context) (int, bool) {
	failing := d.newFailureLog("schedule: cannot read the shard count; retrying", "schedule: reading the shard count recovered")
	var n int
	ok := d.retry(ctx, failing, func() error {
		var err error
		if n, err = d.store.Shards(ctx); err != nil && ctx.Err() == nil {
			d.cfg.Observer.StoreError("reserve", err)
		}
		return err
	})
	return n, ok
}

// retry calls op until it succeeds, waiting retryDelay between failures
// and logging them to failing; false when ctx ends first.
func (d *Dispatcher) retry(ctx context.Context, failing *failureLog, op func() error) bool {
	for failures := 1; ; failures++ {
		err := op()
		if err == nil {
			failing.ok(ctx)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		wait := d.retryDelay(failures)
		failing.failed(ctx, err, "retry_in", wait)
		sleep(ctx, wait)
	}
}

// minShardBatch is the smallest share of a reservation worth a shard: each
// shard a reservation serves costs Redis the same commands (a script call of
// its own on a Cluster) however few it moves, so a reservation serves a few
// due shards in large batches rather than every due shard a notification or
// two.
const minShardBatch = 32

// pickShards chooses which of the due shards a reservation of n serves: one
// per minShardBatch, starting at a rotating place so that the shards left
// out now are served first by the next reservations.
func pickShards(due []int, n, rotate int) []int {
	k := min(len(due), max(1, n/minShardBatch))
	out := make([]int, k)
	for i := range out {
		out[i] = due[(rotate+i)%len(due)]
	}
	return out
}

func drainTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}

// retryDelay is the wait after the n-th consecutive store failure: 10ms
// doubling, so an outage costs no busy loop, to at most the poll interval
// (and 5s), the longest the dispatcher goes without asking Redis, so that
// it resumes soon after Redis is back however long the outage was.
func (d *Dispatcher) retryDelay(n int) time.Duration {
	return min(10*time.Millisecond<<min(n-1, 10), 5*time.Second, d.cfg.PollInterval)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// worker runs the attempts handed to it until the work channel closes. Once
// the dispatcher stops, what is left in the channel was reserved ahead and
// never started: it is given back as it was, due at its own time.
//
// A notification reserved ahead that waited for a worker until its
// reservation no longer leaves an attempt its time is given back unstarted
// too, and reserved afresh: started, it would be cut short by the ttr it
// spent waiting, or run after the reaper took it back and counted an
// attempt that never was. Fewer are then reserved ahead (capacity.shrink).
// So is one whose cancel may have answered unheard (heard): reserved
// afresh, it is found cancelled.
func (d *Dispatcher) worker(ctx context.Context) {
	for q, ok := d.next(); ok; q, ok = d.next() {
		n := q.n
		p := d.cfg.PoliciesFunc().PolicyFor(n)
		heard := d.heard(ctx, q)
		switch {
		case d.cancelledWhileWaiting(n):
			d.log.DebugContext(ctx, "schedule: dropped a notification cancelled while it waited for a worker", "id", n.ID)
		case ctx.Err() != nil:
			d.releaseAt(n, n.DueAt(d.store.Now()))
		case !heard:
			// A cancel of it may have been answered unheard: given back,
			// it is reserved again unless it was.
			d.releaseAt(n, n.DueAt(d.store.Now()))
			d.log.DebugContext(ctx, "schedule: gave back a notification reserved ahead: whether it was cancelled meanwhile was not heard in time", "id", n.ID)
		case !startable(&p, n, d.store.Now().Sub(q.handed)):
			d.capacity.shrink()
			d.releaseAt(n, n.DueAt(d.store.Now()))
			d.log.DebugContext(ctx, "schedule: gave back a notification that waited too long for a worker", "id", n.ID)
		case !d.park(ctx, n):
			d.run(ctx, n, &p)
		}
		d.capacity.give(1)
	}
}

// run makes an attempt of n within its endpoint's limits, unless the
// attempt this dispatcher made of n before still runs: its sender ignored
// the end of its context and the reaper, past the ttr, made n due again.
// Then n is given back unattempted, to wait for it.
func (d *Dispatcher) run(ctx context.Context, n *notify.Notification, p *policy.Policy) {
	d.runningMu.Lock()
	_, busy := d.running[n.ID]
	if !busy {
		d.running[n.ID] = struct{}{}
	}
	d.runningMu.Unlock()
	if busy {
		d.log.DebugContext(ctx, "schedule: an earlier attempt still runs past its ttr; the next waits for it", "id", n.ID)
		d.giveBack(n, d.store.Now().Add(d.cfg.PollInterval))
		return
	}
	defer func() {
		d.runningMu.Lock()
		delete(d.running, n.ID)
		d.runningMu.Unlock()
	}()
	if release, ok := d.acquire(ctx, n); ok {
		// Its start is recorded for the reaper, should this dispatcher
		// die while it runs.
		d.store.Start(n)
		err := d.attempt(n, p)
		release()
		d.recordHealth(ctx, n, err)
	}
}

// aheadHorizon is about how long a notification reserved ahead may wait
// for a worker: long enough for the next reservation to come before the
// workers run out of work, short enough that a burst of slow attempts is
// left to the idle workers of other dispatchers rather than queued behind
// this one's busy workers.
const aheadHorizon = 100 * time.Millisecond

// ahead returns how many notifications may wait reserved for a worker: as
// many as the workers start within aheadHorizon, up to Prefetch; none
// until an attempt was timed, and none while the subscription is down,
// since one that then waited store.HeardWithin could not be told from one
// cancelled unheard, and would go back (heard) until the next poll.
func (d *Dispatcher) ahead() int {
	took := d.attemptNS.Load()
	if took == 0 || d.sub.Mark() == 0 {
		return 0
	}
	return int(min(int64(d.cfg.Prefetch), int64(d.cfg.Concurrency)*int64(aheadHorizon)/took))
}

// timed folds an attempt's duration into attemptNS.
func (d *Dispatcher) timed(took time.Duration) {
	for {
		old := d.attemptNS.Load()
		next := int64(took)
		if old != 0 {
			next = old + (next-old)/8
		}
		if d.attemptNS.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

// cancelWaiting marks the notification id, reserved with receipt, as
// cancelled if it waits here for a worker, so that no worker attempts it:
// its cancel was answered "cancelled", and a reminder cancelled must not
// go out. An attempt already started goes on, as a cancel says.
func (d *Dispatcher) cancelWaiting(id, receipt string) {
	d.waitingMu.Lock()
	defer d.waitingMu.Unlock()
	k := reservation{id, receipt}
	switch _, ok := d.waiting[k]; {
	case ok:
		d.waiting[k] = true
	case d.reserving > 0:
		// Perhaps of a reservation under way, not yet listed.
		d.early[k] = true
	}
}

// reservation names the reservation receipt of the notification id.
type reservation struct{ id, receipt string }

// reserveStarts notes a reservation under way: the cancels heard until it
// is listed are kept for it.
func (d *Dispatcher) reserveStarts() {
	d.waitingMu.Lock()
	defer d.waitingMu.Unlock()
	d.reserving++
}

// listReserved lists what a reservation got as waiting for a worker, each
// dropped already if a cancel of it was heard while the reservation was
// under way, and ends that reservation. The cancel of a reserved
// notification is published after the reservation ran, so it is heard
// either while the reservation is under way or once it is listed.
func (d *Dispatcher) listReserved(items []*notify.Notification) {
	d.waitingMu.Lock()
	defer d.waitingMu.Unlock()
	for _, n := range items {
		k := reservation{n.ID, n.Receipt}
		d.waiting[k] = d.early[k] // cancelled before it was listed
	}
	if d.reserving--; d.reserving == 0 {
		clear(d.early)
	}
}

// cancelledWhileWaiting takes n, which a worker is about to start, off the
// notifications waiting here, and reports whether a cancel ended its
// reservation meanwhile.
func (d *Dispatcher) cancelledWhileWaiting(n *notify.Notification) bool {
	d.waitingMu.Lock()
	defer d.waitingMu.Unlock()
	k := reservation{n.ID, n.Receipt}
	cancelled := d.waiting[k]
	delete(d.waiting, k)
	return cancelled
}

// queued is a reserved notification waiting for a worker, and when the
// reservation handed it over. mark and sent are the subscription's
// connection and the time as the reservation was sent, for heard.
type queued struct {
	n      *notify.Notification
	handed time.Time
	mark   uint64
	sent   time.Time
}

// heard reports whether q may start as far as cancels go: whether no
// cancel of it can have been answered yet, or every one answered has been
// heard. A cancel is answered store.HeardWithin after Redis announced it,
// and Redis announces it after the reservation, which was sent at q.sent:
// a notification that waited less than that since needs nothing, and one
// that waited longer needs the subscription to have heard everything
// announced until store.HeardWithin ago, on the connection it had then. It
// waits up to store.HeardWithin for that.
func (d *Dispatcher) heard(ctx context.Context, q queued) bool {
	return time.Since(q.sent) < store.HeardWithin || d.sub.Heard(ctx, q.mark, store.HeardWithin)
}

// next returns the next notification for a worker, and false once the work
// channel is closed. A worker that finds none waiting lets one more be
// reserved ahead (capacity.grow): keeping workers busy is what reserving
// ahead is for.
func (d *Dispatcher) next() (queued, bool) {
	select {
	case q, ok := <-d.work:
		return q, ok
	default:
	}
	d.capacity.grow()
	q, ok := <-d.work
	return q, ok
}

// startable reports whether n, having waited this long for a worker, still
// leaves its attempt the time a reservation made now would: the policy's
// timeout, or nine tenths of the ttr where that is shorter. Only the wait
// for a worker counts, not the reservation's own round trip: one taken by
// an idle worker at once always starts, however far Redis is, or a short
// ttr would be reserved and given back for ever.
func startable(p *policy.Policy, n *notify.Notification, waited time.Duration) bool {
	ttr := time.Duration(n.TTR)
	return waited <= ttr-min(time.Duration(p.Timeout), ttr*9/10)
}

// releaseAt gives n back unattempted and uncounted, due at at.
func (d *Dispatcher) releaseAt(n *notify.Notification, at time.Time) {
	d.finish(pendingFinish{Finish: store.Finish{Notification: n, Action: notify.ActionRelease, NextAt: at}})
}

// attempt runs one attempt of n, hands its outcome to the finisher, and
// returns the sender's error.
func (d *Dispatcher) attempt(n *notify.Notification, p *policy.Policy) error {
	start := d.store.Now()
	var lateness time.Duration
	if n.NextAttemptAt != nil {
		lateness = start.Sub(*n.NextAttemptAt)
	}
	ctx, cancel := attemptContext(d.attemptCtx, p, n, start)
	var traced func(*store.Finish)
	if d.cfg.Tracer != nil {
		ctx, traced = d.cfg.Tracer.StartAttempt(ctx, n)
	}
	resp, err := d.send(ctx, n)
	cancel()
	if err != nil && d.attemptCtx.Err() != nil {
		err = notify.ErrReleased
	}
	end := d.store.Now()
	d.timed(end.Sub(start))
	f := finishOf(p, n, start, end, resp, err)
	if traced != nil {
		traced(&f)
	}
	if !d.finish(pendingFinish{Finish: f, lateness: lateness, report: true}) {
		d.log.Warn("schedule: an attempt ended after shutdown; its outcome is not recorded, and it is retried once its ttr runs out",
			"id", n.ID, "attempt", n.Attempts)
	}
	return err
}

// finish hands f to the finisher, or reports false once Stop no longer
// waits for outcomes. While Redis takes no outcomes the finisher retries
// its batch and the queue fills; f then waits for room until Stop gives up
// on outcomes, since the finisher may yet record it.
func (d *Dispatcher) finish(f pendingFinish) bool {
	d.finishMu.RLock()
	defer d.finishMu.RUnlock()
	if d.finishesClosed {
		return false
	}
	select {
	case d.finishes <- f:
		return true
	case <-d.finishCtx.Done():
		return false
	}
}

// send runs n's sender or handler in a goroutine of its own and waits for
// it. A panic there, or a runtime.Goexit (as testing's FailNow calls from
// any goroutine), is the sender's failure, not the dispatcher's: the
// attempt fails like any other, where in the worker's goroutine a Goexit
// would have ended the worker with its slot, its endpoint's limits and the
// attempt's outcome. The log keeps the stack that says where a panic
// happened, which the history, cut to 1 KiB, cannot.
func (d *Dispatcher) send(ctx context.Context, n *notify.Notification) (notify.Response, error) {
	sender, what := d.cfg.Senders[n.Channel], "sender"
	if n.Channel == notify.ChannelPull {
		sender, what = d.cfg.Handlers[n.Topic], "handler"
	}
	if sender == nil {
		return notify.Response{}, notify.Permanent(fmt.Errorf("no sender configured for channel %q", n.Channel))
	}
	type result struct {
		resp notify.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		returned := false
		defer func() {
			if returned {
				return
			}
			if r := recover(); r != nil {
				d.log.ErrorContext(ctx, "schedule: "+what+" panicked", "topic", n.Topic, "id", n.ID, "channel", n.Channel,
					"attempt", n.Attempts, "panic", r, "stack", string(debug.Stack()))
				done <- result{err: fmt.Errorf("%s panicked: %v", what, r)}
				return
			}
			d.log.ErrorContext(ctx, "schedule: "+what+" called runtime.Goexit", "topic", n.Topic, "id", n.ID, "channel", n.Channel,
				"attempt", n.Attempts)
			done <- result{err: fmt.Errorf("%s called runtime.Goexit", what)}
		}()
		resp, err := sender.Send(ctx, n)
		returned = true
		done <- result{resp, err}
	}()
	r := <-done
	return r.resp, r.err
}

// finishLoop records ended attempts in batches: after the first outcome it
// waits up to finishLinger for others, until finishLingerBatch have come,
// then writes what it has, up to finishBatchMax, in one pipeline; what ends
// during that write goes into the next. Each write costs Redis a script
// call whatever it holds, so a batch of a hundred costs Redis little more
// than a batch of a few; outcomes wait at most the linger longer to be
// recorded, and no worker waits for them. A batch holding an attempt due
// again before the linger would end (a retry with no backoff, a release) is
// written at once, so that attempt does not start late.
func (d *Dispatcher) finishLoop() {
	linger := time.NewTimer(time.Hour)
	drainTimer(linger)
	failing := d.newFailureLog("schedule: finish failed; retrying", "schedule: finish recovered")
	unreplicated := d.newFailureLog("schedule: outcomes recorded but not replicated", "schedule: replication of outcomes recovered")
	for f := range d.finishes {
		d.finishBatch(d.collectFinishes(f, linger), failing, unreplicated)
	}
}

// collectFinishes returns first with the outcomes queued behind it, and
// those that come within the linger while the batch is neither urgent nor
// full.
func (d *Dispatcher) collectFinishes(first pendingFinish, linger *time.Timer) []pendingFinish {
	batch, urgent := []pendingFinish{first}, d.urgent(&first)
	linger.Reset(finishLinger)
	defer drainTimer(linger)
	for len(batch) < finishBatchMax {
		var f pendingFinish
		var ok bool
		select {
		case f, ok = <-d.finishes:
		default:
			if urgent || len(batch) >= finishLingerBatch {
				return batch
			}
			select {
			case f, ok = <-d.finishes:
			case <-linger.C:
				return batch
			}
		}
		if !ok {
			return batch
		}
		batch = append(batch, f)
		urgent = urgent || d.urgent(&f)
	}
	return batch
}

// urgent reports whether f schedules an attempt due before a linger
// starting now would end, or parks one (store.ParkTime): a park written at
// once lands before a resume that follows the pause it was asked about,
// and is unparked by it.
func (d *Dispatcher) urgent(f *pendingFinish) bool {
	return (f.Action == notify.ActionRetry || f.Action == notify.ActionRelease) &&
		(f.NextAt.Before(d.store.Now().Add(finishLinger)) || store.ParkTime(f.NextAt))
}

// finishBatch writes a batch, retrying through a Redis outage, and reports
// each recorded attempt to the observer. It gives up only when every
// reservation in the batch has passed its deadline, since the reaper then
// owns them (the attempt is retried: at-least-once), or when Stop has
// waited long enough. Failed writes are logged to failing, and writes
// replicas did not take in time to unreplicated.
func (d *Dispatcher) finishBatch(batch []pendingFinish, failing, unreplicated *failureLog) {
	ctx := d.finishCtx
	items := make([]store.Finish, len(batch))
	for i, f := range batch {
		items[i] = f.Finish
	}
	for failures := 1; ; failures++ {
		errs, err := d.store.Finish(ctx, items)
		if errors.Is(err, notify.ErrNotReplicated) {
			// Recorded on the master; retrying would not make replicas
			// catch up. At worst a failover repeats these attempts.
			d.cfg.Observer.StoreError("finish", err)
			unreplicated.failed(ctx, err, "count", len(items))
			err = nil
		} else if err == nil {
			unreplicated.ok(ctx)
		}
		if err == nil {
			failing.ok(ctx)
			for i, e := range errs {
				switch {
				case errors.Is(e, notify.ErrCancelledMeanwhile) && batch[i].report:
					d.cfg.Observer.AttemptFinished(items[i].Notification, items[i].Attempt, notify.ActionCancelled, batch[i].lateness)
				case errors.Is(e, notify.ErrStaleReceipt) && d.overran(&items[i]):
					// Not the dispatcher's doing, and only the log can tell
					// whose it is: the history shows an expired reservation,
					// as after a crash.
					n := items[i].Notification
					d.log.WarnContext(ctx, "schedule: an attempt outlived its reservation, its sender or handler ignoring the end of its context; its outcome is dropped and the attempt counts as expired",
						"topic", n.Topic, "id", n.ID, "attempt", n.Attempts, "overrun", items[i].Attempt.FinishedAt.Sub(*n.Deadline).Round(time.Millisecond))
				case e != nil:
					d.log.DebugContext(ctx, "schedule: finish ignored", "id", items[i].Notification.ID, "error", e)
				case batch[i].report:
					d.cfg.Observer.AttemptFinished(items[i].Notification, items[i].Attempt, items[i].Action, batch[i].lateness)
				}
			}
			return
		}
		d.cfg.Observer.StoreError("finish", err)
		if d.allExpired(items) {
			d.log.ErrorContext(ctx, "schedule: could not record attempts before their reservations expired; they will be retried",
				"count", len(items), "error", err)
			return
		}
		if ctx.Err() != nil {
			d.log.ErrorContext(ctx, "schedule: could not record attempts before the shutdown timeout; they will be retried once their reservations expire",
				"count", len(items), "error", err)
			return
		}
		wait := d.retryDelay(failures)
		failing.failed(ctx, err, "count", len(items), "retry_in", wait)
		sleep(ctx, wait)
	}
}

// overran reports whether f's attempt ended after the reaper could take
// its reservation back.
func (d *Dispatcher) overran(f *store.Finish) bool {
	dl := f.Notification.Deadline
	return f.Action != notify.ActionRelease && dl != nil && f.Attempt.FinishedAt.After(dl.Add(d.cfg.ReapGrace))
}

func (d *Dispatcher) allExpired(batch []store.Finish) bool {
	now := d.store.Now()
	for _, f := range batch {
		if dl := f.Notification.Deadline; dl == nil || now.Before(dl.Add(d.cfg.ReapGrace)) {
			return false
		}
	}
	return true
}

// maintenanceLoop reaps expired reservations and sweeps finished records:
// once at start, then every ReapInterval.
func (d *Dispatcher) maintenanceLoop(ctx context.Context) {
	ticker := time.NewTicker(d.cfg.ReapInterval)
	defer ticker.Stop()
	reaping := d.newFailureLog("schedule: reaping expired reservations failed", "schedule: reaping expired reservations recovered")
	sweeping := d.newFailureLog("schedule: sweeping finished records failed", "schedule: sweeping finished records recovered")
	starting := d.newFailureLog("schedule: cannot record which attempts reserved ahead started; should this process die "+
		"before it can, other dispatchers give those attempts back uncounted, and they may be made again",
		"schedule: recording which attempts started recovered")
	skewed := d.newFailureLog("schedule: this host's clock differs from Redis's: attempts start early or late by as much, "+
		"and beyond reap_grace a reaper takes back reservations whose attempts still run; synchronise the clocks (NTP)",
		"schedule: this host's clock agrees with Redis's again")
	var clockChecked time.Time
	for {
		if now := d.store.Now(); now.Sub(clockChecked).Abs() >= clockCheckEvery {
			d.checkClock(ctx, skewed)
			clockChecked = now
		}
		d.recordStarts(ctx, starting)
		d.reap(ctx, reaping)
		d.sweep(ctx, sweeping)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// clockCheckEvery is how often a dispatcher compares its host's clock
// with Redis's, and clockTolerance the difference it lets pass: hosts kept
// by NTP agree within milliseconds.
const (
	clockCheckEvery = time.Minute
	clockTolerance  = 100 * time.Millisecond
)

// checkClock warns, through skewed, while the host's clock and Redis's
// differ by more than clockTolerance: due times and deadlines are judged by
// each dispatcher's clock, so one running ahead starts attempts early. A
// failure to read Redis's clock is left to the other loops to report.
func (d *Dispatcher) checkClock(ctx context.Context, skewed *failureLog) {
	skew, within, err := d.store.ClockSkew(ctx)
	switch {
	case err != nil:
	case skew.Abs()-within > clockTolerance:
		way := "ahead of"
		if skew < 0 {
			way = "behind"
		}
		skewed.failed(ctx, fmt.Errorf("the host's clock is %s %s Redis's", skew.Abs().Round(time.Millisecond), way),
			"skew", skew.Round(time.Millisecond), "within", within.Round(time.Millisecond))
	default:
		skewed.ok(ctx)
	}
}

// recordStarts waits for the starts of attempts reserved ahead to be
// written (Store.Started), and logs its failure to failing: the store
// writes them in the background, where a failure reaches only whoever
// waits for them.
func (d *Dispatcher) recordStarts(ctx context.Context, failing *failureLog) {
	if err := d.store.Started(ctx); err != nil {
		if ctx.Err() == nil {
			d.cfg.Observer.StoreError("start", err)
			failing.failed(ctx, err)
		}
		return
	}
	failing.ok(ctx)
}

// reap fails the attempts whose reservation ran out, in full batches until
// none is left, and logs its failures to failing.
func (d *Dispatcher) reap(ctx context.Context, failing *failureLog) {
	for ctx.Err() == nil {
		expired, err := d.store.Expired(ctx, d.cfg.ReapGrace, d.cfg.Batch)
		if err == nil && len(expired) > 0 {
			now := d.store.Now()
			set := d.cfg.PoliciesFunc()
			items := make([]store.Finish, len(expired))
			for i, n := range expired {
				p := set.PolicyFor(n)
				started := now
				if n.Deadline != nil {
					started = n.Deadline.Add(-time.Duration(n.TTR))
				}
				items[i] = finishOf(&p, n, started, now, notify.Response{}, notify.ErrTTRExpired)
			}
			var errs []error
			if errs, err = d.store.Finish(ctx, items); err == nil {
				for i, e := range errs {
					if e == nil {
						d.cfg.Observer.AttemptFinished(items[i].Notification, items[i].Attempt, items[i].Action, 0)
						if d.cfg.Tracer != nil {
							d.cfg.Tracer.AttemptRecorded(ctx, &items[i])
						}
					}
				}
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Observer.StoreError("reap", err)
				failing.failed(ctx, err)
			}
			return
		}
		failing.ok(ctx)
		if len(expired) < d.cfg.Batch {
			return
		}
	}
}

// sweep deletes finished records past their retention, and dead ones past
// the store's DeadRetention, in full batches until none is left, and logs
// its failures to failing.
func (d *Dispatcher) sweep(ctx context.Context, failing *failureLog) {
	for ctx.Err() == nil {
		_, more, err := d.store.Sweep(ctx, d.cfg.Batch)
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Observer.StoreError("sweep", err)
				failing.failed(ctx, err)
			}
			return
		}
		failing.ok(ctx)
		if !more {
			return
		}
	}
}
