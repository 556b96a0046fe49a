package policy_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

func mustTime(t *testing.T, s string) *time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return &v
}

func durations(ds ...time.Duration) []notify.Duration {
	out := make([]notify.Duration, len(ds))
	for i, d := range ds {
		out[i] = notify.Duration(d)
	}
	return out
}

// TestResolveSendAtLimits checks the far ends of a send time: what Resolve
// accepts is a record the API can write, and what it refuses names the
// field.
func TestResolveSendAtLimits(t *testing.T) {
	t.Parallel()
	set, err := policy.NewSet(nil, nil)
	require.NoError(t, err)
	now := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)

	tests := []struct {
		name      string
		sendAt    string
		backoff   []notify.Duration
		wantField string
	}{
		{name: "Epoch", sendAt: "1970-01-01T00:00:00Z"},
		{name: "BeforeEpoch", sendAt: "1969-12-31T23:59:59.999Z", wantField: "send_at"},
		{name: "LastWritableMillisecond", sendAt: "9999-12-31T23:59:59.999Z", backoff: durations(0)},
		// Rounded up to the millisecond, it is in the year 10000.
		{name: "RoundsUpIntoYear10000", sendAt: "9999-12-31T23:59:59.9991Z", backoff: durations(0), wantField: "send_at"},
		// Written in the year 9999 of its offset, it is the year 10000 in UTC.
		{name: "OffsetIntoYear10000", sendAt: "9999-12-31T23:59:59-23:59", backoff: durations(0), wantField: "send_at"},
		{name: "FirstAttemptInYear10000", sendAt: "9999-12-31T23:00:00Z", backoff: durations(2 * time.Hour), wantField: "backoff[0]"},
		{name: "LastWritableMillisecondDefaultPolicy", sendAt: "9999-12-31T23:59:59.999Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := &notify.Request{Topic: "jobs", Channel: notify.ChannelPull, SendAt: mustTime(t, tt.sendAt), Backoff: tt.backoff}
			n, err := set.Resolve(req, now, 0)
			if tt.wantField != "" {
				var fe *notify.FieldError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, tt.wantField, fe.Field)
				return
			}
			require.NoError(t, err)
			_, err = json.Marshal(n)
			require.NoError(t, err, "the record of an accepted notification must be writable")
		})
	}
}

// TestResolveDueAtOnce: a notification due at once (no send_at, no delay
// or a zero one, and no first wait) gets the enqueue's now rounded down to
// the millisecond, so that the store, which rounds due times up, has it
// due when the enqueue answers; an instant the producer or the policy
// asked for is kept to the nanosecond, for the store to round up, never
// early.
func TestResolveDueAtOnce(t *testing.T) {
	t.Parallel()
	set, err := policy.NewSet(nil, nil)
	require.NoError(t, err)
	now := time.Date(2026, 11, 27, 5, 0, 0, 400123, time.UTC)
	delay := func(d time.Duration) *notify.Duration { v := notify.Duration(d); return &v }

	tests := []struct {
		name    string
		sendAt  *time.Time
		delay   *notify.Duration
		backoff []notify.Duration
		want    time.Time
	}{
		{name: "Now", backoff: durations(0), want: now.Truncate(time.Millisecond)},
		{name: "NowDefaultPolicy", want: now.Truncate(time.Millisecond)},
		{name: "ZeroDelay", delay: delay(0), backoff: durations(0), want: now.Truncate(time.Millisecond)},
		{name: "NowFirstWait", backoff: durations(30 * time.Second), want: now},
		{name: "Delay", delay: delay(1500 * time.Microsecond), backoff: durations(0), want: now.Add(1500 * time.Microsecond)},
		{name: "SendAt", sendAt: mustTime(t, "2026-11-27T05:00:00.0004Z"), backoff: durations(0), want: *mustTime(t, "2026-11-27T05:00:00.0004Z")},
		{name: "ZeroDelayFirstWait", delay: delay(0), backoff: durations(30 * time.Second), want: now},
		{name: "SendAtNow", sendAt: &now, backoff: durations(0), want: now},
		{name: "SendAtPast", sendAt: mustTime(t, "2026-11-27T04:00:00.0004567Z"), want: *mustTime(t, "2026-11-27T04:00:00.0004567Z")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := set.Resolve(&notify.Request{Topic: "jobs", Channel: notify.ChannelPull, SendAt: tt.sendAt, Delay: tt.delay, Backoff: tt.backoff}, now, 0)
			require.NoError(t, err)
			require.Equal(t, tt.want, n.SendAt)
		})
	}
}

// TestEnqueueSendAtInYear10000 enqueues, through the Go client, a
// notification whose send time is the year 9999 in its own offset but the
// year 10000 in UTC: it must be refused naming send_at, not stored as a
// record that every later read of fails to write.
func TestEnqueueSendAtInYear10000(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()

	_, err := c.Enqueue(ctx, "jobs", map[string]string{"k": "v"}, herald.ID("far"), herald.Channel(notify.ChannelPull),
		herald.SendAt(*mustTime(t, "9999-12-31T23:59:59-23:59")))
	var fe *notify.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "send_at", fe.Field)
	_, err = c.Get(ctx, "far")
	require.ErrorIs(t, err, notify.ErrNotFound)
}

// TestEnqueueAnswersWhatIsStored: durations finer than the millisecond
// the store keeps are answered as stored, rounded up, so that the answer
// to an enqueue and every later read show the same ttr and backoff.
func TestEnqueueAnswersWhatIsStored(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, "jobs", map[string]string{"k": "v"}, herald.ID("fine"), herald.Channel(notify.ChannelPull),
		herald.Delay(time.Hour), herald.TTR(1500*time.Microsecond), herald.Backoff(0, 2500*time.Microsecond, time.Second+time.Nanosecond))
	require.NoError(t, err)
	require.Equal(t, notify.Duration(2*time.Millisecond), res.Notification.TTR)
	require.Equal(t, durations(0, 3*time.Millisecond, time.Second+time.Millisecond), res.Notification.Backoff)
	got, err := c.Get(ctx, "fine")
	require.NoError(t, err)
	require.Equal(t, res.Notification.TTR, got.TTR)
	require.Equal(t, res.Notification.Backoff, got.Backoff)
}

// newClient returns a Go client of a Redis of the test's own.
func newClient(t *testing.T) *herald.Client {
	t.Helper()
	c, err := herald.NewClient(redistest.Start(t, redistest.Options{}).Client(t), &herald.ClientConfig{Namespace: redistest.Namespace(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestEnqueueRetriedAcrossPolicyEdit enqueues a notification, edits the
// policy and the topic it took its defaults from, and enqueues the very
// same request again, as a producer does whose first answer was lost: it is
// the same notification (Existing, its schedule as first resolved), not a
// conflict.
func TestEnqueueRetriedAcrossPolicyEdit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ns := redistest.Namespace(t)
	ctx := context.Background()

	clientWith := func(backoff []notify.Duration, ttr time.Duration, target string) *herald.Client {
		t.Helper()
		set, err := policy.NewSet(map[string]policy.Policy{"p": {Backoff: backoff, TTR: notify.Duration(ttr)}},
			map[string]policy.Topic{"orders": {Channel: notify.ChannelWebhook, Policy: "p", Target: target}})
		require.NoError(t, err)
		c, err := herald.NewClient(rdb, &herald.ClientConfig{Namespace: ns, Policies: set})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	enqueue := func(c *herald.Client) (*herald.EnqueueResult, error) {
		return c.Enqueue(ctx, "orders", map[string]string{"order": "o-1"}, herald.ID("o-1"), herald.Delay(time.Hour))
	}

	first, err := enqueue(clientWith(durations(0, time.Minute), 30*time.Second, "https://a.example/notify"))
	require.NoError(t, err)
	require.Equal(t, herald.Created, first.Status)

	again, err := enqueue(clientWith(durations(0, 2*time.Minute, 5*time.Minute), time.Minute, "https://b.example/notify"))
	require.NoError(t, err)
	require.Equal(t, herald.Existing, again.Status)
	require.Equal(t, durations(0, time.Minute), again.Notification.Backoff)
	require.Equal(t, "https://a.example/notify", again.Notification.Target)
}

// TestEnqueueRetriedAcrossTheDigestChange: a record stored by a version
// that took its digest of the resolved content is still the same
// notification to a retry of its request (200, not 409); other content
// under its id is still a conflict.
func TestEnqueueRetriedAcrossTheDigestChange(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.New(&store.Config{Client: srv.Client(t), Namespace: redistest.Namespace(t)})
	require.NoError(t, err)
	set, err := policy.NewSet(nil, map[string]policy.Topic{"orders": {Channel: notify.ChannelWebhook, Target: "https://a.example/notify"}})
	require.NoError(t, err)
	ctx := context.Background()
	hour := notify.Duration(time.Hour)
	resolve := func(payload string) *notify.Notification {
		t.Helper()
		n, err := set.Resolve(&notify.Request{ID: "o-1", Topic: "orders", Delay: &hour, Payload: json.RawMessage(payload)}, time.Now(), 0)
		require.NoError(t, err)
		return n
	}

	old := resolve(`{"order":"o-1"}`)
	require.NotEqual(t, old.Digest, old.LegacyDigest(), "the request relies on its topic's defaults")
	old.Digest = old.LegacyDigest() // as the earlier version stored it
	_, status, err := st.Enqueue(ctx, old, false)
	require.NoError(t, err)
	require.Equal(t, store.Created, status)

	got, status, err := st.Enqueue(ctx, resolve(`{"order":"o-1"}`), false)
	require.NoError(t, err)
	require.Equal(t, store.Existing, status)
	require.Equal(t, "o-1", got.ID)

	_, _, err = st.Enqueue(ctx, resolve(`{"order":"o-2"}`), false)
	require.ErrorIs(t, err, notify.ErrConflict)
}

// TestResolvePollNeedsCondition enqueues to the poll channel on topics
// without a done condition: every attempt of such a notification would
// fail for good, so the enqueue is refused naming the field.
func TestResolvePollNeedsCondition(t *testing.T) {
	t.Parallel()
	set, err := policy.NewSet(nil, map[string]policy.Topic{
		"trade-poll": {Channel: notify.ChannelPoll, Poll: &policy.Poll{Field: "trade_status", Values: []string{"TRADE_SUCCESS"}}},
		"no-cond":    {Channel: notify.ChannelPoll},
	})
	require.NoError(t, err)
	now := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	const target = "https://provider.example/query"

	_, err = set.Resolve(&notify.Request{Topic: "trade-poll", Target: target}, now, 0)
	require.NoError(t, err)

	for _, req := range []*notify.Request{
		{Topic: "no-cond", Target: target},
		{Topic: "other", Channel: notify.ChannelPoll, Target: target},
	} {
		_, err = set.Resolve(req, now, 0)
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe, "topic %s", req.Topic)
		require.Equal(t, "channel", fe.Field)
		require.Contains(t, fe.Message, "topics."+req.Topic+".poll")
	}
}

// TestResolveSMSPayload: an SMS without a template whose payload holds no
// text is refused at enqueue, naming the payload, instead of being
// accepted and dying at its first attempt, half an hour before an
// appointment.
func TestResolveSMSPayload(t *testing.T) {
	t.Parallel()
	set, err := policy.NewSet(nil, nil)
	require.NoError(t, err)
	now := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	sms := func(payload, template string) *notify.Request {
		return &notify.Request{Topic: "reminders", Channel: notify.ChannelSMS, Target: "+351912345678",
			Payload: json.RawMessage(payload), Template: template}
	}
	for _, ok := range []*notify.Request{
		sms(`"Your appointment is at 10:30"`, ""),
		sms(`{"text":"Your appointment is at 10:30","clinic":"Lisbon"}`, ""),
		sms(`{"time":"10:30"}`, "appointment-reminder.sms"),
	} {
		_, err := set.Resolve(ok, now, 0)
		require.NoError(t, err, "payload %s", ok.Payload)
	}
	for _, bad := range []string{`{"body":"Your appointment is at 10:30"}`, `{"text":42}`, `"   "`, `17`, ``} {
		_, err := set.Resolve(sms(bad, ""), now, 0)
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe, "payload %s", bad)
		require.Equal(t, "payload", fe.Field, "payload %s", bad)
	}
}
