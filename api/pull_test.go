package api_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

func TestReserveArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	tests := []struct {
		name, path, field string
	}{
		{"MaxZero", "/v1/topics/jobs/reserve?max=0", "max"},
		{"MaxTooLarge", "/v1/topics/jobs/reserve?max=101", "max"},
		{"MaxNotANumber", "/v1/topics/jobs/reserve?max=all", "max"},
		{"BadWait", "/v1/topics/jobs/reserve?wait=forever", "wait"},
		{"UnknownParameter", "/v1/topics/jobs/reserve?limit=5", "limit"},
		// Which one counts would be a guess: a worker that builds its
		// query from two places means one of them.
		{"MaxTwice", "/v1/topics/jobs/reserve?max=1&max=50", "max"},
		{"WaitTwice", "/v1/topics/jobs/reserve?wait=0s&wait=20s", "wait"},
		// A pair the query's syntax does not allow would otherwise be
		// dropped unseen: a worker whose library joins parameters with ";"
		// would reserve one at a time without waiting.
		{"SemicolonSeparator", "/v1/topics/jobs/reserve?max=10;wait=20s", "max"},
		{"SemicolonAfterTheFirst", "/v1/topics/jobs/reserve?max=10&wait=20s;", "wait"},
		{"BadEscape", "/v1/topics/jobs/reserve?max=1%zz", "max"},
		{"BadEscapeInAName", "/v1/topics/jobs/reserve?m%zzax=10", ""},
		// An empty value is no number or duration: a worker whose query is
		// built from an unset variable would poll one at a time, unwaiting.
		{"MaxEmpty", "/v1/topics/jobs/reserve?max=&wait=20s", "max"},
		{"WaitEmpty", "/v1/topics/jobs/reserve?max=10&wait=", "wait"},
		{"BadTopic", "/v1/topics/Jobs!/reserve", "topic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, tt.field, "POST", tt.path, nil)
		})
	}
	t.Run("NothingDue", func(t *testing.T) {
		res := must[map[string][]any](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=5", nil)
		require.Equal(t, map[string][]any{"notifications": {}}, res)
	})
}

// TestReserveBodyHoldsNoParameters: a consumer that sends max and wait as
// a JSON body, as HTTP libraries make natural, or as a form, is told they
// belong in the query, instead of reserving one at a time without waiting.
// The bodies that clients send with a bare POST are still taken.
func TestReserveBodyHoldsNoParameters(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "waiting", "topic": "jobs", "send_at": "2020-01-01T00:00:00Z"})
	tests := []struct {
		name, body, field string
	}{
		{"Max", `{"max": 10}`, "max"},
		{"Wait", `{"wait": "20s"}`, "wait"},
		{"Unknown", `{"topics": ["jobs"]}`, "topics"},
		{"Form", `max=10&wait=20s`, ""},
		{"NotAnObject", `[10]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, tt.field, "POST", "/v1/topics/jobs/reserve?max=2", tt.body)
			if tt.field == "max" || tt.field == "wait" {
				require.Contains(t, e.Message, "query", "the answer says where the parameter goes")
			}
		})
	}
	rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/waiting", nil)
	require.Equal(t, notify.StateScheduled, rec.State, "a refused reservation reserves nothing")

	for _, body := range []any{nil, "", "{}", " {}\n"} {
		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve", body)
		if len(res.Notifications) == 1 {
			must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/waiting/ack", map[string]string{"receipt": res.Notifications[0].Receipt})
		}
	}
	rec = must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/waiting", nil)
	require.Equal(t, notify.StateSucceeded, rec.State)
}

// TestReserveStrictTopics: with topics_strict, a reservation of a topic
// the policies do not name is a 400 naming topic, at once, as the README
// says, rather than a wait for ever on a misspelt name; a named one is
// served as usual.
func TestReserveStrictTopics(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{StrictTopics: true})
	start := time.Now()
	b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topic", "POST", "/v1/topics/job/reserve?wait=20s", nil)
	require.Less(t, time.Since(start), 5*time.Second, "refused before any wait")
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "known", "topic": "jobs"})
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	require.Len(t, res.Notifications, 1)
	require.Equal(t, "known", res.Notifications[0].ID)
}

// TestReserveWaitIsCut: a wait longer than the server's limit is cut to
// it, not refused, and ends with an empty list.
func TestReserveWaitIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{MaxWait: 200 * time.Millisecond})
	start := time.Now()
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=1h", nil)
	require.Empty(t, res.Notifications)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 200*time.Millisecond)
	require.Less(t, took, 10*time.Second, "the wait was cut")
}

func TestReserveLongPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})

	t.Run("WakesOnEnqueue", func(t *testing.T) {
		type answer struct {
			res reserved
			err error
		}
		done := make(chan answer, 1)
		start := time.Now()
		go func() {
			res, err := expect[reserved](b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=10s", nil)
			done <- answer{res, err}
		}()
		// The poll is waiting once the enqueue lands after it; either way it
		// must hand the notification out long before its wait ends.
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "now", "topic": "jobs"})
		a := <-done
		require.NoError(t, a.err)
		res := a.res
		require.Len(t, res.Notifications, 1)
		require.Equal(t, "now", res.Notifications[0].ID)
		require.Less(t, time.Since(start), 5*time.Second)
	})
	t.Run("SleepsUntilDue", func(t *testing.T) {
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "soon", "topic": "jobs", "delay": "0.3"})
		start := time.Now()
		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=10s", nil)
		require.Len(t, res.Notifications, 1)
		n := res.Notifications[0]
		require.Equal(t, "soon", n.ID)
		require.False(t, time.Now().Before(*n.NextAttemptAt), "handed out before it was due")
		require.Less(t, time.Since(start), 2*time.Second, "the poll sleeps until the due time, not its whole wait")
	})
	t.Run("EndsAfterWait", func(t *testing.T) {
		start := time.Now()
		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=200ms", nil)
		require.Empty(t, res.Notifications)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	})
}

// TestReserveEndsWhenTheConsumerLeaves: a long poll whose consumer has
// hung up ends at once, even when the consumer sent a body (many HTTP
// libraries send {} with every POST), so it does not hand out what is
// enqueued later to no one, to wait out its ttr and burn an attempt. A
// consumer that stops is no failure of the server: the log has no warning
// of it.
func TestReserveEndsWhenTheConsumerLeaves(t *testing.T) {
	t.Parallel()
	started, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	var warnings atomic.Int64
	b := setup(t, api.Config{Logger: countingLogger(t, &warnings), Middleware: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("wait") != "20s" {
				next.ServeHTTP(w, r)
				return
			}
			started <- struct{}{}
			defer func() { ended <- struct{}{} }()
			next.ServeHTTP(w, r)
		})
	}})
	ctx, leave := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "POST", b.http.URL+"/v1/topics/single/reserve?wait=20s", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	gone := make(chan error, 1)
	go func() {
		resp, err := b.http.Client().Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		gone <- err
	}()
	<-started
	leave()
	require.ErrorIs(t, <-gone, context.Canceled)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll still waits after its consumer left")
	}
	require.Zero(t, warnings.Load(), "warnings logged: see the test's log")

	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "after", "topic": "single"})
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/single/reserve?wait=5s", nil)
	require.Len(t, res.Notifications, 1, "the next consumer gets what was enqueued after the first left")
	require.Equal(t, "after", res.Notifications[0].ID)
}

// pausedReadHook tells, once armed, when the paused topics are first read:
// a reservation of a paused topic has looked, found it paused, and waits.
type pausedReadHook struct {
	armed atomic.Bool
	read  chan struct{}
}

func (h *pausedReadHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pausedReadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *pausedReadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); cmd.Name() == "hgetall" && len(args) == 2 && strings.HasSuffix(fmt.Sprint(args[1]), ":paused") &&
			h.armed.CompareAndSwap(true, false) {
			close(h.read)
		}
		return err
	}
}

// TestReserveWakesOnResume: a consumer waiting on a paused topic gets what
// came due meanwhile as soon as the topic is resumed, as the README says,
// not at its next look up to a second later: whether the resume comes
// through the API process it waits on or through another.
func TestReserveWakesOnResume(t *testing.T) {
	t.Parallel()
	t.Run("SameServer", func(t *testing.T) {
		t.Parallel()
		testReserveWakesOnResume(t, false)
	})
	t.Run("OtherServer", func(t *testing.T) {
		t.Parallel()
		testReserveWakesOnResume(t, true)
	})
}

// hookedClient returns a client of the shared server that runs hook,
// closed when the test ends.
func hookedClient(t *testing.T, hook redis.Hook) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(sharedServer(t).Options())
	rdb.AddHook(hook)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func testReserveWakesOnResume(t *testing.T, other bool) {
	hook := &pausedReadHook{read: make(chan struct{})}
	rdb := hookedClient(t, hook)
	// Only the news of the resume can answer the waiting consumer within
	// its wait: its polls are a minute apart.
	b := setupOn(t, rdb, api.Config{PollInterval: time.Minute})
	resumer := b
	if other {
		resumer = setupIn(t, sharedServer(t).Client(t), b.store.Namespace(), api.Config{})
	}
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "held", "topic": "jobs"})
	must[map[string]any](t, b, http.StatusOK, "POST", "/v1/topics/jobs/pause", nil)

	hook.armed.Store(true)
	type answer struct {
		res reserved
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := expect[reserved](b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=10s", nil)
		done <- answer{res, err}
	}()
	select {
	case <-hook.read:
	case <-time.After(10 * time.Second):
		t.Fatal("the reservation never looked at what is paused")
	}
	must[map[string]any](t, resumer, http.StatusOK, "POST", "/v1/topics/jobs/resume", nil)
	a := <-done
	require.NoError(t, a.err)
	require.Len(t, a.res.Notifications, 1, "the waiting consumer heard of the resume")
	require.Equal(t, "held", a.res.Notifications[0].ID)
}

// TestReserveWakesOnGiveBack: a job another worker releases, or nacks to
// a retry due at once, is due again at once for any worker: one already
// waiting gets it then, not at its next look a poll interval later.
func TestReserveWakesOnGiveBack(t *testing.T) {
	t.Parallel()
	// Only the news of the give-back can answer the waiting worker within
	// its wait: its polls are a minute apart.
	b := setup(t, api.Config{PollInterval: time.Minute})
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
		map[string]any{"id": "handed-on", "topic": "jobs", "backoff": []string{"0s", "0s"}})
	held := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	require.Len(t, held.Notifications, 1)
	for _, step := range []string{"release", "nack"} {
		waiting := make(chan error, 1)
		var got reserved
		go func() {
			var err error
			got, err = expect[reserved](b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=10s", nil)
			waiting <- err
		}()
		// The worker waits once it has looked and found nothing; a
		// give-back before that is found by the look itself.
		time.Sleep(100 * time.Millisecond)
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/handed-on/"+step,
			map[string]string{"receipt": held.Notifications[0].Receipt})
		select {
		case err := <-waiting:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("the waiting worker did not get the job after its %s", step)
		}
		require.Len(t, got.Notifications, 1, "after %s", step)
		require.Equal(t, "handed-on", got.Notifications[0].ID)
		held = got
	}
	require.Equal(t, 1, held.Notifications[0].Attempts, "the release counted no attempt, the nack one")
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/handed-on/ack",
		map[string]string{"receipt": held.Notifications[0].Receipt})
}

// TestReserveEarliestFirst: a reservation lists its notifications in the
// order they came due, as documented, whichever shards they live in.
func TestReserveEarliestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	base := time.Now().Add(-time.Minute)
	var want []string
	for i := range 20 {
		id := fmt.Sprintf("due%02d", i)
		want = append(want, id)
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"id": id, "topic": "jobs", "send_at": base.Add(time.Duration(i) * time.Second).Format(time.RFC3339)})
	}
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=20", nil)
	var got []string
	for _, n := range res.Notifications {
		got = append(got, n.ID)
	}
	require.Equal(t, want, got)
}

// leaveHook hangs up a consumer once Redis has made its reservation, and
// lets the answer come back only when the server has seen the hang-up: the
// moment a consumer that gives up can always hit.
type leaveHook struct {
	armed atomic.Bool
	leave func()
}

func (h *leaveHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *leaveHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *leaveHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		// The reservation's script, once it has run (not answered NOSCRIPT).
		if h.armed.Load() && slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			return c.Err() == nil && slices.ContainsFunc(c.Args(), func(a any) bool { s, _ := a.(string); return strings.HasSuffix(s, "reserved") })
		}) {
			h.armed.Store(false)
			h.leave()
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
		return err
	}
}

// TestReserveGivesBackWhatNoOneReceives: a reservation made as its
// consumer hangs up is given back, due as before and with no attempt
// counted, instead of being held for no one until its ttr runs out (with a
// policy of one attempt, that would make it dead).
func TestReserveGivesBackWhatNoOneReceives(t *testing.T) {
	t.Parallel()
	hook := &leaveHook{}
	rdb := hookedClient(t, hook)
	b := setupOn(t, rdb, api.Config{})
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "held", "topic": "single"})

	ctx, leave := context.WithCancel(t.Context())
	hook.leave = leave
	hook.armed.Store(true)
	req, err := http.NewRequestWithContext(ctx, "POST", b.http.URL+"/v1/topics/single/reserve?wait=5s", nil)
	require.NoError(t, err)
	resp, err := b.http.Client().Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	require.ErrorIs(t, err, context.Canceled)

	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/single/reserve?wait=5s", nil)
	require.Len(t, res.Notifications, 1, "the next consumer gets it")
	require.Equal(t, "held", res.Notifications[0].ID)
	require.Equal(t, 0, res.Notifications[0].Attempts, "no attempt was burnt")
}

func TestAckNack(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	reserveOne := func(t *testing.T, topic string) notify.Notification {
		t.Helper()
		var res reserved
		require.Eventually(t, func() bool {
			res = must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/"+topic+"/reserve", nil)
			return len(res.Notifications) == 1
		}, 5*time.Second, 10*time.Millisecond)
		n := res.Notifications[0]
		require.Equal(t, notify.StateReserved, n.State)
		require.NotEmpty(t, n.Receipt)
		require.NotNil(t, n.Deadline)
		return n
	}

	t.Run("NackRetriesOnTheBackoffArrayThenDies", func(t *testing.T) {
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "flaky", "topic": "jobs"})
		for attempt := range 3 {
			n := reserveOne(t, "jobs")
			require.Equal(t, attempt, n.Attempts)
			must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/flaky/nack",
				map[string]string{"receipt": n.Receipt, "error": fmt.Sprintf("upstream down %d", attempt)})
		}
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/flaky", nil)
		require.Equal(t, notify.StateDead, rec.State, "three entries in the array, three failures")
		require.Len(t, rec.History, 3)
		for i, a := range rec.History {
			require.Equal(t, i, a.Attempt)
			require.Equal(t, notify.OutcomeRetry, a.Outcome)
			require.Equal(t, fmt.Sprintf("upstream down %d", i), a.Error)
		}
	})
	t.Run("NackHonoursRetryAfterWhenThePolicyDoes", func(t *testing.T) {
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"id": "later", "topic": "jobs", "policy": "patient"})
		n := reserveOne(t, "jobs")
		before := time.Now()
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/later/nack",
			map[string]any{"receipt": n.Receipt, "retry_after": "10m"})
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/later", nil)
		require.Equal(t, notify.StateScheduled, rec.State)
		require.WithinDuration(t, before.Add(10*time.Minute), *rec.NextAttemptAt, 5*time.Second)
		require.Equal(t, "nacked (asked for a retry after 10m)", rec.History[0].Error)
	})
	// A policy that does not honour Retry-After retries on its array, and
	// the history says what the worker asked, not that it was done.
	t.Run("NackRetryAfterThePolicyIgnores", func(t *testing.T) {
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"id": "sooner", "topic": "jobs"})
		n := reserveOne(t, "jobs")
		before := time.Now()
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/sooner/nack",
			map[string]any{"receipt": n.Receipt, "error": "PDF renderer down", "retry_after": "10m"})
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/sooner", nil)
		require.WithinDuration(t, before.Add(50*time.Millisecond), *rec.NextAttemptAt, 5*time.Second)
		require.Equal(t, "PDF renderer down (asked for a retry after 10m)", rec.History[0].Error)
		// Due again in 50 ms: out of the way of the subtests that reserve
		// from the topic next.
		must[notify.Notification](t, b, http.StatusOK, "DELETE", "/v1/notifications/sooner", nil)
	})
	t.Run("AckIsOnceOnly", func(t *testing.T) {
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "once", "topic": "jobs"})
		n := reserveOne(t, "jobs")
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/once/ack", map[string]string{"receipt": n.Receipt})
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/once/ack",
			map[string]string{"receipt": n.Receipt})
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/once/nack",
			map[string]string{"receipt": n.Receipt})
	})
	t.Run("AckAfterCancelIsRecorded", func(t *testing.T) {
		// The job ran while its notification was cancelled: the worker
		// hears that the reservation ended, and the history shows the
		// attempt it made; the notification stays cancelled.
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "called-off", "topic": "jobs"})
		n := reserveOne(t, "jobs")
		must[notify.Notification](t, b, http.StatusOK, "DELETE", "/v1/notifications/called-off", nil)
		e := b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/called-off/ack",
			map[string]string{"receipt": n.Receipt})
		require.Contains(t, e.Message, "cancelled during the attempt")
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/called-off", nil)
		require.Equal(t, notify.StateCancelled, rec.State)
		require.Empty(t, rec.Deadline, "the reservation ended with the cancel")
		require.Equal(t, 1, rec.Attempts)
		require.Len(t, rec.History, 1)
		require.Equal(t, notify.OutcomeSuccess, rec.History[0].Outcome)
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/called-off/nack",
			map[string]string{"receipt": n.Receipt})
		rec = must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/called-off", nil)
		require.Len(t, rec.History, 1, "recorded once")
	})
	t.Run("ReleaseGivesBackUnstarted", func(t *testing.T) {
		// A worker shutting down gives back what it has not started: due
		// again at once for another worker, no attempt used up, nothing in
		// the history; the receipt then holds no more.
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"id": "unstarted", "topic": "jobs", "backoff": []string{"0s"}})
		n := reserveOne(t, "jobs")
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/unstarted/release", map[string]string{"receipt": n.Receipt})
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/unstarted", nil)
		require.Equal(t, notify.StateScheduled, rec.State)
		require.Zero(t, rec.Attempts, "its only attempt is left")
		require.Empty(t, rec.History)
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/unstarted/release",
			map[string]string{"receipt": n.Receipt})
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/unstarted/ack",
			map[string]string{"receipt": n.Receipt})
		again := reserveOne(t, "jobs")
		require.Equal(t, "unstarted", again.ID, "due again at once")
		require.Zero(t, again.Attempts)
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/unstarted/ack", map[string]string{"receipt": again.Receipt})
		rec = must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/unstarted", nil)
		require.Equal(t, notify.StateSucceeded, rec.State)

		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "receipt", "POST", "/v1/notifications/unstarted/release", map[string]string{})
		b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "POST", "/v1/notifications/nope/release", map[string]string{"receipt": "r"})

		// Cancelled while held: nothing to give back, nothing to record.
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "dropped", "topic": "jobs"})
		n = reserveOne(t, "jobs")
		must[notify.Notification](t, b, http.StatusOK, "DELETE", "/v1/notifications/dropped", nil)
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/dropped/release",
			map[string]string{"receipt": n.Receipt})
		rec = must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/dropped", nil)
		require.Equal(t, notify.StateCancelled, rec.State)
		require.Empty(t, rec.History)
	})
	t.Run("NackPermanentGoesStraightToTheDeadLetters", func(t *testing.T) {
		// A consumer that cannot read a payload knows no retry will help.
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "poison", "topic": "jobs"})
		n := reserveOne(t, "jobs")
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/poison/nack",
			map[string]any{"receipt": n.Receipt, "error": "payload is not an invoice", "permanent": true})
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/poison", nil)
		require.Equal(t, notify.StateDead, rec.State, "dead with two entries of its array left")
		require.Len(t, rec.History, 1)
		require.Equal(t, notify.OutcomePermanent, rec.History[0].Outcome)
		require.Equal(t, "permanent: payload is not an invoice", rec.History[0].Error)
		dead := must[struct {
			Notifications []notify.Notification `json:"notifications"`
		}](t, b, http.StatusOK, "GET", "/v1/dead?topic=jobs", nil)
		require.True(t, slices.ContainsFunc(dead.Notifications, func(d notify.Notification) bool { return d.ID == "poison" }))
	})
	t.Run("LateAckBeforeTheReaperIsRecorded", func(t *testing.T) {
		// As openapi.yaml says: past its deadline, a reservation holds
		// until a reaper takes it back, and none runs here.
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"id": "late", "topic": "jobs", "ttr": "50ms"})
		n := reserveOne(t, "jobs")
		require.Eventually(t, func() bool { return time.Now().After(n.Deadline.Add(10 * time.Millisecond)) }, 5*time.Second, 5*time.Millisecond)
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/late/ack", map[string]string{"receipt": n.Receipt})
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/late", nil)
		require.Equal(t, notify.StateSucceeded, rec.State)
		require.Len(t, rec.History, 1)
		require.Equal(t, notify.OutcomeSuccess, rec.History[0].Outcome)
	})
	t.Run("BadBodies", func(t *testing.T) {
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "retry_after", "POST", "/v1/notifications/once/nack",
			`{"receipt":"r","permanent":true,"retry_after":"1m"}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "receipt", "POST", "/v1/notifications/once/ack", `{}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "error", "POST", "/v1/notifications/once/ack",
			`{"receipt":"r","error":"ack takes no error"}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "retry_after", "POST", "/v1/notifications/once/nack",
			`{"receipt":"r","retry_after":"later"}`)
		b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "POST", "/v1/notifications/nobody/ack", `{"receipt":"r"}`)
	})
}

// TestWrongReceiptLeavesTheReservation: an ack, nack or release with a
// receipt that is not the reservation's (a worker mixing up its jobs) is
// 409 stale_receipt and changes nothing: the reservation holds, nothing
// is recorded, and its own receipt still finishes it. One of a
// notification never reserved is 409 as well.
func TestWrongReceiptLeavesTheReservation(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "mine", "topic": "jobs"})
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "later", "topic": "jobs", "delay": "1h"})
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	require.Len(t, res.Notifications, 1)
	n := res.Notifications[0]
	for _, route := range []string{"ack", "nack", "release"} {
		for _, receipt := range []string{n.Receipt + "0", strings.TrimSuffix(n.Receipt, "0") + "1", "receipt"} {
			b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/mine/"+route,
				map[string]string{"receipt": receipt})
		}
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/later/"+route,
			map[string]string{"receipt": n.Receipt})
	}
	rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/mine", nil)
	require.Equal(t, notify.StateReserved, rec.State)
	require.Equal(t, n.Deadline, rec.Deadline)
	require.Zero(t, rec.Attempts)
	require.Empty(t, rec.History)
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/mine/ack", map[string]string{"receipt": n.Receipt})
	rec = must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/later", nil)
	require.Equal(t, notify.StateScheduled, rec.State)
	require.Empty(t, rec.History)
}

// TestRefusedReplaceLeavesTheReservation: a replace of a job a worker
// holds is 409 reserved, a re-enqueue of the same content answers the
// record without the receipt, which only the reserve answer shows, and
// neither touches the reservation: the worker's ack is recorded.
func TestRefusedReplaceLeavesTheReservation(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	body := map[string]any{"id": "invoice-42", "topic": "jobs", "payload": map[string]int{"n": 1}}
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", body)
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	require.Len(t, res.Notifications, 1)
	n := res.Notifications[0]

	b.requireError(t, http.StatusConflict, api.CodeReserved, "", "POST", "/v1/notifications",
		map[string]any{"id": "invoice-42", "topic": "jobs", "payload": map[string]int{"n": 2}, "replace": true})
	for _, path := range []string{"/v1/notifications", "/v1/notifications/batch"} {
		req := any(body)
		if path == "/v1/notifications/batch" {
			req = map[string]any{"notifications": []any{body}}
		}
		status, out := b.do(t, "POST", path, req)
		require.Equal(t, http.StatusOK, status, "%s", out)
		require.NotContains(t, string(out), n.Receipt, "%s answers no receipt", path)
	}
	rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/invoice-42", nil)
	require.Equal(t, notify.StateReserved, rec.State)
	require.JSONEq(t, `{"n": 1}`, string(rec.Payload))

	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/invoice-42/ack", map[string]string{"receipt": n.Receipt})
	rec = must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/invoice-42", nil)
	require.Equal(t, notify.StateSucceeded, rec.State)
	require.Len(t, rec.History, 1)
}

// TestNackRetryAfterBounds: a nack's retry_after, where the policy honours
// it, only ever makes the next attempt later than the backoff array says,
// and no later than the policy's max_retry_after (1h by default).
func TestNackRetryAfterBounds(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	tests := []struct {
		name, topic string
		retryAfter  any
		backoff     []string
		want        time.Duration
	}{
		{"ShorterThanTheArray", "shorter", "1s", []string{"0s", "10m"}, 10 * time.Minute},
		{"AsANumberOfSeconds", "seconds", 600, []string{"0s", "0s"}, 10 * time.Minute},
		{"LongerThanTheCap", "capped", "5h", []string{"0s", "0s"}, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
				map[string]any{"id": tt.topic, "topic": tt.topic, "channel": "pull", "policy": "patient", "backoff": tt.backoff})
			res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/"+tt.topic+"/reserve?wait=5s", nil)
			require.Len(t, res.Notifications, 1)
			before := time.Now()
			must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/"+tt.topic+"/nack",
				map[string]any{"receipt": res.Notifications[0].Receipt, "retry_after": tt.retryAfter})
			rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/"+tt.topic, nil)
			require.Equal(t, notify.StateScheduled, rec.State)
			require.WithinDuration(t, before.Add(tt.want), *rec.NextAttemptAt, 5*time.Second)
		})
	}
	b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "retry_after", "POST", "/v1/notifications/capped/nack",
		map[string]any{"receipt": "r", "retry_after": -5})
}

// TestRacingFinishesOfOneReceipt: a consumer that sends its ack twice at
// once (a retry after a timeout that was only slow), or an ack and a nack,
// gets exactly one 204; the other is 409 stale_receipt, and the history has
// one attempt.
func TestRacingFinishesOfOneReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	for i := range 20 {
		id := fmt.Sprintf("race%d", i)
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": id, "topic": "single"})
		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/single/reserve?wait=5s", nil)
		require.Len(t, res.Notifications, 1)
		receipt := res.Notifications[0].Receipt
		second := "/ack"
		if i%2 == 1 {
			second = "/nack"
		}
		var statuses [2]int
		var bodies [2][]byte
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j, route := range []string{"/ack", second} {
			wg.Go(func() {
				<-start
				statuses[j], bodies[j], errs[j] = b.call("POST", "/v1/notifications/"+id+route, map[string]string{"receipt": receipt})
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs[:]...))
		won := slices.Index(statuses[:], http.StatusNoContent)
		require.NotEqual(t, -1, won, "one of %v wins", statuses)
		lost := 1 - won
		require.Equal(t, http.StatusConflict, statuses[lost], "%s", bodies[lost])
		require.Contains(t, string(bodies[lost]), api.CodeStaleReceipt)
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/"+id, nil)
		require.Len(t, rec.History, 1, "one attempt, finished once")
	}
}

// TestConcurrentConsumers runs 8 HTTP consumers over 2,000 notifications:
// none is handed to two consumers at once, and every one is acked exactly
// once.
func TestConcurrentConsumers(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	const total, consumers = 2000, 8
	b.enqueueJobs(t, total)

	var (
		mu     sync.Mutex
		holder = map[string]int{} // id -> consumer holding it now
		acked  = map[string]int{} // id -> acks
		done   atomic.Int64
	)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	consume := func(c int) error {
		for done.Load() < total {
			res, err := expect[reserved](b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=25&wait=200ms", nil)
			if err != nil {
				return err
			}
			mu.Lock()
			for _, n := range res.Notifications {
				if other, ok := holder[n.ID]; ok {
					errs <- fmt.Errorf("%s handed to consumer %d while consumer %d holds it", n.ID, c, other)
				}
				holder[n.ID] = c
			}
			mu.Unlock()
			for _, n := range res.Notifications {
				if _, err := expect[any](b, http.StatusNoContent, "POST", "/v1/notifications/"+n.ID+"/ack",
					map[string]string{"receipt": n.Receipt}); err != nil {
					return err
				}
				mu.Lock()
				delete(holder, n.ID)
				acked[n.ID]++
				mu.Unlock()
				done.Add(1)
			}
		}
		return nil
	}
	for c := range consumers {
		wg.Go(func() {
			if err := consume(c); err != nil {
				errs <- err
				done.Store(total) // stop the others
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	require.Len(t, acked, total)
	for id, n := range acked {
		require.Equal(t, 1, n, "%s acked %d times", id, n)
	}
	stats := must[statsBody](t, b, http.StatusOK, "GET", "/v1/stats", nil)
	require.Equal(t, store.TopicStats{SucceededTotal: total}, stats.Topics["jobs"])
}

// TestTTRExpiryRedelivers lets a reservation run out under a running
// dispatcher, whose reaper serves every queue: the notification is handed
// out again as its next attempt, and the first consumer's receipt is stale.
func TestTTRExpiryRedelivers(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	d, err := schedule.New(&schedule.Config{
		Store: b.store,
		// The dispatcher delivers push channels; none are enqueued here, it
		// runs for its reaper.
		Senders: map[string]notify.Sender{notify.ChannelWebhook: notify.SenderFunc(func(context.Context, *notify.Notification) (notify.Response, error) {
			return notify.Response{}, errors.New("no webhooks in this test")
		})},
		PoliciesFunc: func() *policy.Set { return b.policies },
		ReapInterval: 20 * time.Millisecond,
		ReapGrace:    10 * time.Millisecond,
		Observer:     b.metrics,
		Logger:       testLogger(t),
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(d.Stop)

	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
		map[string]any{"id": "slow", "topic": "jobs", "ttr": "1s"})
	first := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	require.Len(t, first.Notifications, 1)
	require.Equal(t, 0, first.Notifications[0].Attempts)

	// The reaper fails attempt 0 (ttr expired); attempt 1 is due 50ms later.
	second := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	require.Len(t, second.Notifications, 1)
	n := second.Notifications[0]
	require.Equal(t, "slow", n.ID)
	require.Equal(t, 1, n.Attempts)
	require.NotEqual(t, first.Notifications[0].Receipt, n.Receipt)

	// The first worker, late, can neither finish nor give back what the
	// second now holds.
	for _, route := range []string{"ack", "nack", "release"} {
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/slow/"+route,
			map[string]string{"receipt": first.Notifications[0].Receipt})
	}
	held := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/slow", nil)
	require.Equal(t, notify.StateReserved, held.State)
	require.Equal(t, n.Deadline, held.Deadline, "the second reservation is untouched")
	require.Len(t, held.History, 1)
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/slow/ack", map[string]string{"receipt": n.Receipt})

	rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/slow", nil)
	require.Equal(t, notify.StateSucceeded, rec.State)
	require.Len(t, rec.History, 2)
	require.Equal(t, notify.OutcomeTTRExpired, rec.History[0].Outcome)
	require.Equal(t, notify.OutcomeSuccess, rec.History[1].Outcome)
}

// TestReserveReachesTheDueBehindCancelled: a reserve without a wait gets
// the job that is due although many entries ahead of it in the ready list
// have gone stale (cancelled, or moved later after being enqueued due now),
// rather than answering empty while the heads say more is due; also when
// it asks for fewer than the shards with due work, so that each pass looks
// at some of them only.
func TestReserveReachesTheDueBehindCancelled(t *testing.T) {
	t.Parallel()
	cancel := func(t *testing.T, b *testBundle, i int) {
		must[notify.Notification](t, b, http.StatusOK, "DELETE", fmt.Sprintf("/v1/notifications/job%d", i), nil)
	}
	for _, tc := range []struct {
		name    string
		jobs    int
		reserve string
		clear   func(t *testing.T, b *testBundle, i int)
	}{
		{"Cancelled", 100, "?max=10", cancel},
		{"RescheduledLater", 100, "?max=10", func(t *testing.T, b *testBundle, i int) {
			must[notify.Notification](t, b, http.StatusOK, "POST", "/v1/notifications", map[string]any{
				"id": fmt.Sprintf("job%d", i), "topic": "jobs", "payload": map[string]int{"n": i}, "delay": "1h", "replace": true})
		}},
		{"OneAtATime", 12, "", cancel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, api.Config{})
			b.enqueueJobs(t, tc.jobs)
			for i := range tc.jobs - 1 {
				tc.clear(t, b, i)
			}
			last := fmt.Sprintf("job%d", tc.jobs-1)
			res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve"+tc.reserve, nil)
			require.Len(t, res.Notifications, 1, "%s is due", last)
			require.Equal(t, last, res.Notifications[0].ID)
		})
	}
}

// TestReserveRightAfterDueAtOnce: a job due at once (enqueued with no
// send_at or delay, nacked with a 0s wait ahead in its backoff array, or
// next in its order key's line once the one ahead is acked) is due when
// that call's answer has come back: a reservation sent then, without a
// wait, gets it. The 201 of such an enqueue shows it due no later than it
// was created.
func TestReserveRightAfterDueAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// run makes job i due at once, and reserves it with
		// reserveOneAtOnce: once or more, and each counts.
		run func(t *testing.T, b *testBundle, i int, missed *int)
	}{
		{"Enqueue", func(t *testing.T, b *testBundle, i int, missed *int) {
			created := must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": fmt.Sprintf("now%d", i), "topic": "jobs"})
			require.False(t, created.NextAttemptAt.After(created.CreatedAt), "due %s, created %s", created.NextAttemptAt, created.CreatedAt)
			require.Equal(t, created.SendAt, *created.NextAttemptAt)
			b.answer(t, b.reserveOneAtOnce(t, missed), "ack")
		}},
		{"RetryAtOnce", func(t *testing.T, b *testBundle, i int, missed *int) {
			must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
				map[string]any{"id": fmt.Sprintf("again%d", i), "topic": "jobs", "backoff": []string{"0s", "0s"}})
			b.answer(t, b.reserveOneAtOnce(t, missed), "nack")
			n := b.reserveOneAtOnce(t, missed)
			require.Equal(t, 1, n.Attempts)
			b.answer(t, n, "ack")
		}},
		{"AckOfLineHead", func(t *testing.T, b *testBundle, i int, missed *int) {
			key := fmt.Sprintf("line%d", i)
			for _, id := range []string{key + "-first", key + "-second"} {
				must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": id, "topic": "jobs", "order_key": key})
			}
			for _, id := range []string{key + "-first", key + "-second"} {
				n := b.reserveOneAtOnce(t, missed)
				require.Equal(t, id, n.ID)
				b.answer(t, n, "ack")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, api.Config{})
			missed := 0
			for i := range 30 {
				tc.run(t, b, i, &missed)
			}
			require.Zero(t, missed, "reservations right after the call that made a job due that found nothing due")
		})
	}
}

// reserveOneAtOnce reserves, without waiting, the one job of topic jobs
// that is due; when that finds nothing, it counts the miss in *missed and
// waits for the job, so that the test goes on.
func (b *testBundle) reserveOneAtOnce(t *testing.T, missed *int) notify.Notification {
	t.Helper()
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve", nil)
	if len(res.Notifications) == 0 {
		*missed++
		res = must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	}
	require.Len(t, res.Notifications, 1)
	return res.Notifications[0]
}

// answer acks or nacks (step) n as the worker that reserved it.
func (b *testBundle) answer(t *testing.T, n notify.Notification, step string) {
	t.Helper()
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/"+n.ID+"/"+step, map[string]string{"receipt": n.Receipt})
}

// firstLookHook runs then once the first look at pull.jobs's heads has
// been answered, and, with slowDial, holds up new connections (the wake-up
// subscription's among them) by 200ms.
type firstLookHook struct {
	armed, slowDial atomic.Bool
	then            func()
}

func (h *firstLookHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.slowDial.Load() {
			time.Sleep(200 * time.Millisecond)
		}
		return next(ctx, network, addr)
	}
}

func (h *firstLookHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *firstLookHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && cmds[0].Name() == "zrange" && strings.Contains(cmds[0].String(), ":due:pull.jobs") && h.armed.CompareAndSwap(true, false) {
			h.then()
		}
		return err
	}
}

// TestReserveFirstWaiterHearsEnqueue: the first worker to wait on an API
// process gets a job enqueued (elsewhere) just after it looked and found
// nothing as soon as it is due, as a later waiter does, rather than at its
// next poll, although its wake-up subscription was confirmed only after
// that enqueue.
func TestReserveFirstWaiterHearsEnqueue(t *testing.T) {
	t.Parallel()
	hook := &firstLookHook{}
	rdb := hookedClient(t, hook)
	b := setupOn(t, rdb, api.Config{PollInterval: time.Minute})
	other := setupIn(t, sharedServer(t).Client(t), b.store.Namespace(), api.Config{})
	hook.then = func() {
		must[notify.Notification](t, other, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "x", "topic": "jobs"})
	}
	must[statsBody](t, b, http.StatusOK, "GET", "/v1/stats", nil) // a pooled connection for the look
	hook.slowDial.Store(true)
	hook.armed.Store(true)
	start := time.Now()
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	require.Len(t, res.Notifications, 1)
	require.Less(t, time.Since(start), 2*time.Second, "the job waited for the poll, not for the news of its enqueue")
}
