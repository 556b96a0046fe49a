package client_test

import (
	"context"
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

func TestEnqueueEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.New(&store.Config{Client: server.Client(t), Namespace: redistest.Namespace(t), Shards: 4})
	require.NoError(t, err)
	set, err := policy.NewSet(nil, nil)
	require.NoError(t, err)
	set, err = set.WithEndpoints(map[string]endpoint.Endpoint{"merchant-42": {URL: "https://m42.example/notify"}})
	require.NoError(t, err)
	c, err := client.New(&client.Config{Store: st, PoliciesFunc: func() *policy.Set { return set }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	n, _, err := c.Enqueue(ctx, &notify.Request{ID: "e1", Topic: "orders", Endpoint: "merchant-42"})
	require.NoError(t, err)
	got, err := c.Get(ctx, n.ID)
	require.NoError(t, err)
	require.Equal(t, "merchant-42", got.Endpoint, "the stored record keeps its endpoint")
	require.Equal(t, notify.ChannelWebhook, got.Channel)

	for name, req := range map[string]*notify.Request{
		"UnknownEndpoint":       {ID: "e2", Topic: "orders", Endpoint: "merchant-43"},
		"EndpointAndTarget":     {ID: "e3", Topic: "orders", Endpoint: "merchant-42", Target: "https://m42.example"},
		"EndpointForSMS":        {ID: "e4", Topic: "orders", Endpoint: "merchant-42", Channel: notify.ChannelSMS},
		"MalformedEndpointName": {ID: "e5", Topic: "orders", Endpoint: "merchant 42"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := c.Enqueue(ctx, req)
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "endpoint", fe.Field)
			_, err = c.Get(ctx, req.ID)
			require.ErrorIs(t, err, notify.ErrNotFound, "a refused request was stored")
		})
	}
}

// TestReservePausedTopic: a paused pull topic hands out nothing. What came
// due meanwhile reads as paused, with no next attempt time, as push work
// does (openapi.yaml's paused), rather than as scheduled and overdue; what
// is not due yet keeps its time.
func TestReservePausedTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := setup(t)
	paused := func(id string) bool {
		t.Helper()
		n, err := c.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, n.Paused, n.NextAttemptAt == nil, "%s: paused %v, next attempt %v", id, n.Paused, n.NextAttemptAt)
		return n.Paused
	}
	require.NoError(t, c.Pause(ctx, store.PauseTopic, "appointment-reminder"))
	_, _, err := c.Enqueue(ctx, &notify.Request{ID: "r1", Topic: "appointment-reminder"})
	require.NoError(t, err)
	later := notify.Duration(time.Hour)
	_, _, err = c.Enqueue(ctx, &notify.Request{ID: "later", Topic: "appointment-reminder", Delay: &later})
	require.NoError(t, err)
	got, err := c.Reserve(ctx, "appointment-reminder", 10, 0)
	require.NoError(t, err)
	require.Empty(t, got, "a paused pull topic handed out work")
	require.Eventually(t, func() bool { return paused("r1") }, 5*time.Second, time.Millisecond) // due within the millisecond it is rounded up to
	require.False(t, paused("later"), "not due yet")

	resumed, err := c.Resume(ctx, store.PauseTopic, "appointment-reminder")
	require.NoError(t, err)
	require.Zero(t, resumed, "nothing was parked: pull consumers never took it")
	require.False(t, paused("r1"))
	got, err = c.Reserve(ctx, "appointment-reminder", 10, 3*time.Second)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 0, got[0].Attempts)
}

// TestReserveHonoursAPauseAtOnce: once Pause has returned, the client that
// paused the topic hands out none of its work, though it read a moment ago
// that the topic was not paused; and after Resume it hands it out at once.
func TestReserveHonoursAPauseAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := setup(t)
	got, err := c.Reserve(ctx, "appointment-reminder", 10, 0)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, c.Pause(ctx, store.PauseTopic, "appointment-reminder"))
	_, _, err = c.Enqueue(ctx, &notify.Request{ID: "r1", Topic: "appointment-reminder"})
	require.NoError(t, err)
	got, err = c.Reserve(ctx, "appointment-reminder", 10, 0)
	require.NoError(t, err)
	require.Empty(t, got, "a topic paused by this client handed out work")

	_, err = c.Resume(ctx, store.PauseTopic, "appointment-reminder")
	require.NoError(t, err)
	got, err = c.Reserve(ctx, "appointment-reminder", 10, 0)
	require.NoError(t, err)
	require.Len(t, got, 1, "a resumed topic held back its work")
}

// TestPauseWhoseWaitIsCutShort: a Pause whose context ends before every
// process can have read it is recorded all the same, and says that it may
// not hold everywhere yet, rather than answering as if it did.
func TestPauseWhoseWaitIsCutShort(t *testing.T) {
	t.Parallel()
	c := setup(t)
	// Long enough for the pause's write on a loaded machine, where 20ms
	// was not, and well short of the wait that follows it.
	ctx, cancel := context.WithTimeout(t.Context(), store.PausedViewAge/2)
	defer cancel()
	err := c.Pause(ctx, store.PauseTopic, "appointment-reminder")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "paused, but a process may not have read it yet")
	pauses, err := c.Pauses(t.Context())
	require.NoError(t, err)
	require.Len(t, pauses, 1)
	require.Equal(t, "appointment-reminder", pauses[0].Name)
}

// TestDeleteEndpointFreesWhatIsParked: the notifications parked behind an
// endpoint's pause come due when the endpoint is deleted (to fail at their
// next attempt, for want of it), instead of waiting for a resume no one
// can make any more; and a pause left behind by an earlier version, or a
// delete whose resume failed, can still be ended.
func TestDeleteEndpointFreesWhatIsParked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var st *store.Store
	c := setup(t, func(cfg *client.Config) {
		st = cfg.Store
		cfg.Endpoints = endpoint.NewRegistry(&endpoint.RegistryConfig{Source: st, CacheTTL: time.Nanosecond})
	})
	park := func(name string) {
		_, _, err := c.PutEndpoint(ctx, name, &endpoint.Endpoint{URL: "https://" + name + ".example/notify"})
		require.NoError(t, err)
		_, _, err = c.Enqueue(ctx, &notify.Request{ID: name + "-1", Topic: "orders", Endpoint: name})
		require.NoError(t, err)
		require.NoError(t, c.Pause(ctx, store.PauseEndpoint, name))
		var items []*notify.Notification
		require.Eventually(t, func() bool { // due within the millisecond it is rounded up to
			items, _, err = st.Reserve(ctx, store.QueuePush, []int{0, 1, 2, 3}, store.MaxReserve)
			require.NoError(t, err)
			return len(items) == 1
		}, 5*time.Second, time.Millisecond)
		_, err = st.Finish(ctx, []store.Finish{{Notification: items[0], Action: notify.ActionRelease,
			NextAt: store.ParkAt(store.PauseEndpoint, name)}})
		require.NoError(t, err)
		got, err := c.Get(ctx, name+"-1")
		require.NoError(t, err)
		require.True(t, got.Paused)
	}
	due := func(id string) {
		got, err := c.Get(ctx, id)
		require.NoError(t, err)
		require.False(t, got.Paused)
		require.NotNil(t, got.NextAttemptAt)
		require.WithinDuration(t, time.Now(), *got.NextAttemptAt, time.Minute)
	}

	park("m1")
	park("m2")
	require.NoError(t, c.DeleteEndpoint(ctx, "m1"))
	due("m1-1")
	_, err := c.Resume(ctx, store.PauseEndpoint, "m1")
	require.ErrorIs(t, err, endpoint.ErrNotFound, "nothing is left to resume")

	require.NoError(t, st.DeleteEndpoint(ctx, "m2")) // gone, its pause left behind
	resumed, err := c.Resume(ctx, store.PauseEndpoint, "m2")
	require.NoError(t, err)
	require.Equal(t, 1, resumed)
	due("m2-1")
}
