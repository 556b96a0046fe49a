package herald_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// startWorker starts a worker in ns with one handler for topic "jobs" and
// stops it at the test's end.
func startWorker(t *testing.T, rdb redis.UniversalClient, cfg *herald.WorkerConfig, fn herald.HandlerFunc) *herald.Worker {
	t.Helper()
	w, err := herald.NewWorker(rdb, cfg)
	require.NoError(t, err)
	w.Handle("jobs", fn)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	return w
}

// received returns what a handler sends on ch, failing the test when
// nothing comes within 10s; what names it.
func received[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	var v T
	select {
	case v = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not reach its handler in 10s", what)
	}
	return v
}

// TestHandlerDecodesNoPayload: a job enqueued with a nil payload reaches
// its handler as JSON null, which Decode takes, rather than as no bytes at
// all, on which the usual "Decode failed: Permanent" handler sent it
// straight to the dead letters.
func TestHandlerDecodesNoPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	type seen struct {
		payload json.RawMessage
		err     error
	}
	got := make(chan seen, 1)
	startWorker(t, rdb, &herald.WorkerConfig{Namespace: ns}, func(_ context.Context, job *herald.Job) error {
		var v struct{ N int }
		err := job.Decode(&v)
		got <- seen{job.Payload, err}
		return herald.Permanent(err)
	})
	_, err := c.Enqueue(ctx, "jobs", nil, herald.ID("no-payload"))
	require.NoError(t, err)
	s := received(t, got, "the job")
	require.NoError(t, s.err)
	require.JSONEq(t, "null", string(s.payload))
	require.Equal(t, herald.StateSucceeded, waitFinished(c, "no-payload").State)
}

// TestHandlerPanic: a handler that panics does not take the worker down;
// the attempt is recorded as a failed one naming the panic and retried,
// and the log says which job panicked, with the stack that tells where.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	var logs heraldtest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	startWorker(t, rdb, &herald.WorkerConfig{Namespace: ns, Logger: logger}, func(_ context.Context, job *herald.Job) error {
		if job.Attempt == 0 {
			var m map[string]int
			//lint:ignore SA5000 the handler's programming error is what the test is about
			m[job.ID]++ // a nil map: a programming error that panics
		}
		return nil
	})
	_, err := c.Enqueue(ctx, "jobs", nil, herald.ID("panics-once"), herald.Backoff(0, time.Millisecond))
	require.NoError(t, err)

	n := waitFinished(c, "panics-once")
	require.Equal(t, herald.StateSucceeded, n.State)
	require.Len(t, n.History, 2)
	require.Equal(t, "retry", string(n.History[0].Outcome))
	require.Equal(t, "handler panicked: assignment to entry in nil map", n.History[0].Error)
	require.Contains(t, logs.String(), `msg="schedule: handler panicked" topic=jobs id=panics-once channel=pull attempt=0`)
	require.Contains(t, logs.String(), "herald_test.TestHandlerPanic", "the stack names the handler")
}

// TestHandlerGoexit: a handler that ends its goroutine (t.FailNow called
// from a handler does) fails its attempt like a panic, and the worker's one
// slot goes on to the next job, where it died with the goroutine and no job
// ran again.
func TestHandlerGoexit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	var logs heraldtest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	startWorker(t, rdb, &herald.WorkerConfig{Namespace: ns, Logger: logger, Concurrency: 1}, func(_ context.Context, job *herald.Job) error {
		if job.ID == "exits-once" && job.Attempt == 0 {
			runtime.Goexit()
		}
		return nil
	})
	_, err := c.Enqueue(ctx, "jobs", nil, herald.ID("exits-once"), herald.Backoff(0, time.Millisecond))
	require.NoError(t, err)
	n := waitFinished(c, "exits-once")
	require.Equal(t, herald.StateSucceeded, n.State)
	require.Len(t, n.History, 2)
	require.Equal(t, "retry", string(n.History[0].Outcome))
	require.Equal(t, "handler called runtime.Goexit", n.History[0].Error)
	require.Contains(t, logs.String(), `msg="schedule: handler called runtime.Goexit" topic=jobs id=exits-once channel=pull attempt=0`)

	_, err = c.Enqueue(ctx, "jobs", nil, herald.ID("next"))
	require.NoError(t, err)
	require.Equal(t, herald.StateSucceeded, waitFinished(c, "next").State)
}

// TestWorkerLifecycle: Stop before Start and a second Stop do nothing, a
// second Start fails while the worker runs, and a stopped worker starts
// again and takes jobs, rather than answering "already started".
func TestWorkerLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	w, err := herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: ns})
	require.NoError(t, err)
	handled := make(chan string, 1)
	w.HandleFunc("jobs", func(_ context.Context, job *herald.Job) error {
		handled <- job.ID
		return nil
	})
	w.Stop() // before Start

	for run := range 2 {
		require.NoError(t, w.Start(ctx), "run %d", run)
		require.Error(t, w.Start(ctx), "run %d: Start while running", run)
		id := fmt.Sprintf("run-%d", run)
		_, err := c.Enqueue(ctx, "jobs", nil, herald.ID(id))
		require.NoError(t, err)
		require.Equal(t, id, received(t, handled, id))
		w.Stop()
		w.Stop()
	}
}

// TestWorkerShutdownTimeout: Stop waits for a running handler as long as
// ShutdownTimeout says, then ends its context and gives its job back, due
// again and not counted, where it waited a fixed 10s.
func TestWorkerShutdownTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	w, err := herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: ns, ShutdownTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	started := make(chan struct{})
	w.HandleFunc("jobs", func(ctx context.Context, _ *herald.Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, w.Start(ctx))
	_, err = c.Enqueue(ctx, "jobs", nil, herald.ID("long"))
	require.NoError(t, err)
	received(t, started, "the job")
	stopped := time.Now()
	w.Stop()
	require.Less(t, time.Since(stopped), 5*time.Second, "Stop waited past its ShutdownTimeout")
	n, err := c.Get(ctx, "long")
	require.NoError(t, err)
	require.Equal(t, herald.StateScheduled, n.State, "given back")
	require.Zero(t, n.Attempts, "not counted")
	require.Equal(t, "released", string(n.History[0].Outcome))

	w, err = herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: ns, ShutdownTimeout: -time.Second})
	require.NoError(t, err)
	w.HandleFunc("jobs", func(context.Context, *herald.Job) error { return nil })
	require.ErrorContains(t, w.Start(ctx), "ShutdownTimeout must not be negative")
}

// TestJobFields: a handler's Job carries the notification's id, topic,
// headers and the 0-based index of the attempt; Deadline is the end of the
// reservation (start + ttr), and the handler's context ends at the
// policy's timeout when that comes first.
func TestJobFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	type seen struct {
		job        herald.Job
		start, ctx time.Time
	}
	got := make(chan seen, 2)
	startWorker(t, rdb, &herald.WorkerConfig{Namespace: ns}, func(ctx context.Context, job *herald.Job) error {
		dl, _ := ctx.Deadline()
		got <- seen{*job, time.Now(), dl}
		if job.Attempt == 0 {
			return errors.New("once more")
		}
		return nil
	})
	_, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 1}, herald.ID("fields"), herald.TTR(time.Minute),
		herald.Headers(map[string]string{"X-Shop": "42"}), herald.Backoff(0, time.Millisecond))
	require.NoError(t, err)
	for attempt := range 2 {
		s := received(t, got, fmt.Sprintf("attempt %d", attempt))
		require.Equal(t, attempt, s.job.Attempt)
		require.Equal(t, "fields", s.job.ID)
		require.Equal(t, "jobs", s.job.Topic)
		require.Equal(t, map[string]string{"X-Shop": "42"}, s.job.Headers)
		require.JSONEq(t, `{"n":1}`, string(s.job.Payload))
		require.WithinDuration(t, s.start.Add(time.Minute), s.job.Deadline, time.Second, "Deadline: reserved + ttr")
		require.WithinDuration(t, s.start.Add(policy.TimeoutDefault), s.ctx, time.Second, "context: the policy's timeout, before the Deadline")
	}
}

// TestHandlerWrappedOutcomes: Permanent and RetryAfter are found through
// a handler's fmt.Errorf %w wrapping.
func TestHandlerWrappedOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	set, err := herald.NewPolicies(map[string]herald.RetryPolicy{
		"default": {Backoff: []herald.Duration{0, herald.Duration(time.Millisecond)}, HonorRetryAfter: true},
	}, nil)
	require.NoError(t, err)
	rdb, ns, c := connect(t, set)
	wait := 200 * time.Millisecond
	startWorker(t, rdb, &herald.WorkerConfig{Namespace: ns, Policies: set}, func(_ context.Context, job *herald.Job) error {
		switch {
		case job.ID == "permanent":
			return fmt.Errorf("charge %s: %w", job.ID, herald.Permanent(errors.New("card declined")))
		case job.Attempt == 0:
			return fmt.Errorf("charge %s: %w", job.ID, herald.RetryAfter(errors.New("provider busy"), wait))
		}
		return nil
	})
	for _, id := range []string{"permanent", "retry-after"} {
		_, err := c.Enqueue(ctx, "jobs", nil, herald.ID(id))
		require.NoError(t, err)
	}

	n := waitFinished(c, "permanent")
	require.Equal(t, herald.StateDead, n.State)
	require.Len(t, n.History, 1, "no retry")
	require.Equal(t, "charge permanent: permanent: card declined", n.History[0].Error)
	replaced, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 2}, herald.ID("permanent"), herald.Delay(time.Hour), herald.Replace())
	require.NoError(t, err, "a dead notification is replaced")
	require.Equal(t, herald.Replaced, replaced.Status)
	require.Equal(t, herald.StateScheduled, replaced.Notification.State)

	n = waitFinished(c, "retry-after")
	require.Equal(t, herald.StateSucceeded, n.State)
	require.Len(t, n.History, 2)
	require.GreaterOrEqual(t, n.History[1].StartedAt.Sub(n.History[0].FinishedAt), wait, "the retry waited as asked, not the 1ms of the array")
}

// TestWorkerRetention: a worker keeps finished records for its Retention,
// and dead ones for its DeadRetention, as herald serve does for retention
// and dead_retention: its sweeps delete them past it, and with -1 never.
func TestWorkerRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const short = 300 * time.Millisecond
	cases := []struct {
		name  string
		cfg   herald.WorkerConfig
		fails bool // the handler fails for good, so the job is dead
		state herald.State
	}{
		{"Short", herald.WorkerConfig{Retention: short}, false, herald.StateSucceeded},
		{"Forever", herald.WorkerConfig{Retention: -1}, false, herald.StateSucceeded},
		{"DeadShort", herald.WorkerConfig{Retention: short, DeadRetention: short}, true, herald.StateDead},
		// Dead letters wait to be replayed, whatever the retention of
		// finished records.
		{"DeadByDefault", herald.WorkerConfig{Retention: short}, true, herald.StateDead},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, ns, c := connect(t, nil)
			done := make(chan string, 1)
			cfg := tc.cfg
			cfg.Namespace = ns
			startWorker(t, rdb, &cfg, func(_ context.Context, job *herald.Job) error {
				done <- job.ID
				if tc.fails {
					return herald.Permanent(errors.New("card declined"))
				}
				return nil
			})
			_, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 1}, herald.ID("kept"))
			require.NoError(t, err)
			received(t, done, "the job")
			require.Eventually(t, func() bool {
				n, err := c.Get(ctx, "kept")
				return errors.Is(err, herald.ErrNotFound) || err == nil && n.State == tc.state
			}, 10*time.Second, 10*time.Millisecond, "recorded")
			if tc.state == herald.StateDead && cfg.DeadRetention == 0 || cfg.Retention < 0 {
				// Three sweeps at least, a second apart.
				time.Sleep(3500 * time.Millisecond)
				n, err := c.Get(ctx, "kept")
				require.NoError(t, err, "a record kept for ever was swept")
				require.Equal(t, tc.state, n.State)
				return
			}
			require.Eventually(t, func() bool {
				_, err := c.Get(ctx, "kept")
				return errors.Is(err, herald.ErrNotFound)
			}, 10*time.Second, 50*time.Millisecond, "the record outlived its retention")
		})
	}
}

// TestResumeRightAfterPark: notifications that come due in the last
// milliseconds before a topic's resume start at once on resume, as README
// says. A dispatcher that asked whether the topic was paused just before
// the resume parked them after the resume's own pass; they waited for the
// next look for strays, about 5s later.
func TestResumeRightAfterPark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	set, err := herald.NewPolicies(nil, nil)
	require.NoError(t, err)
	st, err := store.New(&store.Config{Client: rdb, Namespace: ns})
	require.NoError(t, err)
	admin, err := client.New(&client.Config{Store: st, PoliciesFunc: func() *policy.Set { return set }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })

	var mu sync.Mutex
	started := map[string]time.Time{}
	startWorker(t, rdb, &herald.WorkerConfig{Namespace: ns, Concurrency: 8, Logger: quietLogger()}, func(_ context.Context, job *herald.Job) error {
		mu.Lock()
		started[job.ID] = time.Now()
		mu.Unlock()
		return nil
	})
	for cycle := range 5 {
		require.NoError(t, admin.Pause(ctx, store.PauseTopic, "jobs"))
		resumeAt := time.Now().Add(200 * time.Millisecond)
		asked := map[string]time.Time{}
		for i := range 80 { // due from 10ms before the resume to just after it
			id := fmt.Sprintf("rr-%d-%d", cycle, i)
			at := resumeAt.Add(-10*time.Millisecond + time.Duration(i)*125*time.Microsecond)
			_, err := c.Enqueue(ctx, "jobs", nil, herald.ID(id), herald.SendAt(at))
			require.NoError(t, err)
			asked[id] = at
		}
		time.Sleep(time.Until(resumeAt))
		resumed := time.Now()
		_, err := admin.Resume(ctx, store.PauseTopic, "jobs")
		require.NoError(t, err)
		for id, at := range asked {
			var got time.Time
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				got = started[id]
				return !got.IsZero()
			}, 10*time.Second, time.Millisecond, "%s never started", id)
			require.False(t, got.Before(at), "%s started %s early", id, at.Sub(got))
			// Within three reads of what is paused, however the park and
			// the resume fell, and a loaded machine's delay.
			require.Less(t, got.Sub(resumed), 2*time.Second, "%s: due %s before the resume, started %s after it", id, resumed.Sub(at), got.Sub(resumed))
		}
	}
}
