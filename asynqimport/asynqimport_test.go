package asynqimport_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/asynqimport"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/asynqtest"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// server is Herald's redis-server; tests isolate by namespace. Each asynq
// deployment has a server of its own.
var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }

// testBundle is a Herald store of the test's own and the configuration of
// an import from deployment d into it: TypeOrder tasks to the pull topic
// jobs of the demo policies, TypeEmail left unmapped.
type testBundle struct {
	store *store.Store
	cfg   *asynqimport.Config
}

func setup(t *testing.T, d *asynqtest.Deployment) *testBundle {
	t.Helper()
	st, err := store.New(&store.Config{Client: server.Client(t), Namespace: redistest.Namespace(t), Shards: 4, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	set, err := policy.Load("../configs/demo-policies.yaml")
	require.NoError(t, err)
	return &testBundle{store: st, cfg: &asynqimport.Config{
		Addr:     d.Addr,
		Queue:    asynqtest.Queue,
		Map:      map[string]asynqimport.Mapping{asynqtest.TypeOrder: {Topic: "jobs"}},
		Store:    st,
		Policies: set,
		PageSize: 2, // several pages even for a few tasks
	}}
}

func (b *testBundle) run(t *testing.T) *asynqimport.Summary {
	t.Helper()
	sum, err := asynqimport.Run(context.Background(), b.cfg)
	require.NoError(t, err)
	require.Equal(t, sum.Matched, sum.Imported+sum.Present+sum.Skipped)
	return sum
}

func (b *testBundle) get(t *testing.T, id string) *notify.Notification {
	t.Helper()
	n, err := b.store.Get(context.Background(), id)
	require.NoError(t, err, id)
	return n
}

// unmapped is the skip of the one TypeEmail task.
var unmapped = &asynqimport.Reason{Reason: `type "email:send" is not mapped to a topic`, Count: 1, IDs: []string{asynqtest.EmailPending}}

func TestRun(t *testing.T) {
	t.Parallel()
	// Runs that leave asynq as it is share one deployment.
	shared := asynqtest.Start(t)

	t.Run("KeepsWhatAsynqHad", func(t *testing.T) {
		t.Parallel()
		b := setup(t, shared)
		var progress [][2]int
		b.cfg.ProgressFunc = func(done, total int) { progress = append(progress, [2]int{done, total}) }
		before := time.Now()
		sum := b.run(t)
		after := time.Now()
		require.Equal(t, &asynqimport.Summary{
			Queue: asynqtest.Queue, States: asynqimport.AllStates,
			Matched: 7, Imported: 6, Skipped: 1, Reasons: []*asynqimport.Reason{unmapped}, Base64: 1,
		}, sum)
		require.Equal(t, [2]int{7, 7}, progress[len(progress)-1])

		tasks := shared.Tasks
		for _, id := range []string{asynqtest.ScheduledJSON, asynqtest.ScheduledBytes, asynqtest.RetryTwice} {
			n := b.get(t, id)
			require.Equal(t, notify.StateScheduled, n.State, id)
			require.Equal(t, "jobs", n.Topic)
			require.Equal(t, tasks[id].Retried, n.Attempts, id)
			require.NotNil(t, n.NextAttemptAt)
			require.Equal(t, tasks[id].NextProcessAt.UTC(), n.NextAttemptAt.UTC(), "%s is due when asynq had it", id)
		}
		require.JSONEq(t, `{"order":1}`, string(b.get(t, asynqtest.ScheduledJSON).Payload))
		require.Equal(t, 2, b.get(t, asynqtest.RetryTwice).Attempts, "the next attempt is the third")
		var raw []byte
		require.NoError(t, json.Unmarshal(b.get(t, asynqtest.ScheduledBytes).Payload, &raw))
		require.Equal(t, []byte("\xde\xad\xbe\xef"), raw, "bytes come back from the base64 string")

		pending := b.get(t, asynqtest.Pending)
		require.Equal(t, notify.StateScheduled, pending.State)
		require.WithinRange(t, *pending.NextAttemptAt, before.Truncate(time.Millisecond), after.Add(time.Millisecond), "due now")
		require.JSONEq(t, `{"order":3}`, string(pending.Payload))

		exhausted, skipped := tasks[asynqtest.DeadExhausted], tasks[asynqtest.DeadSkipped]
		for _, tc := range []struct {
			info     *asynq.TaskInfo
			attempts int
			outcome  notify.Outcome
		}{
			{exhausted, 2, notify.OutcomeRetry},
			{skipped, 1, notify.OutcomePermanent},
		} {
			n := b.get(t, tc.info.ID)
			require.Equal(t, notify.StateDead, n.State, tc.info.ID)
			require.Equal(t, tc.attempts, n.Attempts, tc.info.ID)
			require.Len(t, n.History, 1)
			h := n.History[0]
			require.Equal(t, tc.attempts-1, h.Attempt)
			require.Equal(t, tc.outcome, h.Outcome, tc.info.ID)
			require.Equal(t, tc.info.LastErr, h.Error)
			require.Equal(t, tc.info.LastFailedAt.UTC(), h.FinishedAt.UTC())
		}
		require.Equal(t, asynqtest.HandlerError, exhausted.LastErr)
		require.Contains(t, skipped.LastErr, asynqtest.SkipError)
		dead, _, err := b.store.ListDead(context.Background(), "jobs", 10, "")
		require.NoError(t, err)
		require.Len(t, dead, 2)

		again := b.run(t)
		require.Zero(t, again.Imported, "a second run imports nothing twice")
		require.Equal(t, 6, again.Present)
		require.Equal(t, []*asynqimport.Reason{unmapped}, again.Reasons)
		info, err := shared.Inspector.GetQueueInfo(asynqtest.Queue)
		require.NoError(t, err)
		require.Equal(t, 7, info.Size, "without --move asynq keeps its tasks")
	})

	t.Run("FirstBackoffKeepsDueTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t, shared)
		// payment-poll's first attempt is 1s after send_at.
		b.cfg.Map[asynqtest.TypeOrder] = asynqimport.Mapping{Topic: "jobs", Policy: "payment-poll"}
		b.cfg.States = []asynqimport.State{asynqimport.StateScheduled, asynqimport.StatePending}
		before := time.Now()
		sum := b.run(t)
		after := time.Now()
		require.Equal(t, 3, sum.Imported)
		n := b.get(t, asynqtest.ScheduledJSON)
		require.Equal(t, "payment-poll", n.Policy)
		require.Equal(t, time.Second, time.Duration(n.Backoff[0]))
		require.Equal(t, shared.Tasks[asynqtest.ScheduledJSON].NextProcessAt.UTC(), n.NextAttemptAt.UTC())
		require.Equal(t, n.NextAttemptAt.Add(-time.Second), n.SendAt)
		pending := b.get(t, asynqtest.Pending)
		require.WithinRange(t, *pending.NextAttemptAt, before.Truncate(time.Millisecond), after.Add(time.Millisecond), "due now")

		again := b.run(t)
		require.Zero(t, again.Imported)
		require.Equal(t, 3, again.Present, "a pending task asks for the same content again")
	})

	t.Run("LargePayloadsSkipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, shared)
		b.cfg.MaxPayload = len(`"3q2+7w=="`) // the base64 one fits; {"order":N} does not
		sum := b.run(t)
		require.Equal(t, 1, sum.Imported)
		require.Len(t, sum.Reasons, 2)
		large := sum.Reasons[0]
		require.Equal(t, "payload is larger than 10 bytes", large.Reason)
		require.Equal(t, 5, large.Count)
		require.ElementsMatch(t, []string{asynqtest.ScheduledJSON, asynqtest.RetryTwice, asynqtest.Pending,
			asynqtest.DeadSkipped, asynqtest.DeadExhausted}, large.IDs)
		require.Equal(t, unmapped, sum.Reasons[1])
	})

	t.Run("DryRunChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, shared)
		b.cfg.DryRun, b.cfg.Move = true, true
		sum := b.run(t)
		require.Equal(t, 6, sum.Imported, "would import")
		require.Zero(t, sum.Deleted)
		_, err := b.store.Get(context.Background(), asynqtest.ScheduledJSON)
		require.ErrorIs(t, err, notify.ErrNotFound)

		b.cfg.DryRun, b.cfg.Move = false, false
		b.run(t)
		b.cfg.DryRun = true
		sum = b.run(t)
		require.Zero(t, sum.Imported)
		require.Equal(t, 6, sum.Present)
	})

	t.Run("MoveDeletesWhatHeraldHolds", func(t *testing.T) {
		t.Parallel()
		d := asynqtest.Start(t)
		b := setup(t, d)
		// Herald already holds other content under one id: that task is
		// skipped and stays in asynq.
		conflict := heraldtest.Notification(t, asynqtest.ScheduledJSON, time.Now(), heraldtest.Payload(`{"other":true}`))
		_, _, err := b.store.Enqueue(context.Background(), conflict, false)
		require.NoError(t, err)
		b.cfg.Move = true
		sum := b.run(t)
		require.Equal(t, 5, sum.Imported)
		require.Equal(t, 5, sum.Deleted)
		require.Equal(t, []*asynqimport.Reason{
			{Reason: "Herald already holds a different notification with this id", Count: 1, IDs: []string{asynqtest.ScheduledJSON}},
			unmapped,
		}, sum.Reasons)
		left := remaining(t, d)
		require.ElementsMatch(t, []string{asynqtest.ScheduledJSON, asynqtest.EmailPending}, left)

		_, err = b.store.Cancel(context.Background(), asynqtest.ScheduledJSON)
		require.NoError(t, err)
		b.cfg.Map[asynqtest.TypeEmail] = asynqimport.Mapping{Topic: "jobs"}
		b.cfg.States = []asynqimport.State{asynqimport.StatePending}
		sum = b.run(t)
		require.Equal(t, 1, sum.Imported)
		require.Equal(t, 1, sum.Deleted)
		require.Equal(t, []string{asynqtest.ScheduledJSON}, remaining(t, d), "only the conflict is left")
		require.JSONEq(t, `{"to":"ops@example.com"}`, string(b.get(t, asynqtest.EmailPending).Payload))
	})

	t.Run("ChangedInAsynqIsNotMoved", func(t *testing.T) {
		t.Parallel()
		d := asynqtest.Start(t)
		b := setup(t, d)
		cl := asynq.NewClient(asynq.RedisClientOpt{Addr: d.Addr})
		defer cl.Close()
		for _, id := range []string{"revived", "stopped"} {
			_, err := cl.Enqueue(asynq.NewTask(asynqtest.TypeOrder, []byte(`{"order":7}`)), asynq.Queue(asynqtest.Queue), asynq.TaskID(id))
			require.NoError(t, err)
		}
		require.NoError(t, d.Inspector.ArchiveTask(asynqtest.Queue, "revived"))
		b.run(t)
		require.Equal(t, notify.StateDead, b.get(t, "revived").State)
		require.Equal(t, notify.StateScheduled, b.get(t, "stopped").State)

		// The operator runs one again in asynq and stops the other.
		require.NoError(t, d.Inspector.RunTask(asynqtest.Queue, "revived"))
		require.NoError(t, d.Inspector.ArchiveTask(asynqtest.Queue, "stopped"))
		changed := []*asynqimport.Reason{
			unmapped,
			{Reason: "pending in asynq but dead in Herald (changed since it was imported)", Count: 1, IDs: []string{"revived"}},
			{Reason: "archived in asynq but scheduled in Herald (changed since it was imported)", Count: 1, IDs: []string{"stopped"}},
		}
		b.cfg.Move, b.cfg.DryRun = true, true
		sum := b.run(t)
		require.Equal(t, 6, sum.Present)
		require.ElementsMatch(t, changed, sum.Reasons, "a dry run says the same")

		b.cfg.DryRun = false
		sum = b.run(t)
		require.Equal(t, 6, sum.Present)
		require.Equal(t, 6, sum.Deleted)
		require.ElementsMatch(t, changed, sum.Reasons)
		require.ElementsMatch(t, []string{"revived", "stopped", asynqtest.EmailPending}, remaining(t, d), "neither changed task is deleted")
		require.Equal(t, notify.StateDead, b.get(t, "revived").State)
		require.Equal(t, notify.StateScheduled, b.get(t, "stopped").State)
	})

	t.Run("ArchivedByHandKeepsAttempts", func(t *testing.T) {
		t.Parallel()
		d := asynqtest.Start(t)
		b := setup(t, d)
		require.NoError(t, d.Inspector.ArchiveTask(asynqtest.Queue, asynqtest.RetryTwice))
		b.cfg.States = []asynqimport.State{asynqimport.StateArchived}
		require.Equal(t, 3, b.run(t).Imported)
		n := b.get(t, asynqtest.RetryTwice)
		require.Equal(t, notify.StateDead, n.State)
		require.Equal(t, 2, n.Attempts, "two attempts failed; archiving by hand made none")
		require.Len(t, n.History, 1)
		require.Equal(t, 1, n.History[0].Attempt)
		require.Equal(t, notify.OutcomePermanent, n.History[0].Outcome)
		require.Equal(t, asynqtest.HandlerError, n.History[0].Error)
	})

	t.Run("UnknownEndpointRefused", func(t *testing.T) {
		t.Parallel()
		d := asynqtest.Start(t)
		b := setup(t, d)
		set, err := policy.NewSet(nil, map[string]policy.Topic{"orders": {Channel: notify.ChannelWebhook, Endpoint: "merchant-42"}})
		require.NoError(t, err)
		b.cfg.Policies, b.cfg.Move = set, true
		b.cfg.Map[asynqtest.TypeOrder] = asynqimport.Mapping{Topic: "orders"}
		_, err = asynqimport.Run(context.Background(), b.cfg)
		require.ErrorContains(t, err, `map order:notify=orders: topic orders names endpoint "merchant-42", which is neither in the policies file nor registered`)
		require.Len(t, remaining(t, d), 7, "nothing moved")
		_, err = b.store.Get(context.Background(), asynqtest.Pending)
		require.ErrorIs(t, err, notify.ErrNotFound)

		hook := endpoint.Endpoint{URL: "https://merchant.example/notify"}
		b.cfg.Policies, err = set.WithEndpoints(map[string]endpoint.Endpoint{"merchant-42": hook})
		require.NoError(t, err)
		b.cfg.DryRun = true
		require.Equal(t, 6, b.run(t).Imported, "the policies file's endpoint")

		b.cfg.Policies, b.cfg.DryRun = set, false
		_, err = b.store.PutEndpoint(context.Background(), "merchant-42", &hook)
		require.NoError(t, err)
		sum := b.run(t)
		require.Equal(t, 6, sum.Imported, "an endpoint registered over the API")
		require.Equal(t, 6, sum.Deleted)
	})

	t.Run("ReportsTasksNotRead", func(t *testing.T) {
		t.Parallel()
		src := redistest.Start(t, redistest.Options{})
		opt := asynq.RedisClientOpt{Addr: src.Addr}
		cl := asynq.NewClient(opt)
		defer cl.Close()
		for _, o := range []asynq.Option{asynq.Group("daily"), asynq.Group("daily"), asynq.TaskID("busy")} {
			_, err := cl.Enqueue(asynq.NewTask(asynqtest.TypeOrder, []byte(`{"order":8}`)), asynq.Queue(asynqtest.Queue), o)
			require.NoError(t, err)
		}
		// A worker holds "busy" until the test ends.
		started, release := make(chan struct{}), make(chan struct{})
		srv := asynq.NewServer(opt, asynq.Config{Queues: map[string]int{asynqtest.Queue: 1}, LogLevel: asynq.FatalLevel})
		require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			close(started)
			<-release
			return nil
		})))
		t.Cleanup(srv.Shutdown)
		t.Cleanup(func() { close(release) })
		<-started

		b := setup(t, &asynqtest.Deployment{Addr: src.Addr})
		sum := b.run(t)
		require.Zero(t, sum.Matched)
		require.Equal(t, 1, sum.Active)
		require.Equal(t, 2, sum.Aggregating)
		var out strings.Builder
		_, err := sum.WriteTo(&out)
		require.NoError(t, err)
		require.Contains(t, out.String(), "\nactive              1 (not read: ")
		require.Contains(t, out.String(), "\naggregating         2 (not read: ")
	})

	t.Run("FailedBatchNotCounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, shared)
		failing := &failingStore{Store: b.store, after: 1}
		b.cfg.Store = failing
		sum, err := asynqimport.Run(context.Background(), b.cfg)
		require.ErrorContains(t, err, "herald: store: redis went away")
		require.Equal(t, 2, sum.Imported, "the first page")
		require.Equal(t, sum.Matched, sum.Imported+sum.Present+sum.Skipped)
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		b := setup(t, shared)
		// A Redis that accepts connections and never answers.
		paused := redistest.Start(t, redistest.Options{})
		paused.Pause()
		t.Cleanup(paused.Resume)
		locked := redistest.Start(t, redistest.Options{})
		require.NoError(t, locked.Client(t).ConfigSet(context.Background(), "requirepass", "the-right-one").Err())
		empty := redistest.Start(t, redistest.Options{})
		for _, tc := range []struct {
			name string
			edit func(*asynqimport.Config)
			want string
		}{
			{"Unreachable", func(c *asynqimport.Config) { c.Addr, c.DialTimeout = "127.0.0.1:1", time.Second },
				"cannot reach asynq's Redis at 127.0.0.1:1 within 1s"},
			{"NoAnswer", func(c *asynqimport.Config) { c.Addr, c.DialTimeout = paused.Addr, 300*time.Millisecond },
				"cannot reach asynq's Redis at " + paused.Addr + " within 300ms"},
			{"WrongPassword", func(c *asynqimport.Config) { c.Addr, c.Password = locked.Addr, "not-it" },
				"asynq's Redis at " + locked.Addr + " refused the password"},
			{"UnknownQueue", func(c *asynqimport.Config) { c.Queue = "nope" }, `has no queue "nope" (it has: payments)`},
			{"NoQueues", func(c *asynqimport.Config) { c.Addr = empty.Addr }, `has no queue "payments", nor any other`},
			{"TopicWithoutChannel", func(c *asynqimport.Config) { c.Map = map[string]asynqimport.Mapping{"x": {Topic: "nope"}} },
				"map x=nope: channel: is required"},
			{"UnknownPolicy", func(c *asynqimport.Config) {
				c.Map = map[string]asynqimport.Mapping{"x": {Topic: "jobs", Policy: "nope"}}
			},
				`map x=jobs: policy: unknown policy "nope"`},
			{"NoMap", func(c *asynqimport.Config) { c.Map = nil }, "map at least one task type"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := *b.cfg
				tc.edit(&cfg)
				start := time.Now()
				_, err := asynqimport.Run(context.Background(), &cfg)
				require.ErrorContains(t, err, tc.want)
				require.Less(t, time.Since(start), 5*time.Second)
			})
		}
	})
}

// failingStore is Herald's store failing every EnqueueBatch after the
// first after.
type failingStore struct {
	*store.Store
	after int
}

func (f *failingStore) EnqueueBatch(ctx context.Context, reqs []store.EnqueueRequest) ([]store.EnqueueResult, error) {
	if f.after == 0 {
		return nil, errors.New("redis went away")
	}
	f.after--
	return f.Store.EnqueueBatch(ctx, reqs)
}

// remaining returns the ids of the tasks d's queue holds.
func remaining(t *testing.T, d *asynqtest.Deployment) []string {
	t.Helper()
	var ids []string
	insp := d.Inspector
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		insp.ListScheduledTasks, insp.ListRetryTasks, insp.ListPendingTasks, insp.ListArchivedTasks, insp.ListActiveTasks,
	} {
		tasks, err := list(asynqtest.Queue, asynq.PageSize(100))
		require.NoError(t, err)
		for _, task := range tasks {
			ids = append(ids, task.ID)
		}
	}
	return ids
}

func TestParseMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in       string
		taskType string
		want     asynqimport.Mapping
		err      string
	}{
		{in: "email:deliver=emails", taskType: "email:deliver", want: asynqimport.Mapping{Topic: "emails"}},
		{in: "order:notify=orders:merchant-notify", taskType: "order:notify", want: asynqimport.Mapping{Topic: "orders", Policy: "merchant-notify"}},
		{in: "a=b=c", taskType: "a=b", want: asynqimport.Mapping{Topic: "c"}},
		{in: "orders", err: `"orders" is not TYPE=TOPIC[:POLICY]`},
		{in: "=orders", err: "is not TYPE=TOPIC"},
		{in: "x=", err: `topic "" must match`},
		{in: "x=Orders", err: `topic "Orders" must match`},
	} {
		typ, m, err := asynqimport.ParseMapping(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.taskType, typ)
		require.Equal(t, tc.want, m)
	}
}

func TestParseStates(t *testing.T) {
	t.Parallel()
	got, err := asynqimport.ParseStates("all")
	require.NoError(t, err)
	require.Equal(t, asynqimport.AllStates, got)
	got, err = asynqimport.ParseStates("retry")
	require.NoError(t, err)
	require.Equal(t, []asynqimport.State{asynqimport.StateRetry}, got)
	_, err = asynqimport.ParseStates("active")
	require.ErrorContains(t, err, `"active" is not scheduled, retry, pending, archived or all`)
}

// TestSummaryEscapesTasks: the ids of skipped tasks, and reasons quoting
// them, are any text asynq held; the summary escapes them, so that an id
// holding an escape sequence cannot clear or drive the operator's terminal.
func TestSummaryEscapesTasks(t *testing.T) {
	t.Parallel()
	sum := &asynqimport.Summary{Queue: "default", Matched: 1, Skipped: 1, Reasons: []*asynqimport.Reason{
		{Reason: "type \x1b]0;x\a is not mapped", Count: 1, IDs: []string{"task-\x1b[2J"}},
	}}
	var b strings.Builder
	_, err := sum.WriteTo(&b)
	require.NoError(t, err)
	require.Contains(t, b.String(), `  1: type \x1b]0;x\a is not mapped (task-\x1b[2J)`)
	require.NotContains(t, b.String(), "\x1b")
}
