package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

func TestEnqueue(t *testing.T) {
	t.Parallel()

	t.Run("CreatedThenIdempotent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")

		args := []string{"enqueue", "--topic", "jobs", "--id", "job-1", "--payload", `{"invoice":42}`,
			"--backoff", "0s,10s,1m", "--delay", "1h", "--header", "X-Trace=abc"}
		r := e.run(t, args...)
		require.NoError(t, r.err)
		require.Contains(t, r.out, "enqueued job-1")
		require.Regexp(t, `state\s+scheduled`, r.out)
		require.Regexp(t, `backoff\s+0s,10s,1m`, r.out)
		require.Regexp(t, `next_attempt\s+attempt 0 at \S+ \(in (59m59(\.\d)?s|1h0m0s)\)`, r.out)
		require.Contains(t, r.out, "no attempts yet")

		r = e.run(t, args...)
		require.NoError(t, r.err)
		require.Contains(t, r.out, "already enqueued, unchanged: job-1")
	})

	t.Run("JSONAndTopicDefaults", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		payload := filepath.Join(t.TempDir(), "order.json")
		require.NoError(t, os.WriteFile(payload, []byte(`{"out_trade_no":"1001","trade_status":"TRADE_SUCCESS","total_amount":"9.90"}`), 0o600))

		r := e.run(t, "enqueue", "--topic", "order-notify", "--target", "https://merchant.example/notify",
			"--payload", "@"+payload, "--send-at", "2030-01-02T03:04:05Z", "--json")
		require.NoError(t, r.err)
		var n notify.Notification
		require.NoError(t, json.Unmarshal([]byte(r.out), &n))
		require.Equal(t, "webhook", n.Channel, "the topic's channel")
		require.Equal(t, "alipay-notify", n.Policy, "the topic's policy")
		require.Equal(t, "order-notify.json", n.Template)
		require.Len(t, n.Backoff, 5)
		require.Equal(t, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), n.SendAt)
		require.Len(t, n.ID, 32, "a random id")
	})

	t.Run("OrderKey", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		for _, id := range []string{"trade-9.paid", "trade-9.refunded"} {
			require.NoError(t, e.run(t, "enqueue", "--topic", "jobs", "--id", id, "--order-key", "trade-9", "--delay", "1h").err)
		}
		r := e.run(t, "status", "trade-9.refunded")
		require.NoError(t, r.err)
		require.Regexp(t, `order_key\s+trade-9`, r.out)
		require.Regexp(t, `waiting_for\s+trade-9.paid`, r.out)

		r = e.run(t, "enqueue", "--topic", "jobs", "--order-key", "no spaces")
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "order_key")
	})

	t.Run("Endpoint", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		file := filepath.Join(t.TempDir(), "m42.json")
		require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://m42.example/notify"}`), 0o600))
		require.NoError(t, e.run(t, "endpoint", "put", "merchant-42", "--file", file).err)

		r := e.run(t, "enqueue", "--topic", "merchant-notify", "--endpoint", "merchant-42", "--json")
		require.NoError(t, r.err)
		var n notify.Notification
		require.NoError(t, json.Unmarshal([]byte(r.out), &n))
		require.Equal(t, "merchant-42", n.Endpoint)
		require.Empty(t, n.Target)

		r = e.run(t, "enqueue", "--topic", "merchant-notify", "--endpoint", "merchant-43")
		require.Equal(t, 2, r.code())
		requireField(t, r.err, "endpoint")
		r = e.run(t, "enqueue", "--topic", "merchant-notify", "--endpoint", "merchant-42", "--target", "https://m42.example/")
		require.Equal(t, 2, r.code())
		requireField(t, r.err, "endpoint")
	})

	// As POST /v1/notifications: a template templates_dir does not hold is
	// refused, naming the field, rather than failing at the first attempt.
	t.Run("Template", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		args := []string{"enqueue", "--topic", "merchant-notify", "--target", "https://merchant.example/notify", "--delay", "1h"}

		r := e.run(t, slices.Concat(args, []string{"--template", "nope.json"})...)
		require.Equal(t, 2, r.code())
		fe := requireField(t, r.err, "template")
		require.Equal(t, `"nope.json" is not a template this server has loaded (a file of its templates_dir)`, fe.Message)
		require.Empty(t, r.out)

		r = e.run(t, slices.Concat(args, []string{"--template", "payment-result.json", "--json"})...)
		require.NoError(t, r.err)
		var n notify.Notification
		require.NoError(t, json.Unmarshal([]byte(r.out), &n))
		require.Equal(t, "payment-result.json", n.Template)

		// A request that names no template needs no templates_dir, which
		// may not be where the operator runs herald.
		noTemplates := writeConfig(t, regexp.MustCompile(`(?m)^templates_dir: .*$`).ReplaceAllString(readFile(t, e.config),
			"templates_dir: "+filepath.Join(t.TempDir(), "none")))
		r = run(t, slices.Concat([]string{"--config", noTemplates}, args))
		require.NoError(t, r.err)
	})

	t.Run("ConflictAndReplace", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		require.NoError(t, e.run(t, "enqueue", "--topic", "jobs", "--id", "job-2", "--payload", `{"v":1}`, "--delay", "1h").err)

		r := e.run(t, "enqueue", "--topic", "jobs", "--id", "job-2", "--payload", `{"v":2}`, "--delay", "1h")
		require.Equal(t, 1, r.code())
		require.ErrorIs(t, r.err, notify.ErrConflict)
		require.EqualError(t, r.err, "enqueue job-2: a notification with this id and other content exists; add --replace to reschedule it with this content")

		r = e.run(t, "enqueue", "--topic", "jobs", "--id", "job-2", "--payload", `{"v":2}`, "--delay", "1h", "--replace")
		require.NoError(t, r.err)
		require.Contains(t, r.out, "replaced job-2")
	})

	t.Run("BadFlags", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"NoTopic", []string{"--payload", "{}"}, "--topic: is required"},
			{"Payload", []string{"--topic", "jobs", "--payload", "{nope"}, "--payload: is not valid JSON"},
			{"PayloadFile", []string{"--topic", "jobs", "--payload", "@/does/not/exist"}, "--payload: open /does/not/exist"},
			{"Backoff", []string{"--topic", "jobs", "--backoff", "0s,-1m"}, "--backoff: item 1"},
			{"Delay", []string{"--topic", "jobs", "--delay", "soon"}, "--delay"},
			{"SendAt", []string{"--topic", "jobs", "--send-at", "tomorrow"}, "--send-at"},
			{"Header", []string{"--topic", "jobs", "--header", "X-Trace"}, "--header"},
			// A header written as HTTP writes it carries its value, which
			// may be a token, into the error, the terminal and the shell's log.
			{"HeaderNotEchoed", []string{"--topic", "jobs", "--header", "Authorization: Bearer hdr-s3cr3t"}, `--header: "Authorization" is not NAME=VALUE`},
			{"Topic", []string{"--topic", "Jobs!"}, "topic: must match"},
			{"Policy", []string{"--topic", "jobs", "--policy", "nope"}, `unknown policy "nope"`},
			{"Target", []string{"--topic", "merchant-notify", "--target", "ftp://x"}, "target: must be an http or https URL"},
			// An empty value, as a script's unset variable gives, would
			// quietly take the policy's or the topic's.
			{"EmptyBackoff", []string{"--topic", "jobs", "--backoff", ""}, "--backoff: is empty"},
			{"EmptyDelay", []string{"--topic", "jobs", "--delay", ""}, "--delay: is empty"},
			{"EmptyTarget", []string{"--topic", "merchant-notify", "--target", ""}, "--target: is empty"},
		} {
			r := e.run(t, append([]string{"enqueue"}, tc.args...)...)
			require.Equal(t, 2, r.code(), "%s: %v", tc.name, r.err)
			require.ErrorContains(t, r.err, tc.want, tc.name)
			require.NotContains(t, r.err.Error(), "hdr-s3cr3t", tc.name)
		}
	})

	t.Run("EmbeddedRefused", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "redis: {addrs: []}")

		r := e.run(t, "enqueue", "--topic", "jobs")
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "herald enqueue needs that Redis's address")
	})

	t.Run("RedisDown", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, `redis: {addrs: ["127.0.0.1:1"]}`)

		r := e.run(t, "enqueue", "--topic", "jobs")
		require.Equal(t, 1, r.code())
		require.ErrorContains(t, r.err, "redis 127.0.0.1:1 (standalone)")
	})
}

func TestStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	require.NoError(t, e.run(t, "enqueue", "--topic", "jobs", "--id", "job-3", "--backoff", "0s,1h").err)
	ctx := context.Background()
	cl := e.client(t)
	got, err := cl.Reserve(ctx, "jobs", 1, time.Second)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, cl.Nack(ctx, "job-3", got[0].Receipt, errors.New("worker\tcrashed\nbadly")))

	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		r := e.run(t, "status", "job-3")
		require.NoError(t, r.err)
		require.Regexp(t, `attempts\s+1 made of 2`, r.out)
		// A parallel subtest waits for a free slot, seconds on a busy run.
		require.Regexp(t, `next_attempt\s+attempt 1 at \S+ \(in (5\dm\d+(\.\d)?s|1h0m0s)\)`, r.out)
		require.Regexp(t, `ATTEMPT\s+STARTED\s+DURATION\s+OUTCOME\s+STATUS\s+ERROR`, r.out)
		require.Regexp(t, regexp.MustCompile(`(?m)^0\s+\S+Z\s+\S+\s+retry\s+-\s+worker crashed badly$`), r.out)
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		r := e.run(t, "status", "job-3", "--json")
		require.NoError(t, r.err)
		var n notify.Notification
		require.NoError(t, json.Unmarshal([]byte(r.out), &n))
		require.Equal(t, notify.StateScheduled, n.State)
		require.Len(t, n.History, 1)
		require.Equal(t, notify.OutcomeRetry, n.History[0].Outcome)
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		r := e.run(t, "status", "nobody")
		require.Equal(t, 1, r.code())
		require.ErrorIs(t, r.err, notify.ErrNotFound)
		// A record that was there last week may have expired, or be in
		// another namespace: say so rather than let the operator conclude
		// it was never enqueued.
		require.EqualError(t, r.err, "status nobody: notification not found: never enqueued in namespace "+e.namespace+
			", or purged from the dead letters, or succeeded or cancelled more than 168h ago (retention)")
	})

	t.Run("UnknownWithDeadRetention", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fmt.Sprintf("redis: {addrs: [%q]}\ndead_retention: 720h", server.Addr))
		r := e.run(t, "status", "nobody")
		require.ErrorContains(t, r.err, "(retention), or dead more than 720h ago (dead_retention)")
	})

	t.Run("BadID", func(t *testing.T) {
		t.Parallel()
		r := e.run(t, "status", "no/such id")
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "is not a notification id")
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	require.NoError(t, e.run(t, "enqueue", "--topic", "appointment-reminder", "--id", "appt-42",
		"--target", "+14155550100", "--delay", "30m", "--payload", `"Your appointment is at 10:00"`).err)

	r := e.run(t, "cancel", "appt-42")
	require.NoError(t, r.err)
	require.Contains(t, r.out, "cancelled appt-42")
	require.Regexp(t, `state\s+cancelled`, r.out)
	require.Regexp(t, `next_attempt\s+-`, r.out)

	r = e.run(t, "cancel", "appt-42", "--json")
	require.NoError(t, r.err, "cancelling twice changes nothing")
	var n notify.Notification
	require.NoError(t, json.Unmarshal([]byte(r.out), &n))
	require.Equal(t, notify.StateCancelled, n.State)

	e.dead(t, "jobs", "dead-1")
	r = e.run(t, "cancel", "dead-1")
	require.Equal(t, 1, r.code())
	require.ErrorIs(t, r.err, notify.ErrFinished)

	r = e.run(t, "cancel", "nobody")
	require.Equal(t, 1, r.code())
	require.ErrorIs(t, r.err, notify.ErrNotFound)
}

func TestStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")

	r := e.run(t, "stats")
	require.NoError(t, r.err)
	require.Equal(t, "no notifications yet\n", r.out)

	for _, id := range []string{"s1", "s2"} {
		require.NoError(t, e.run(t, "enqueue", "--topic", "jobs", "--id", id, "--delay", "1h").err)
	}
	for _, id := range []string{"k1", "k2", "k3"} { // the last two wait behind the first
		require.NoError(t, e.run(t, "enqueue", "--topic", "jobs", "--id", id, "--delay", "1h", "--order-key", "k").err)
	}
	e.dead(t, "jobs", "s3")

	r = e.run(t, "stats")
	require.NoError(t, r.err)
	require.Regexp(t, `TOPIC\s+SCHEDULED\s+WAITING\s+RESERVED\s+DEAD\s+SUCCEEDED\s+FAILED ATTEMPTS`, r.out)
	require.Regexp(t, `(?m)^jobs\s+3\s+2\s+0\s+1\s+0\s+1\s*$`, r.out)
	require.Regexp(t, `(?m)^total\s+3\s+2\s+0\s+1\s+0\s+1\s*$`, r.out)

	r = e.run(t, "stats", "--json")
	require.NoError(t, r.err)
	var got api.Stats
	require.NoError(t, json.Unmarshal([]byte(r.out), &got))
	require.EqualValues(t, 3, got.Topics["jobs"].Scheduled)
	require.EqualValues(t, 1, got.Totals.Dead)

	r = e.run(t, "stats", "extra")
	require.Equal(t, 2, r.code())
}

// TestRecordsHideCredentials: status and dlq list, as tables, hide the
// notification's credentials where an attempt's error quotes them, as
// --json and the API do: a webhook's token in its target's query or its
// Authorization header, quoted by a Go handler's error or by an attempt
// recorded before such errors hid them.
func TestRecordsHideCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	const token, bearer = "s3cr3t-query-token", "s3cr3t-bearer-token"
	target := "https://merchant.example/notify?access_token=" + token
	require.NoError(t, e.run(t, "enqueue", "--topic", "merchant-notify", "--id", "cred", "--target", target,
		"--header", "Authorization=Bearer "+bearer).err)
	ctx := context.Background()
	st := e.store(t)
	var n *notify.Notification
	require.Eventually(t, func() bool {
		got, _, err := st.Reserve(ctx, store.QueuePush, []int{0, 1, 2, 3}, 1)
		require.NoError(t, err)
		if len(got) == 1 {
			n = got[0]
		}
		return n != nil
	}, 5*time.Second, 10*time.Millisecond)
	now := time.Now()
	failed := fmt.Errorf("Post %q (Authorization: Bearer %s): 401", target, bearer)
	_, err := st.Finish(ctx, []store.Finish{{Notification: n, Action: notify.ActionDead,
		Attempt: notify.NewAttempt(n, now, now, notify.Response{}, failed, notify.OutcomePermanent)}})
	require.NoError(t, err)

	for _, args := range [][]string{{"status", "cred"}, {"dlq", "list", "--topic", "merchant-notify"}} {
		r := e.run(t, args...)
		require.NoError(t, r.err)
		require.Contains(t, r.out, "cred")
		require.NotContains(t, r.out, token, "%v", args)
		require.NotContains(t, r.out, bearer, "%v", args)
	}
}

// TestWritesWhenRedisIsFull: an enqueue, a pause and an endpoint's
// registration that a full Redis refuses each say so plainly, as the API's
// 503 does: Redis is full and refused the change, nothing changed, and how
// to free memory; not the script's error, and the command named once.
func TestWritesWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	e := newEnv(t, fmt.Sprintf("redis: {addrs: [%q]}", srv.Addr))
	_, err := e.storeOn(t, srv.Client(t)).Shards(t.Context())
	require.NoError(t, err, "the namespace's shard count is recorded before Redis fills")
	file := filepath.Join(t.TempDir(), "m42.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://m42.example/notify"}`), 0o600))
	redistest.Fill(t, srv.Client(t))

	const full = "Redis is full (its memory reached maxmemory) and refused the change, so nothing was changed; " +
		"free memory (" + notify.FreeingMemory + "), then run the command again"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--topic", "jobs", "--payload", `{"invoice":42}`}, "enqueue: " + full},
		{[]string{"enqueue", "--topic", "jobs", "--id", "job-1"}, "enqueue job-1: " + full},
		{[]string{"pause", "topic", "jobs"}, "pause topic jobs: " + full},
		{[]string{"endpoint", "put", "m42", "--file", file}, "endpoint put m42: " + full},
	} {
		r := e.run(t, tc.args...)
		require.Equal(t, 1, r.code(), "%v: %v", tc.args, r.err)
		require.ErrorIs(t, r.err, notify.ErrOutOfMemory)
		require.EqualError(t, r.err, tc.want)
		require.Empty(t, r.out)
	}
	r := e.run(t, "pauses")
	require.NoError(t, r.err)
	require.Equal(t, "nothing is paused\n", r.out)
}

// TestEndpointPutWhenFullChangesNothing: endpoint put of an endpoint whose
// attempts have been failing, refused by a full Redis, says that nothing
// was changed; its failing streak, which decides when disable_after
// disables it, must then be as it was.
func TestEndpointPutWhenFullChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := redistest.Start(t, redistest.Options{})
	e := newEnv(t, "redis: {addrs: ["+`"`+srv.Addr+`"`+"]}")
	st := e.storeOn(t, srv.Client(t))
	_, err := st.PutEndpoint(ctx, "m42", &endpoint.Endpoint{URL: "https://m42.example/notify", DisableAfter: notify.Duration(72 * time.Hour)})
	require.NoError(t, err)
	_, err = st.EndpointFailed(ctx, "m42", 72*time.Hour)
	require.NoError(t, err)
	before, err := st.EndpointHealth(ctx, "m42")
	require.NoError(t, err)
	require.NotNil(t, before.FailingSince)
	file := filepath.Join(t.TempDir(), "m42.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://m42.example/notify"}`), 0o600))
	redistest.Fill(t, srv.Client(t))

	r := e.run(t, "endpoint", "put", "m42", "--file", file)
	require.ErrorIs(t, r.err, notify.ErrOutOfMemory)
	require.ErrorContains(t, r.err, "nothing was changed")
	after, err := st.EndpointHealth(ctx, "m42")
	require.NoError(t, err)
	require.Equal(t, before, after, "the failing streak after a put that changed nothing")
}
