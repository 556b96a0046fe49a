package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
)

var long = flag.Bool("chaos.long", false, "run TestChaos at full size: 20,000 notifications over a minute (make chaos)")

// chaosRun sizes one run of TestChaos.
type chaosRun struct {
	notifications int
	window        time.Duration // enqueues are spread over it
	killEvery     time.Duration // a dispatcher is SIGKILLed this often
	drain         time.Duration // the most the backlog may take after the window
}

// event is a kill or restart the run caused, by time.
type event struct {
	at   time.Time
	what string // "dispatcher", "redis" or "api"
	// back is when what was killed was running again.
	back time.Time
}

// TestChaos runs an API and three dispatchers as herald processes on a
// Redis with AOF, fsynced before each reply, enqueues notifications to a
// receiver that fails 30% of requests after up to 20ms, and meanwhile SIGKILLs a
// dispatcher every few seconds (restarting it 200ms later), SIGKILLs and
// restarts Redis once and the API once. Then it keeps the ledger: every
// acknowledged notification succeeded (its last attempt answered 2xx) or is
// dead after all five attempts failed, none is lost, no two attempts of
// one notification ran at once, and each duplicate delivery is explained
// by a kill: the record shows the attempt the receiver answered 2xx as
// expired, and a dispatcher or Redis was killed while it ran or within a
// second of the answer.
//
// Not appendfsync everysec: while a slow fsync runs, Redis holds new writes
// in memory for up to 2s and replies meanwhile, so a kill on a disk as
// busy as a test run's loses acknowledged writes (7 of 2,000 in one run),
// which is Redis's to answer for, not Herald's (README, Durability).
func TestChaos(t *testing.T) {
	t.Parallel()
	run := chaosRun{notifications: 2000, window: 12 * time.Second, killEvery: 2 * time.Second, drain: 60 * time.Second}
	if *long {
		run = chaosRun{notifications: 20000, window: 60 * time.Second, killEvery: 3 * time.Second, drain: 5 * time.Minute}
	}
	rds := redistest.Start(t, redistest.Options{AOF: true})
	dep := startDeployment(t, rds)
	rcv, api, dispatchers, client := dep.rcv, dep.api, dep.dispatchers, dep.client

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu     sync.Mutex
		events []event
		ackAt  = make([]time.Time, run.notifications)
		wg     sync.WaitGroup
	)

	// The enqueuers: each notification is retried until acknowledged, as a
	// client does on 503 or a refused connection.
	start := time.Now()
	var retries atomic.Int64
	enqueue := func(i int) {
		due := start.Add(run.window * time.Duration(i) / time.Duration(run.notifications))
		if !sleepCtx(ctx, time.Until(due)) {
			return
		}
		for {
			status, err := client.enqueue(ctx, chaosID(i), rcv.srv.URL+"/hook", i)
			if err == nil && acked(status) {
				ackAt[i] = time.Now()
				return
			}
			retries.Add(1)
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
		}
	}

	// bounce kills what, waits for down, starts it again and records it.
	bounce := func(what string, kill func(), down time.Duration, start func() error) bool {
		e := event{at: time.Now(), what: what}
		kill()
		sleepCtx(ctx, down)
		if err := start(); err != nil {
			t.Errorf("restart %s: %v", what, err)
			cancel() // the enqueuers stop retrying
			return false
		}
		e.back = time.Now()
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		return true
	}
	// The killer: a dispatcher every killEvery, Redis at 40% of the window,
	// the API at 70%.
	wg.Add(1)
	go func() {
		defer wg.Done()
		redisAt, apiAt := start.Add(run.window*4/10), start.Add(run.window*7/10)
		tick := time.NewTicker(run.killEvery)
		defer tick.Stop()
		for time.Since(start) < run.window {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p := dispatchers[rand.N(len(dispatchers))]
			if !bounce("dispatcher", p.kill, 200*time.Millisecond, p.start) {
				return
			}
			if !redisAt.IsZero() && time.Now().After(redisAt) {
				redisAt = time.Time{}
				if !bounce("redis", rds.Kill, 500*time.Millisecond, rds.Restart) {
					return
				}
			}
			if !apiAt.IsZero() && time.Now().After(apiAt) {
				apiAt = time.Time{}
				if !bounce("api", api.kill, 200*time.Millisecond, api.start) {
					return
				}
			}
		}
	}()
	inParallel(run.notifications, enqueue)
	wg.Wait()
	require.False(t, t.Failed())
	enqueued := time.Since(start)

	// The drain: wait until nothing is scheduled or reserved.
	deadline := time.Now().Add(run.drain)
	for {
		n, err := client.pending(ctx)
		if err == nil && n == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "still %d pending (%v) %s after the last enqueue", n, err, run.drain)
		time.Sleep(200 * time.Millisecond)
	}
	drained := time.Since(start)
	for _, p := range dispatchers {
		p.stop()
	}
	l := keepLedger(t, client, rcv, run.notifications, ackAt, events)
	l.enqueued, l.drained, l.retries = enqueued, drained, retries.Load()
	t.Log(l.String())

	require.Zero(t, l.unacked, "notifications never acknowledged")
	if l.lost > 0 {
		for _, e := range events {
			t.Logf("%s killed at %s, back at %s", e.what, e.at.Format("15:04:05.000"), e.back.Format("15:04:05.000"))
		}
		for i := range ackAt {
			if slices.Contains(l.lostIDs, chaosID(i)) {
				t.Logf("lost %s acknowledged at %s", chaosID(i), ackAt[i].Format("15:04:05.000"))
			}
		}
	}
	require.Zero(t, l.lost, "acknowledged notifications lost: %v", l.examples["lost"])
	require.Zero(t, l.unfinished, "acknowledged notifications left unfinished: %v", l.examples["unfinished"])
	require.Zero(t, l.contradicted, "records the receiver contradicts: %v", l.examples["contradicted"])
	require.Zero(t, l.overlaps, "attempts of one notification at once: %v", l.examples["overlapped"])
	if l.dupUnexplained > 0 {
		for _, e := range events {
			t.Logf("%s killed at %s, back at %s", e.what, e.at.Format("15:04:05.000"), e.back.Format("15:04:05.000"))
		}
	}
	require.Zero(t, l.dupUnexplained, "duplicates no kill explains: %v", l.examples["unexplained"])
	require.Equal(t, run.notifications, l.succeeded+l.dead)
}

func chaosID(i int) string { return fmt.Sprintf("c-%06d", i) }

// inParallel calls f for 0 to n-1 from 16 goroutines, and returns when
// all calls have.
func inParallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// ledger is what TestChaos found.
type ledger struct {
	notifications, unacked, lost, unfinished, contradicted int
	lostIDs                                                []string
	succeeded, dead                                        int
	overlaps, overlapsUnheard                              int
	requests, failedRequests                               int
	duplicates                                             int
	dupByCause                                             map[string]int
	dupUnexplained                                         int
	kills                                                  map[string]int
	examples                                               map[string][]string
	enqueued, drained                                      time.Duration
	retries                                                int64
}

// explainWindow is how long after the receiver answered a kill may come
// and still explain a repeated delivery: the dispatcher records an outcome
// within milliseconds, so one killed later had recorded it.
const explainWindow = time.Second

func keepLedger(t *testing.T, client *apiClient, rcv *receiver, n int, ackAt []time.Time, events []event) *ledger {
	t.Helper()
	l := &ledger{notifications: n, dupByCause: map[string]int{}, kills: map[string]int{}, examples: map[string][]string{}}
	for _, e := range events {
		l.kills[e.what]++
	}
	note := func(kind, id string) {
		if len(l.examples[kind]) < 5 {
			l.examples[kind] = append(l.examples[kind], id)
		}
	}
	rcv.mu.Lock()
	overlaps := slices.Clone(rcv.overlaps)
	got := rcv.got
	rcv.mu.Unlock()

	records := make([]*notify.Notification, n)
	statuses := make([]int, n)
	inParallel(n, func(i int) {
		var rec notify.Notification
		status, err := client.get(context.Background(), chaosID(i), &rec)
		if err != nil {
			t.Errorf("get %s: %v", chaosID(i), err)
			return
		}
		statuses[i] = status
		if status == http.StatusOK {
			records[i] = &rec
		}
	})

	byID := map[string]*notify.Notification{}
	for i, rec := range records {
		byID[chaosID(i)] = rec
	}
	for _, o := range overlaps {
		if abandoned(byID[o.id], append(slices.Clone(o.earlier), o.later.attempt)) {
			l.overlapsUnheard++
			continue
		}
		l.overlaps++
		note("overlapped", fmt.Sprintf("%s attempt %d arrived at %s while attempts %v were answered, history %s",
			o.id, o.later.attempt, o.later.start.Format("15:04:05.000"), o.earlier, history(byID[o.id])))
	}

	for i := range n {
		id := chaosID(i)
		ds := got[id]
		l.requests += len(ds)
		for _, d := range ds {
			if d.status != http.StatusOK {
				l.failedRequests++
			}
		}
		if ackAt[i].IsZero() {
			l.unacked++
			continue
		}
		rec := records[i]
		if rec == nil {
			l.lost++
			l.lostIDs = append(l.lostIDs, id)
			note("lost", fmt.Sprintf("%s (%d)", id, statuses[i]))
			continue
		}
		switch rec.State {
		case notify.StateSucceeded:
			l.succeeded++
		case notify.StateDead:
			l.dead++
		default:
			l.unfinished++
			note("unfinished", id+" "+string(rec.State))
			continue
		}
		if !agrees(rec, ds) {
			l.contradicted++
			note("contradicted", id)
		}
		// Repeated 2xx answers: every one but the last was not recorded.
		// Those to attempts the sender gave up on come first, as the
		// record says they were not heard.
		var unheardOKs, heardOKs []delivery
		for _, d := range ds {
			switch {
			case d.status != http.StatusOK:
			case unheard(rec, []int{d.attempt}, time.Time{}):
				unheardOKs = append(unheardOKs, d)
			default:
				heardOKs = append(heardOKs, d)
			}
		}
		oks := append(unheardOKs, heardOKs...)
		for _, d := range oks[:max(len(oks)-1, 0)] {
			l.duplicates++
			if unheard(rec, []int{d.attempt}, time.Time{}) {
				l.dupByCause["the sender's timeout"]++
			} else if cause := explain(rec, d, events); cause != "" {
				l.dupByCause[cause+" kill"]++
			} else {
				l.dupUnexplained++
				note("unexplained", fmt.Sprintf("%s attempt %d answered at %s, history %s", id, d.attempt, d.end.Format("15:04:05.000"), history(rec)))
			}
		}
	}
	return l
}

// agrees reports whether a finished record matches what the receiver saw:
// a success's last attempt was answered 2xx, a dead one made every attempt
// of its policy and never recorded a success, and every attempt recorded
// with a status code was answered with that code.
func agrees(rec *notify.Notification, ds []delivery) bool {
	answered := func(attempt, status int) bool {
		for _, d := range ds {
			if d.attempt == attempt && d.status == status {
				return true
			}
		}
		return false
	}
	for _, h := range rec.History {
		if h.StatusCode != 0 && !answered(h.Attempt, h.StatusCode) {
			return false
		}
		if rec.State == notify.StateDead && h.Outcome == notify.OutcomeSuccess {
			return false
		}
	}
	if len(rec.History) == 0 {
		return false
	}
	last := rec.History[len(rec.History)-1]
	if rec.State == notify.StateSucceeded {
		return last.Outcome == notify.OutcomeSuccess && answered(last.Attempt, http.StatusOK)
	}
	return rec.Attempts == attemptsPerPolicy
}

// explain names the kill that explains a 2xx answer that was not
// recorded: the record shows that attempt's reservation expired, and a
// dispatcher was killed (or Redis, or Redis was down) between the attempt's
// start and explainWindow after the answer; or the attempt went back
// uncounted (explainUncounted), as one answered before the recorded
// reservation of its number did. A request can reach the receiver after
// its sender died: it was in the socket's buffers.
func explain(rec *notify.Notification, d delivery, events []event) string {
	var started time.Time
	for _, h := range rec.History {
		if h.Attempt == d.attempt && h.Outcome == notify.OutcomeTTRExpired {
			started = h.StartedAt
		}
	}
	// An answer given before the expired reservation began was to an
	// earlier making of the same number, which went back uncounted.
	if started.IsZero() || d.end.Before(started) {
		return explainUncounted(d, events)
	}
	for _, e := range events {
		if e.what == "api" {
			continue
		}
		if !e.at.Before(started) && e.at.Before(d.end.Add(explainWindow)) ||
			e.what == "redis" && !d.end.Before(e.at) && d.end.Before(e.back.Add(explainWindow)) {
			return e.what
		}
	}
	return ""
}

// unrecordedWindow is how far from an attempt's start a kill may come and
// still explain that the attempt went back uncounted: a dispatcher records
// its starts within about 10ms (store.Start) and a write's round trip,
// which Redis's fsync of every write (appendfsync always) on a loaded
// machine stretches to a few hundred.
const unrecordedWindow = explainWindow

// explainUncounted names the kill that explains a 2xx answer to an attempt
// that went back uncounted, made again under the same number: its start
// was not recorded yet, as its dispatcher was killed just after it, or
// Redis was down, until the record was written again once it was back.
func explainUncounted(d delivery, events []event) string {
	for _, e := range events {
		switch {
		case e.what == "dispatcher" && e.at.Sub(d.start).Abs() < unrecordedWindow,
			e.what == "redis" && !d.start.Before(e.at.Add(-unrecordedWindow)) && d.start.Before(e.back.Add(explainWindow)):
			return e.what
		}
	}
	return ""
}

// unheard reports whether rec records that each of attempts ran out its
// whole timeout without an answer, before by unless by is zero: the sender
// gave up on it, so an answer the receiver gave it went unheard, and an
// attempt made after that one does not overlap it, however long the
// receiver took to finish answering it (a stalled machine).
func unheard(rec *notify.Notification, attempts []int, by time.Time) bool {
	if rec == nil {
		return false
	}
	for _, a := range attempts {
		if !slices.ContainsFunc(rec.History, func(h notify.Attempt) bool {
			return h.Attempt == a && h.StatusCode == 0 &&
				h.Outcome != notify.OutcomeSuccess && h.Outcome != notify.OutcomeTTRExpired &&
				h.FinishedAt.Sub(h.StartedAt) >= policyTimeout && (by.IsZero() || !h.FinishedAt.After(by))
		}) {
			return false
		}
	}
	return true
}

// abandoned reports whether rec shows that of attempts, which the
// receiver answered at once, every one but the highest was given up by its
// sender (unheard) before the highest started: the sender never had two
// at once. The receiver may take them up in either order: one it was slow
// to take up (a stalled machine) can arrive after the next.
func abandoned(rec *notify.Notification, attempts []int) bool {
	if rec == nil {
		return false
	}
	top := slices.Max(attempts)
	i := slices.Index(attempts, top)
	others := slices.Delete(slices.Clone(attempts), i, i+1)
	for _, h := range rec.History {
		if h.Attempt == top {
			return unheard(rec, others, h.StartedAt)
		}
	}
	return false
}

// history sketches a record's attempts for a failure message.
func history(rec *notify.Notification) string {
	var b strings.Builder
	for _, h := range rec.History {
		fmt.Fprintf(&b, "[%d %s %d %s-%s]", h.Attempt, h.Outcome, h.StatusCode,
			h.StartedAt.Format("15:04:05.000"), h.FinishedAt.Format("15:04:05.000"))
	}
	return b.String()
}

func (l *ledger) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos ledger\n")
	fmt.Fprintf(&b, "  notifications   %d acknowledged of %d (enqueue retries %d), enqueued in %s, all finished at %s\n",
		l.notifications-l.unacked, l.notifications, l.retries, l.enqueued.Round(time.Millisecond), l.drained.Round(time.Millisecond))
	fmt.Fprintf(&b, "  kills           dispatcher SIGKILL+restart %d, redis SIGKILL+restart %d, api SIGKILL+restart %d\n",
		l.kills["dispatcher"], l.kills["redis"], l.kills["api"])
	fmt.Fprintf(&b, "  outcome         succeeded %d, dead %d (after %d attempts each), unfinished %d, lost %d\n",
		l.succeeded, l.dead, attemptsPerPolicy, l.unfinished, l.lost)
	fmt.Fprintf(&b, "  receiver        %d requests, %d answered 500; overlapping attempts %d (beside %d after the sender's timeout); records contradicting it %d\n",
		l.requests, l.failedRequests, l.overlaps, l.overlapsUnheard, l.contradicted)
	causes := make([]string, 0, len(l.dupByCause))
	for c, n := range l.dupByCause {
		causes = append(causes, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(causes)
	fmt.Fprintf(&b, "  duplicates      %d 2xx answers not recorded, explained by: %s; unexplained %d\n",
		l.duplicates, strings.Join(causes, ", "), l.dupUnexplained)
	return b.String()
}
