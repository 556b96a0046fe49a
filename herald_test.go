package herald_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }

// connect opens a Redis client, and a Herald client over set in a
// namespace of the test's own.
func connect(t *testing.T, set *herald.Policies) (*redis.Client, string, *herald.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ns := redistest.Namespace(t)
	c, err := herald.NewClient(rdb, &herald.ClientConfig{Namespace: ns, Policies: set})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return rdb, ns, c
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	set, err := herald.NewPolicies(nil, map[string]herald.Topic{"texts": {Channel: herald.ChannelSMS}})
	require.NoError(t, err)
	_, _, c := connect(t, set)

	t.Run("ChannelFromTarget", func(t *testing.T) {
		for _, tc := range []struct {
			name, topic, target, want string
		}{
			{"NoTargetIsPull", "jobs", "", herald.ChannelPull},
			{"URLIsWebhook", "hooks", "https://merchant.example/notify", herald.ChannelWebhook},
			{"PhoneIsSMS", "reminders", "+14155550100", herald.ChannelSMS},
			{"TopicDecides", "texts", "+14155550100", herald.ChannelSMS},
		} {
			// A string payload is an SMS's text, and any other channel's JSON.
			res, err := c.Enqueue(ctx, tc.topic, "hello", herald.Target(tc.target))
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.want, res.Notification.Channel, tc.name)
		}
	})

	t.Run("Idempotent", func(t *testing.T) {
		at := time.Now().Add(time.Hour)
		first, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 1}, herald.ID("same"), herald.SendAt(at))
		require.NoError(t, err)
		require.Equal(t, herald.Created, first.Status)
		again, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 1}, herald.ID("same"), herald.SendAt(at))
		require.NoError(t, err)
		require.Equal(t, herald.Existing, again.Status)
		refused, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 2}, herald.ID("same"), herald.SendAt(at))
		require.ErrorIs(t, err, herald.ErrConflict)
		require.JSONEq(t, `{"n":1}`, string(refused.Notification.Payload), "the stored record beside the error")
		replaced, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 2}, herald.ID("same"), herald.SendAt(at), herald.Replace())
		require.NoError(t, err)
		require.Equal(t, herald.Replaced, replaced.Status)
		require.JSONEq(t, `{"n":2}`, string(replaced.Notification.Payload))
	})

	t.Run("DelayIsTheContent", func(t *testing.T) {
		// As Delay says: the same delay repeated is the same notification,
		// due when first asked; one worked out from the clock is not.
		first, err := c.Enqueue(ctx, "jobs", nil, herald.ID("delayed"), herald.Delay(time.Hour))
		require.NoError(t, err)
		again, err := c.Enqueue(ctx, "jobs", nil, herald.ID("delayed"), herald.Delay(time.Hour))
		require.NoError(t, err)
		require.Equal(t, herald.Existing, again.Status)
		require.Equal(t, first.Notification.NextAttemptAt, again.Notification.NextAttemptAt)
		_, err = c.Enqueue(ctx, "jobs", nil, herald.ID("delayed"), herald.Delay(time.Until(first.Notification.SendAt)))
		require.ErrorIs(t, err, herald.ErrConflict)
	})

	t.Run("BadFieldIsNamed", func(t *testing.T) {
		_, err := c.Enqueue(ctx, "jobs", nil, herald.ID("bad id"))
		var fe *herald.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "id", fe.Field)
		_, err = c.Enqueue(ctx, "jobs", func() {})
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "payload", fe.Field)
		_, err = c.Enqueue(ctx, "jobs", nil, herald.Delay(time.Hour), herald.SendAt(time.Now()))
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "delay", fe.Field, "Delay and SendAt")
	})

	t.Run("OptionsAreStored", func(t *testing.T) {
		res, err := c.Enqueue(ctx, "hooks", map[string]int{"n": 1}, herald.ID("every-option"),
			herald.Channel(herald.ChannelWebhook), herald.Target("https://merchant.example/notify"),
			herald.Policy("default"), herald.TTR(45*time.Second), herald.Template("receipt.tmpl"),
			herald.Headers(map[string]string{"X-Shop": "42"}), herald.OrderKey("order-7"), herald.Delay(time.Hour))
		require.NoError(t, err)
		got, err := c.Get(ctx, "every-option")
		require.NoError(t, err)
		for _, n := range []*herald.Notification{res.Notification, got} {
			require.Equal(t, herald.ChannelWebhook, n.Channel)
			require.Equal(t, "https://merchant.example/notify", n.Target)
			require.Equal(t, "default", n.Policy)
			require.Equal(t, notify.Duration(45*time.Second), n.TTR)
			require.Equal(t, "receipt.tmpl", n.Template)
			require.Equal(t, map[string]string{"X-Shop": "42"}, n.Headers)
			require.Equal(t, "order-7", n.OrderKey)
		}
		_, err = c.Enqueue(ctx, "hooks", nil, herald.Policy("nowhere"))
		var fe *herald.FieldError
		require.ErrorAs(t, err, &fe, "a policy that is not in the set")
		require.Equal(t, "policy", fe.Field)
	})

	t.Run("HeadersAddUp", func(t *testing.T) {
		// Headers adds: given twice, as by a helper that sets a trace
		// header beside the caller's, both sets are sent, a later value
		// replacing an earlier one of the same name; the caller's maps
		// are left as they were.
		mine, trace := map[string]string{"X-Shop": "42", "X-Try": "1"}, map[string]string{"Traceparent": "00-ab", "X-Try": "2"}
		res, err := c.Enqueue(ctx, "hooks", nil, herald.Target("https://merchant.example/notify"),
			herald.Headers(mine), herald.Headers(trace))
		require.NoError(t, err)
		require.Equal(t, map[string]string{"X-Shop": "42", "X-Try": "2", "Traceparent": "00-ab"}, res.Notification.Headers)
		require.Equal(t, map[string]string{"X-Shop": "42", "X-Try": "1"}, mine)
	})

	t.Run("Cancel", func(t *testing.T) {
		_, err := c.Enqueue(ctx, "jobs", nil, herald.ID("to-cancel"), herald.Delay(time.Hour))
		require.NoError(t, err)
		n, err := c.Cancel(ctx, "to-cancel")
		require.NoError(t, err)
		require.Equal(t, herald.StateCancelled, n.State)
		_, err = c.Get(ctx, "unknown")
		require.ErrorIs(t, err, herald.ErrNotFound)
	})
}

// TestEnqueueTimesAsTheAPI enqueues the same delays, send times, ttrs and
// backoff arrays through the Go client and through the HTTP API: the
// client refuses what the API refuses with a 400, with an error naming the
// same field and nothing stored, and takes what the API takes.
func TestEnqueueTimesAsTheAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	st, err := store.New(&store.Config{Client: rdb, Namespace: ns})
	require.NoError(t, err)
	srv, err := api.New(&api.Config{Store: st})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })

	const century = 100 * 365 * 24 * time.Hour
	lastInstant := time.Date(9999, time.December, 31, 23, 59, 59, int(999*time.Millisecond), time.UTC)
	for _, tt := range []struct {
		name  string
		opts  []herald.EnqueueOption
		field string // refused, naming it; "" when taken
	}{
		{name: "NoDelay", opts: []herald.EnqueueOption{herald.Delay(0)}},
		{name: "DelayOfACentury", opts: []herald.EnqueueOption{herald.Delay(century)}},
		{name: "NegativeDelay", opts: []herald.EnqueueOption{herald.Delay(-time.Second)}, field: "delay"},
		{name: "DelayPastACentury", opts: []herald.EnqueueOption{herald.Delay(century + time.Nanosecond)}, field: "delay"},
		{name: "LongestDelay", opts: []herald.EnqueueOption{herald.Delay(math.MaxInt64)}, field: "delay"},
		{name: "MostNegativeDelay", opts: []herald.EnqueueOption{herald.Delay(math.MinInt64)}, field: "delay"},
		{name: "TTROfACentury", opts: []herald.EnqueueOption{herald.TTR(century)}},
		{name: "NegativeTTR", opts: []herald.EnqueueOption{herald.TTR(-time.Second)}, field: "ttr"},
		{name: "TTRPastACentury", opts: []herald.EnqueueOption{herald.TTR(century + time.Nanosecond)}, field: "ttr"},
		{name: "BackoffOfCenturies", opts: []herald.EnqueueOption{herald.Backoff(century, century, century)}},
		{name: "NegativeBackoff", opts: []herald.EnqueueOption{herald.Backoff(0, -time.Second)}, field: "backoff[1]"},
		{name: "BackoffPastACentury", opts: []herald.EnqueueOption{herald.Backoff(0, math.MaxInt64)}, field: "backoff[1]"},
		{name: "SendAtLastInstant", opts: []herald.EnqueueOption{herald.SendAt(lastInstant)}},
		{name: "SendAtPast9999", opts: []herald.EnqueueOption{herald.SendAt(lastInstant.In(time.FixedZone("", -3600)).Add(time.Millisecond))}, field: "send_at"},
		{name: "SendAtBeforeEpoch", opts: []herald.EnqueueOption{herald.SendAt(time.Unix(-1, 0))}, field: "send_at"},
		{name: "FirstAttemptPast9999", opts: []herald.EnqueueOption{herald.SendAt(lastInstant), herald.Backoff(time.Millisecond)}, field: "backoff[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			goID, apiID := "go-"+tt.name, "api-"+tt.name

			_, err := c.Enqueue(ctx, "jobs", nil, append(tt.opts, herald.ID(goID), herald.Channel(herald.ChannelPull))...)
			if tt.field == "" {
				require.NoError(t, err)
			} else {
				var fe *herald.FieldError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, tt.field, fe.Field, "error: %v", err)
				_, err = c.Get(ctx, goID)
				require.ErrorIs(t, err, herald.ErrNotFound, "nothing stored")
			}

			req := &herald.Request{ID: apiID, Topic: "jobs", Channel: herald.ChannelPull}
			for _, o := range tt.opts {
				o(req)
			}
			body, err := json.Marshal(req)
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/notifications", bytes.NewReader(body)))
			var answer struct {
				Error api.Error `json:"error"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &answer))
			if tt.field == "" {
				require.Equal(t, http.StatusCreated, rec.Code, "API: %s", rec.Body)
			} else {
				require.Equal(t, http.StatusBadRequest, rec.Code, "API: %s", rec.Body)
				require.Equal(t, tt.field, answer.Error.Field)
			}
		})
	}
}

// TestNewPoliciesAsTheFile builds policies in Go with the durations a
// policies file may hold and some it refuses: NewPolicies refuses what
// LoadPolicies refuses, naming the same key, rather than taking a policy
// every enqueue of which then fails.
func TestNewPoliciesAsTheFile(t *testing.T) {
	t.Parallel()
	const century = 100 * 365 * 24 * time.Hour
	for _, tt := range []struct {
		name  string
		key   string // the policy's key, as the file spells it
		value time.Duration
		field string // refused, naming it; "" when taken
	}{
		{name: "BackoffOfACentury", key: "backoff", value: century},
		{name: "BackoffPastACentury", key: "backoff", value: century + time.Nanosecond, field: "policies.slow.backoff[1]"},
		{name: "LongestBackoff", key: "backoff", value: math.MaxInt64, field: "policies.slow.backoff[1]"},
		{name: "NegativeBackoff", key: "backoff", value: -time.Second, field: "policies.slow.backoff[1]"},
		{name: "TTRPastACentury", key: "ttr", value: century + time.Nanosecond, field: "policies.slow.ttr"},
		{name: "TimeoutPastACentury", key: "timeout", value: math.MaxInt64, field: "policies.slow.timeout"},
		{name: "MaxRetryAfterOfACentury", key: "max_retry_after", value: century},
		{name: "MaxRetryAfterPastACentury", key: "max_retry_after", value: century + time.Nanosecond, field: "policies.slow.max_retry_after"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := herald.RetryPolicy{Backoff: []notify.Duration{0, 0}}
			yaml := fmt.Sprintf("policies:\n  slow:\n    %s: %q\n", tt.key, notify.Duration(tt.value))
			switch tt.key {
			case "backoff":
				p.Backoff[1] = notify.Duration(tt.value)
				yaml = fmt.Sprintf("policies:\n  slow:\n    backoff: [0s, %q]\n", notify.Duration(tt.value))
			case "ttr":
				p.TTR = notify.Duration(tt.value)
			case "timeout":
				p.Timeout = notify.Duration(tt.value)
			case "max_retry_after":
				p.MaxRetryAfter = notify.Duration(tt.value)
			}
			if tt.key != "backoff" {
				yaml += "    backoff: [0s, 0s]\n"
			}
			path := filepath.Join(t.TempDir(), "policies.yaml")
			require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
			_, fileErr := herald.LoadPolicies(path)
			_, goErr := herald.NewPolicies(map[string]herald.RetryPolicy{"slow": p}, nil)
			for source, err := range map[string]error{"LoadPolicies": fileErr, "NewPolicies": goErr} {
				if tt.field == "" {
					require.NoError(t, err, source)
					continue
				}
				var fe *herald.FieldError
				require.ErrorAs(t, err, &fe, source)
				require.Equal(t, tt.field, fe.Field, "%s: %v", source, err)
			}
		})
	}
}

// TestWorkerKeepsEndpointLimits runs a library worker over notifications
// naming an endpoint of max_in_flight 1: however many attempts the worker
// may run, it sends them one at a time.
func TestWorkerKeepsEndpointLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
policies:
  default: {backoff: [0, 10ms, 10ms]}
endpoints:
  merchant:
    url: https://merchant.example/notify
    secrets: [{value: "whsec_c2VjcmV0LWZvci10aGUtbGlicmFyeS10ZXN0"}]
    max_in_flight: 1
`), 0o600))
	set, err := herald.LoadPolicies(file)
	require.NoError(t, err)
	rdb, ns, c := connect(t, set)

	const n = 12
	var inFlight, most, sent atomic.Int32
	send := notify.SenderFunc(func(_ context.Context, got *notify.Notification) (notify.Response, error) {
		if got.Endpoint != "merchant" {
			return notify.Response{}, herald.Permanent(fmt.Errorf("endpoint %q", got.Endpoint))
		}
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		sent.Add(1)
		return notify.Response{StatusCode: 200}, nil
	})
	w, err := herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: ns, Policies: set, Concurrency: 8,
		Senders: map[string]herald.Sender{herald.ChannelWebhook: send}})
	require.NoError(t, err)
	for i := range n {
		res, err := c.Enqueue(ctx, "payments", map[string]int{"n": i}, herald.Endpoint("merchant"))
		require.NoError(t, err)
		require.Equal(t, herald.ChannelWebhook, res.Notification.Channel, "an endpoint is a webhook's")
	}
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	// A wait for the sends, not a bound on their pace: those waiting for
	// the endpoint come back spaced by how long its attempts took, which
	// a loaded machine stretches (past 10s for the 12 in one run).
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, int32(n), sent.Load(), "notifications sent") },
		30*time.Second, 5*time.Millisecond)
	require.Equal(t, int32(1), most.Load(), "attempts to the endpoint at once")

	_, err = c.Enqueue(ctx, "payments", nil, herald.Endpoint("nobody"))
	var fe *herald.FieldError
	require.ErrorAs(t, err, &fe, "an endpoint that is not registered")
	require.Equal(t, "endpoint", fe.Field)
}

// TestEndpointIsAWebhook: a notification naming an endpoint is a webhook
// when no channel is named, though its topic's own target be a phone
// number, which the endpoint replaces.
func TestEndpointIsAWebhook(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
policies:
  default: {backoff: [0]}
topics:
  alerts: {target: "+14155550100"}
endpoints:
  merchant:
    url: https://merchant.example/notify
    secrets: [{value: "whsec_c2VjcmV0LWZvci10aGUtbGlicmFyeS10ZXN0"}]
`), 0o600))
	set, err := herald.LoadPolicies(file)
	require.NoError(t, err)
	_, _, c := connect(t, set)
	res, err := c.Enqueue(context.Background(), "alerts", map[string]string{"text": "hi"}, herald.Endpoint("merchant"), herald.Delay(time.Hour))
	require.NoError(t, err)
	require.Equal(t, herald.ChannelWebhook, res.Notification.Channel)
	sms, err := c.Enqueue(context.Background(), "alerts", map[string]string{"text": "hi"}, herald.Delay(time.Hour))
	require.NoError(t, err)
	require.Equal(t, herald.ChannelSMS, sms.Notification.Channel, "the topic's target alone")
}

// TestRetryAfter: a handler's RetryAfter moves the next attempt at least
// that far out when the policy honours it, no further than the policy's
// max_retry_after, and not at all when the policy does not honour it.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	backoff := []notify.Duration{0, notify.Duration(time.Millisecond)}
	set, err := herald.NewPolicies(map[string]herald.RetryPolicy{
		"honours": {Backoff: backoff, HonorRetryAfter: true},
		"capped":  {Backoff: backoff, HonorRetryAfter: true, MaxRetryAfter: notify.Duration(50 * time.Millisecond)},
		"ignores": {Backoff: backoff},
	}, nil)
	require.NoError(t, err)
	rdb, ns, c := connect(t, set)

	// Each job asks for its own wait; the handler notes when its first
	// attempt gave up and when its second started.
	waits := map[string]time.Duration{"honours": 300 * time.Millisecond, "capped": time.Hour, "ignores": time.Hour}
	var mu sync.Mutex
	failed, retried := map[string]time.Time{}, map[string]time.Time{}
	w, err := herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: ns, Policies: set})
	require.NoError(t, err)
	w.HandleFunc("retries", func(_ context.Context, job *herald.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if job.Attempt == 0 {
			failed[job.ID] = time.Now()
			return herald.RetryAfter(errors.New("busy"), waits[job.ID])
		}
		retried[job.ID] = time.Now()
		return nil
	})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	for name := range waits {
		_, err := c.Enqueue(ctx, "retries", nil, herald.ID(name), herald.Policy(name))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(retried) == len(waits)
	}, 10*time.Second, 5*time.Millisecond, "every job retried, none an hour later")
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, retried["honours"].Sub(failed["honours"]), 300*time.Millisecond, "honoured: not before the wait asked for")
	require.GreaterOrEqual(t, retried["capped"].Sub(failed["capped"]), 50*time.Millisecond, "capped: not before the cap")
}

// TestHandleTwicePanics: a second handler for a topic is a programming
// error, as an invalid topic is, not a silent replacement of the first.
func TestHandleTwicePanics(t *testing.T) {
	t.Parallel()
	rdb, _, _ := connect(t, nil)
	w, err := herald.NewWorker(rdb, nil)
	require.NoError(t, err)
	nop := func(context.Context, *herald.Job) error { return nil }
	w.HandleFunc("jobs", nop)
	require.PanicsWithValue(t, `herald: a handler is already registered for topic "jobs"`, func() { w.HandleFunc("jobs", nop) })
	w.HandleFunc("other", nop)
}

// TestWorkerStartRefusesAnotherShardCount: a Shards that contradicts the
// namespace's recorded count fails Start, as it fails the client's calls,
// rather than leaving a started worker that never takes a job.
func TestWorkerStartRefusesAnotherShardCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	_, err := c.Enqueue(ctx, "jobs", nil) // records the namespace's count
	require.NoError(t, err)
	w, err := herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: ns, Shards: herald.ShardsSingleDefault + 3})
	require.NoError(t, err)
	w.HandleFunc("jobs", func(context.Context, *herald.Job) error { return nil })
	err = w.Start(ctx)
	t.Cleanup(w.Stop)
	var fe *herald.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "shards", fe.Field)
}

// TestWaitReplicas: a client that asks for a replica's acknowledgement
// reports an enqueue and a cancel that reached the master alone as
// ErrNotReplicated, and answers as usual once a replica takes them.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t, redistest.Options{})
	c, err := herald.NewClient(master.Client(t), &herald.ClientConfig{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	_, err = c.Enqueue(ctx, "jobs", nil, herald.ID("alone"), herald.Delay(time.Hour))
	require.ErrorIs(t, err, herald.ErrNotReplicated)
	n, err := c.Get(ctx, "alone")
	require.NoError(t, err, "on the master all the same")
	require.Equal(t, herald.StateScheduled, n.State)
	_, err = c.Cancel(ctx, "alone")
	require.ErrorIs(t, err, herald.ErrNotReplicated)

	redistest.StartReplica(t, master)
	_, err = c.Enqueue(ctx, "jobs", nil, herald.ID("replicated"), herald.Delay(time.Hour))
	require.NoError(t, err)
	_, err = c.Cancel(ctx, "replicated")
	require.NoError(t, err)
}

// TestWorkerWaitsForReplicas: a worker asked to wait for a replica starts
// no job whose reservation only the master holds, since a failover would
// lose it and start a second attempt while the first runs; once a replica
// takes its reservations, it runs the job.
func TestWorkerWaitsForReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t, redistest.Options{})
	rdb := master.Client(t)
	c, err := herald.NewClient(rdb, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	w, err := herald.NewWorker(rdb, &herald.WorkerConfig{WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	ran := make(chan struct{}, 1)
	w.HandleFunc("jobs", func(context.Context, *herald.Job) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	_, err = c.Enqueue(ctx, "jobs", nil, herald.ID("needs-a-replica"))
	require.NoError(t, err)
	select {
	case <-ran:
		t.Fatal("the job ran on a reservation no replica held")
	case <-time.After(500 * time.Millisecond):
	}
	redistest.StartReplica(t, master)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run once a replica took the reservations")
	}
}

// TestNilOptionsAndRequests: an option left nil, as a conditional option
// is when its condition does not hold, is skipped; a nil request in a
// batch is that item's error, and the others are stored. Neither panics.
func TestNilOptionsAndRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := connect(t, nil)
	var maybe herald.EnqueueOption
	res, err := c.Enqueue(ctx, "jobs", map[string]int{"n": 1}, herald.ID("nil-option"), maybe, herald.Delay(time.Hour))
	require.NoError(t, err)
	require.Equal(t, "nil-option", res.ID)

	batch, err := c.EnqueueBatch(ctx, []*herald.Request{{ID: "before-nil", Topic: "jobs", Payload: []byte(`{}`)}, nil,
		{ID: "after-nil", Topic: "jobs", Payload: []byte(`{}`)}})
	require.NoError(t, err)
	require.Len(t, batch, 3)
	require.NoError(t, batch[0].Err)
	var fe *herald.FieldError
	require.ErrorAs(t, batch[1].Err, &fe)
	require.Equal(t, "notification", fe.Field)
	require.NoError(t, batch[2].Err)
	for _, id := range []string{"before-nil", "after-nil"} {
		_, err := c.Get(ctx, id)
		require.NoError(t, err, id)
	}
}

// TestConcurrentMoves: an appointment service moves one reminder from
// several goroutines at once (an appointment moved twice in quick
// succession, each move handled by its own worker). Each move is Replaced,
// as it is when made alone, and the reminder is due at one of the times
// asked for: moves that reached Redis together, in one write, are not
// refused as ErrConflict although they asked to replace.
func TestConcurrentMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := connect(t, nil)
	const phone = "+14155550100"
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	_, err := c.Enqueue(ctx, "reminders", "Your appointment is in 30 minutes.", herald.ID("appt-42"), herald.Target(phone), herald.SendAt(base))
	require.NoError(t, err)
	for round := range 10 {
		asked := map[time.Time]bool{}
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			at := base.Add(time.Duration(round*len(errs)+i+1) * time.Minute)
			asked[at.UTC()] = true
			wg.Go(func() {
				res, err := c.Enqueue(ctx, "reminders", "Your appointment is in 30 minutes.", herald.ID("appt-42"), herald.Target(phone), herald.SendAt(at), herald.Replace())
				if err == nil && res.Status != herald.Replaced {
					err = fmt.Errorf("status %d, want Replaced", res.Status)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "round %d", round)
		n, err := c.Get(ctx, "appt-42")
		require.NoError(t, err)
		require.True(t, asked[n.SendAt], "round %d: due at %s, not a time asked for", round, n.SendAt)
	}
}

// TestReminderLifecycle walks an appointment service's SMS reminder: sent
// 30 minutes before the appointment, moved when it moves (later, earlier,
// and a move repeated after a lost answer), cancelled when it is cancelled,
// and what a repeat of the last request does then (nothing, as Replace
// says), as against a move to a new time (scheduled anew).
func TestReminderLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := connect(t, nil)
	appt := time.Date(2030, time.March, 31, 9, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	remind := func(at time.Time, opts ...herald.EnqueueOption) *herald.EnqueueResult {
		t.Helper()
		res, err := c.Enqueue(ctx, "appointment-reminder", map[string]string{"text": "Ada, your appointment is in 30 minutes."}, append(opts,
			herald.ID("appt-42-reminder"), herald.Target("+14155550100"), herald.SendAt(at.Add(-30*time.Minute)))...)
		require.NoError(t, err)
		return res
	}
	due := func(n *herald.Notification) time.Time {
		t.Helper()
		require.NotNil(t, n.NextAttemptAt, "state %s", n.State)
		return *n.NextAttemptAt
	}

	res := remind(appt)
	require.Equal(t, herald.Created, res.Status)
	require.Equal(t, herald.ChannelSMS, res.Notification.Channel)
	require.Equal(t, time.Date(2030, time.March, 31, 6, 30, 0, 0, time.UTC), due(res.Notification))
	for _, moved := range []time.Time{appt.Add(2 * time.Hour), appt.Add(-time.Hour)} {
		res = remind(moved, herald.Replace())
		require.Equal(t, herald.Replaced, res.Status)
		require.Equal(t, moved.Add(-30*time.Minute).UTC(), due(res.Notification))
	}
	res = remind(appt.Add(-time.Hour), herald.Replace())
	require.Equal(t, herald.Existing, res.Status, "a move repeated")

	n, err := c.Cancel(ctx, "appt-42-reminder")
	require.NoError(t, err)
	require.Equal(t, herald.StateCancelled, n.State)
	require.Nil(t, n.NextAttemptAt)
	n, err = c.Cancel(ctx, "appt-42-reminder")
	require.NoError(t, err)
	require.Equal(t, herald.StateCancelled, n.State, "cancelled twice")

	res = remind(appt.Add(-time.Hour), herald.Replace())
	require.Equal(t, herald.Existing, res.Status)
	require.Equal(t, herald.StateCancelled, res.Notification.State, "the last request repeated changes nothing")
	res = remind(appt, herald.Replace())
	require.Equal(t, herald.Replaced, res.Status)
	require.Equal(t, herald.StateScheduled, res.Notification.State, "moved to a new time, it is scheduled anew")
	got, err := c.Get(ctx, "appt-42-reminder")
	require.NoError(t, err)
	require.Equal(t, due(res.Notification), due(got))
}
