package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// server is the package's redis-server; tests isolate by namespace.
var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }

func setup(t *testing.T, more ...func(*client.Config)) *client.Client {
	t.Helper()
	st, err := store.New(&store.Config{Client: server.Client(t), Namespace: redistest.Namespace(t), Shards: 4})
	require.NoError(t, err)
	set, err := policy.NewSet(map[string]policy.Policy{
		"twice": {Backoff: []notify.Duration{0, 0}},
	}, map[string]policy.Topic{
		"appointment-reminder": {Channel: notify.ChannelPull, Policy: "twice"},
	})
	require.NoError(t, err)
	cfg := &client.Config{Store: st, PoliciesFunc: func() *policy.Set { return set }}
	for _, f := range more {
		f(cfg)
	}
	c, err := client.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestAnswersAreNotStoreErrors: what a caller got wrong is an answer to the
// caller, not a failure of Redis: the observer behind the Redis error
// metric hears of none of it, so that alerts on that metric mean Redis.
func TestAnswersAreNotStoreErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	obs := &storeErrors{}
	c := setup(t, func(cfg *client.Config) { cfg.Observer = obs })
	req := func(id string, delay time.Duration) *notify.Request {
		d := notify.Duration(delay)
		return &notify.Request{ID: id, Topic: "appointment-reminder", OrderKey: "k", Delay: &d}
	}
	for _, r := range []*notify.Request{req("a", time.Hour), req("b", time.Hour)} {
		_, _, err := c.Enqueue(ctx, r)
		require.NoError(t, err)
	}
	_, err := c.Get(ctx, "missing")
	require.ErrorIs(t, err, notify.ErrNotFound)
	_, _, err = c.Enqueue(ctx, req("a", 2*time.Hour))
	require.ErrorIs(t, err, notify.ErrConflict)
	replace := req("b", 2*time.Hour)
	replace.Replace = true
	_, _, err = c.Enqueue(ctx, replace)
	require.ErrorIs(t, err, notify.ErrOrdered)
	_, err = c.GetEndpoint(ctx, "nobody")
	require.ErrorIs(t, err, endpoint.ErrNotFound)
	require.Empty(t, obs.ops())
}

// storeErrors is an observer that records the operations of the store
// errors it hears of.
type storeErrors struct {
	mu  sync.Mutex
	got []string
}

func (*storeErrors) AttemptFinished(*notify.Notification, notify.Attempt, notify.Action, time.Duration) {
}
func (*storeErrors) Enqueued(*notify.Notification, store.EnqueueStatus) {}

func (o *storeErrors) StoreError(op string, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, op)
}

func (o *storeErrors) ops() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.got
}

func TestEnqueueAppliesTopicDefaults(t *testing.T) {
	t.Parallel()
	c := setup(t)
	ctx := context.Background()
	remindAt := time.Now().Add(time.Hour)
	n, status, err := c.Enqueue(ctx, &notify.Request{ID: "appt-42", Topic: "appointment-reminder", SendAt: &remindAt})
	require.NoError(t, err)
	require.Equal(t, store.Created, status)
	require.Equal(t, notify.ChannelPull, n.Channel)
	require.Equal(t, "twice", n.Policy)
	require.Len(t, n.Backoff, 2)

	_, _, err = c.Enqueue(ctx, &notify.Request{ID: "appt-42", Topic: "appointment-reminder"})
	require.ErrorIs(t, err, notify.ErrConflict)

	moved := remindAt.Add(time.Hour)
	n, status, err = c.Enqueue(ctx, &notify.Request{ID: "appt-42", Topic: "appointment-reminder", SendAt: &moved, Replace: true})
	require.NoError(t, err)
	require.Equal(t, store.Replaced, status)
	require.WithinDuration(t, moved, n.SendAt, time.Millisecond)

	n, err = c.Cancel(ctx, "appt-42")
	require.NoError(t, err)
	require.Equal(t, notify.StateCancelled, n.State)
}

func TestEnqueueBatchValidatesEachItem(t *testing.T) {
	t.Parallel()
	c := setup(t)
	res, err := c.EnqueueBatch(context.Background(), []*notify.Request{
		{ID: "ok", Topic: "appointment-reminder"},
		{ID: "bad", Topic: "appointment-reminder", Backoff: []notify.Duration{0, -1}},
	})
	require.NoError(t, err)
	require.Equal(t, store.Created, res[0].Status)
	var fe *notify.FieldError
	require.ErrorAs(t, res[1].Err, &fe)
	require.Equal(t, "backoff[1]", fe.Field)

	_, err = c.EnqueueBatch(context.Background(), make([]*notify.Request, store.MaxBatch+1))
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "notifications", fe.Field)
}

func TestPullNackPermanentIsDead(t *testing.T) {
	t.Parallel()
	c := setup(t)
	ctx := context.Background()
	_, _, err := c.Enqueue(ctx, &notify.Request{ID: "job", Topic: "appointment-reminder"})
	require.NoError(t, err)
	items, err := c.Reserve(ctx, "appointment-reminder", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, items, 1)

	got, err := c.Get(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, notify.StateReserved, got.State)
	require.Empty(t, got.Receipt, "Get leaves the receipt to the consumer that holds it")

	require.ErrorIs(t, c.Ack(ctx, "job", "not-the-receipt"), notify.ErrStaleReceipt)
	require.NoError(t, c.Nack(ctx, "job", items[0].Receipt, notify.Permanent(errors.New("patient unknown"))))
	got, err = c.Get(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, notify.StateDead, got.State, "a permanent failure skips the rest of the array")
	require.Equal(t, notify.OutcomePermanent, got.History[0].Outcome)

	dead, next, err := c.ListDead(ctx, "appointment-reminder", 10, "")
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, dead, 1)
}

func TestReserveArguments(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var fe *notify.FieldError
	_, err := c.Reserve(context.Background(), "Bad!", 1, 0)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "topic", fe.Field)
	_, err = c.Reserve(context.Background(), "jobs", client.MaxReserve+1, 0)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "max", fe.Field)
	items, err := c.Reserve(context.Background(), "jobs", 1, 0)
	require.NoError(t, err)
	require.Empty(t, items)
}

// TestNotDead: the ids a replay or purge names that are not dead come back
// with their states, unknown ones as unknown, in the order given and once
// each; none when every one is dead or none is named.
func TestNotDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := setup(t)
	past, later := time.Now().Add(-time.Second), notify.Duration(time.Hour)
	_, _, err := c.Enqueue(ctx, &notify.Request{ID: "dead-1", Topic: "appointment-reminder", SendAt: &past})
	require.NoError(t, err)
	_, _, err = c.Enqueue(ctx, &notify.Request{ID: "live-1", Topic: "appointment-reminder", Delay: &later})
	require.NoError(t, err)
	got, err := c.Reserve(ctx, "appointment-reminder", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, c.Nack(ctx, got[0].ID, got[0].Receipt, notify.Permanent(errors.New("gone"))))
	states, err := c.NotDead(ctx, store.DeadFilter{IDs: []string{"nope", "dead-1", "live-1", "nope"}})
	require.NoError(t, err)
	require.Equal(t, []client.IDState{{ID: "nope", State: client.StateUnknown}, {ID: "live-1", State: "scheduled"}}, states)
	for _, f := range []store.DeadFilter{{IDs: []string{"dead-1"}}, {Topic: "appointment-reminder"}} {
		states, err = c.NotDead(ctx, f)
		require.NoError(t, err)
		require.Empty(t, states)
	}
}
