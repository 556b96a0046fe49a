package poll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/httpsend/httpsendtest"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/templates"
)

const tradeField = "alipay_trade_query_response.trade_status"

var finalStatuses = []string{"TRADE_SUCCESS", "TRADE_FINISHED", "TRADE_CLOSED"}

// tradeAnswer is an Alipay-style query answer with the given trade status.
func tradeAnswer(status string) string {
	return fmt.Sprintf(`{"alipay_trade_query_response":{"code":"10000","msg":"Success","out_trade_no":"T-1","trade_status":%q,"total_amount":"88.88"},"sign":"c2ln"}`, status)
}

// provider is a fake payment provider whose trade turns TRADE_SUCCESS after
// pendingPolls polls.
func provider(pendingPolls int64) http.HandlerFunc {
	var polls atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) {
		status := "WAIT_BUYER_PAY"
		if polls.Add(1) > pendingPolls {
			status = "TRADE_SUCCESS"
		}
		httpsendtest.Answer(200, tradeAnswer(status), "Content-Type", "application/json")(w, r)
	}
}

type testBundle struct {
	provider *httpsendtest.Receiver
	onDone   *httpsendtest.Receiver
	sender   *Sender
}

// setup starts the provider (answering with h) and an on_done receiver, and
// a poll sender whose topic "trade-poll" polls with method and, when
// withOnDone, posts on_done.
func setup(t *testing.T, h http.HandlerFunc, method string, withOnDone bool) *testBundle {
	t.Helper()
	bundle := &testBundle{
		provider: httpsendtest.NewReceiver(t, "tcp4", h),
		onDone:   httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, "ok")),
	}
	cond := &policy.Poll{Method: method, Field: tradeField, Values: finalStatuses}
	if withOnDone {
		cond.OnDone = bundle.onDone.URL() + "/done"
	}
	set, err := policy.NewSet(map[string]policy.Policy{
		"default": {Backoff: []notify.Duration{0, 0, 0, 0}},
	}, map[string]policy.Topic{
		"trade-poll": {Channel: notify.ChannelPoll, Poll: cond},
		"no-cond":    {Channel: notify.ChannelPoll},
	})
	require.NoError(t, err)
	rules := set.Rules
	tmpl, err := templates.Load("../../templates")
	require.NoError(t, err)
	httpCfg := httpsend.Config{
		AllowNetworks: []string{"127.0.0.0/8"},
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	hook, err := webhook.New(&webhook.Config{Secret: "whsec_c2VjcmV0", Common: httpsend.Common{Rules: rules, HTTP: httpCfg}})
	require.NoError(t, err)
	bundle.sender, err = New(&Config{OnDone: hook, Common: httpsend.Common{Rules: rules, Templates: tmpl, HTTP: httpCfg}})
	require.NoError(t, err)
	return bundle
}

// traceparent is the W3C trace context a traced attempt carries.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func notification(target string) *notify.Notification {
	return &notify.Notification{
		ID:      "poll-T-1",
		Topic:   "trade-poll",
		Channel: notify.ChannelPoll,
		Target:  target,
		Headers: map[string]string{"Authorization": "Bearer provider-token", "traceparent": traceparent},
		Payload: json.RawMessage(`{"out_trade_no":"T-1","trade_status":"x","total_amount":"88.88"}`),
	}
}

func isPermanent(err error) bool {
	var perm *notify.PermanentError
	return errors.As(err, &perm)
}

func TestSendPollsUntilDone(t *testing.T) {
	t.Parallel()

	bundle := setup(t, provider(3), "", true)
	n := notification(bundle.provider.URL() + "/query")
	for attempt := range 3 {
		n.Attempts = attempt
		resp, err := bundle.sender.Send(context.Background(), n)
		require.ErrorIs(t, err, ErrNotDone)
		require.False(t, isPermanent(err))
		require.ErrorContains(t, err, `is "WAIT_BUYER_PAY"`)
		require.Equal(t, 200, resp.StatusCode)
		require.Empty(t, bundle.onDone.Requests())
	}
	n.Attempts = 3
	resp, err := bundle.sender.Send(context.Background(), n)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)

	polls := bundle.provider.Requests()
	require.Len(t, polls, 4)
	for _, r := range polls {
		require.Equal(t, http.MethodGet, r.Method)
		require.Equal(t, "/query", r.Path)
		require.Equal(t, "Bearer provider-token", r.Header.Get("Authorization"))
		require.Equal(t, "application/json", r.Header.Get("Accept"))
		require.Empty(t, r.Body)
	}

	done := bundle.onDone.Requests()
	require.Len(t, done, 1)
	require.Equal(t, http.MethodPost, done[0].Method)
	require.Equal(t, "/done", done[0].Path)
	require.Equal(t, "poll-T-1", done[0].Header.Get("Webhook-Id"))
	require.Equal(t, "3", done[0].Header.Get("Herald-Attempt"))
	require.NotEmpty(t, done[0].Header.Get("Webhook-Signature"))
	require.Empty(t, done[0].Header.Get("Authorization"), "the provider's headers stay with the provider")
	require.Equal(t, traceparent, done[0].Header.Get("Traceparent"), "the attempt's trace goes on")
	require.JSONEq(t, fmt.Sprintf(`{"id":"poll-T-1","topic":"trade-poll","target":%q,"field":%q,"value":"TRADE_SUCCESS","status_code":200,"response":%s}`,
		n.Target, tradeField, tradeAnswer("TRADE_SUCCESS")), string(done[0].Body))
}

func TestSendPost(t *testing.T) {
	t.Parallel()

	bundle := setup(t, provider(0), http.MethodPost, false)
	n := notification(bundle.provider.URL())
	n.Template = "order-notify.json"
	_, err := bundle.sender.Send(context.Background(), n)
	require.NoError(t, err)
	r := bundle.provider.Requests()[0]
	require.Equal(t, http.MethodPost, r.Method)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &body))
	require.Equal(t, "T-1", body["out_trade_no"])

	n.Payload = json.RawMessage(`{}`)
	_, err = bundle.sender.Send(context.Background(), n)
	require.True(t, isPermanent(err))
	require.ErrorContains(t, err, "render order-notify.json")
}

// TestSendPostOnAClosedKeptAliveConnection: a POST query cut off on a
// kept-alive connection the provider closed as it went out goes again at
// once on a new one, as a GET query does, instead of failing the poll's
// attempt: a query changes nothing at the provider.
func TestSendPostOnAClosedKeptAliveConnection(t *testing.T) {
	t.Parallel()

	bundle := setup(t, httpsendtest.HangUpOn(2, provider(0)), http.MethodPost, false)
	n := notification(bundle.provider.URL())
	for attempt := range 2 {
		n.Attempts = attempt
		_, err := bundle.sender.Send(context.Background(), n)
		require.NoError(t, err, "attempt %d", attempt)
	}
	require.Len(t, bundle.provider.Requests(), 3)
	require.EqualValues(t, 2, bundle.provider.Conns())
}

func TestSendOutcomes(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name      string
		handler   http.HandlerFunc
		topic     string
		permanent bool
		notDone   bool
		message   string
	}{
		{name: "Closed", handler: httpsendtest.Answer(200, tradeAnswer("TRADE_CLOSED"))},
		{name: "Unavailable", handler: httpsendtest.Answer(503, ""), message: "status 503"},
		{name: "NotFound", handler: httpsendtest.Answer(404, ""), permanent: true, message: "status 404"},
		{name: "NotJSON", handler: httpsendtest.Answer(200, "<html>maintenance</html>"), message: "not JSON"},
		{name: "FieldAbsent", handler: httpsendtest.Answer(200, `{"error_response":{"code":"40004","sub_code":"ACQ.TRADE_NOT_EXIST"}}`), notDone: true, message: "absent"},
		{name: "NoCondition", handler: httpsendtest.Answer(200, tradeAnswer("TRADE_SUCCESS")), topic: "no-cond", permanent: true, message: `topic "no-cond" has no poll condition`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, tt.handler, "", false)
			n := notification(bundle.provider.URL())
			if tt.topic != "" {
				n.Topic = tt.topic
			}
			_, err := bundle.sender.Send(context.Background(), n)
			if tt.message == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.message)
			require.Equal(t, tt.permanent, isPermanent(err), "error: %v", err)
			require.Equal(t, tt.notDone, errors.Is(err, ErrNotDone))
		})
	}
}

func TestSendOnDoneFails(t *testing.T) {
	t.Parallel()

	t.Run("Retried", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, provider(0), "", false)
		failing := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(503, ""))
		withOnDone := func(n *notify.Notification) notify.Rules {
			r := bundle.sender.Rules(n)
			r.Poll = &notify.PollRule{Field: tradeField, Values: finalStatuses, OnDone: failing.URL()}
			return r
		}
		sender, err := New(&Config{OnDone: bundle.sender.onDone, Common: httpsend.Common{
			Rules: withOnDone,
			HTTP:  httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))},
		}})
		require.NoError(t, err)

		_, err = sender.Send(context.Background(), notification(bundle.provider.URL()))
		require.ErrorContains(t, err, "done, but on_done")
		require.False(t, isPermanent(err))
		require.Len(t, failing.Requests(), 1)
	})

	t.Run("NoWebhookSender", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, provider(0), "", true)
		withCredentials := func(n *notify.Notification) notify.Rules {
			r := bundle.sender.Rules(n)
			r.Poll.OnDone = "https://hook-user:hook-s3cret@merchant.example/done"
			return r
		}
		sender, err := New(&Config{Common: httpsend.Common{
			Rules: withCredentials,
			HTTP:  httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))},
		}})
		require.NoError(t, err)
		_, err = sender.Send(context.Background(), notification(bundle.provider.URL()))
		require.True(t, isPermanent(err))
		require.ErrorContains(t, err, "no webhook sender")
		// The error goes to the history, which shows URLs without their
		// credentials.
		require.ErrorContains(t, err, "https://xxxxx@merchant.example/done")
		require.NotContains(t, err.Error(), "hook-s3cret")
		require.NotContains(t, err.Error(), "hook-user")
	})
}

func TestSendGuarded(t *testing.T) {
	t.Parallel()

	bundle := setup(t, provider(0), "", false)
	guarded, err := New(&Config{Common: httpsend.Common{Rules: bundle.sender.Rules, HTTP: httpsend.Config{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}}})
	require.NoError(t, err)
	_, err = guarded.Send(context.Background(), notification(bundle.provider.URL()))
	var blocked *httpsend.BlockedError
	require.ErrorAs(t, err, &blocked)
	require.True(t, isPermanent(err))
	require.Zero(t, bundle.provider.Conns())
}

func TestLookup(t *testing.T) {
	t.Parallel()

	doc, err := parseAnswer([]byte(`{"a":{"b":"x","n":10000,"f":1.50,"t":true,"z":null,"o":{"k":[1,2]},"list":[{"s":"first"},{"s":"second"}]}}`))
	require.NoError(t, err)
	for _, tt := range []struct {
		path  string
		want  string
		found bool
	}{
		{path: "a.b", want: "x", found: true},
		{path: "a.n", want: "10000", found: true},
		{path: "a.f", want: "1.50", found: true},
		{path: "a.t", want: "true", found: true},
		{path: "a.z", want: "null", found: true},
		{path: "a.o", want: `{"k":[1,2]}`, found: true},
		{path: "a.list.1.s", want: "second", found: true},
		{path: "a.list.2.s"},
		{path: "a.list.x"},
		{path: "a.b.c"},
		{path: "missing"},
	} {
		got, found := lookup(doc, tt.path)
		require.Equal(t, tt.found, found, tt.path)
		require.Equal(t, tt.want, got, tt.path)
	}
	for _, bad := range []string{"<html>", "", `{"a":1} junk`, `{"a":1}{}`, `{"a":1`} {
		_, err := parseAnswer([]byte(bad))
		require.Error(t, err, bad)
	}
}

// FuzzLookup checks that any answer and path give a value or an error,
// never a panic, and that a string field reads back as itself, whatever it
// holds.
func FuzzLookup(f *testing.F) {
	f.Add([]byte(tradeAnswer("TRADE_SUCCESS")), tradeField, "TRADE_SUCCESS")
	f.Add([]byte(`{"a":[{"b":1e400}]}`), "a.0.b", `"quoted"\`)
	f.Add([]byte(`[1,2,{"x":"y"}]`), "2.x", "\u00e9\x00")
	f.Add([]byte(`{"":{"":""}}`), ".", "")
	f.Fuzz(func(t *testing.T, body []byte, path, s string) {
		if doc, err := parseAnswer(body); err == nil {
			if value, found := lookup(doc, path); !found {
				require.Empty(t, value)
			}
		}
		if path == "" || strings.Contains(path, ".") {
			return
		}
		doc, err := json.Marshal(map[string]string{path: s})
		require.NoError(t, err)
		var want map[string]string
		require.NoError(t, json.Unmarshal(doc, &want))
		for key, v := range want { // one key, as JSON spelled it (invalid UTF-8 replaced)
			parsed, err := parseAnswer(doc)
			require.NoError(t, err)
			value, found := lookup(parsed, key)
			require.True(t, found)
			require.Equal(t, v, value)
		}
	})
}

// TestSendAnswerWithTrailingData polls a provider whose answer is a done
// JSON document followed by something else: the answer is not JSON, so the
// poll is retried and no on_done webhook goes out.
func TestSendAnswerWithTrailingData(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name string
		body string
	}{
		{name: "Junk", body: tradeAnswer("TRADE_SUCCESS") + " junk"},
		{name: "SecondDocument", body: tradeAnswer("TRADE_SUCCESS") + tradeAnswer("WAIT_BUYER_PAY")},
		{name: "SecondValue", body: tradeAnswer("TRADE_SUCCESS") + " 1"},
		{name: "Unterminated", body: `{"alipay_trade_query_response":{"trade_status":"TRADE_SUCCESS"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, httpsendtest.Answer(200, tt.body, "Content-Type", "application/json"), "", true)
			_, err := bundle.sender.Send(context.Background(), notification(bundle.provider.URL()))
			require.ErrorContains(t, err, "not JSON")
			require.False(t, isPermanent(err), "error: %v", err)
			require.Empty(t, bundle.onDone.Requests())
		})
	}

	t.Run("TrailingSpaceIsDone", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, httpsendtest.Answer(200, " \n"+tradeAnswer("TRADE_SUCCESS")+"\r\n\t ", "Content-Type", "application/json"), "", true)
		_, err := bundle.sender.Send(context.Background(), notification(bundle.provider.URL()))
		require.NoError(t, err)
		done := bundle.onDone.Requests()
		require.Len(t, done, 1)
		var body struct {
			Response json.RawMessage `json:"response"`
		}
		require.NoError(t, json.Unmarshal(done[0].Body, &body))
		require.JSONEq(t, tradeAnswer("TRADE_SUCCESS"), string(body.Response))
	})
}

// TestSendAnswerLongerThanReadLimit polls a provider whose done answer is
// valid JSON longer than the read limit, sent with its length and chunked:
// the history says the answer outgrew the limit, not that it is not JSON,
// and the poll is retried. An answer that fits the limit exactly is read
// whole.
func TestSendAnswerLongerThanReadLimit(t *testing.T) {
	t.Parallel()

	// padded is a done answer of exactly size bytes, its status in front.
	padded := func(size int) string {
		head := `{"alipay_trade_query_response":{"trade_status":"TRADE_SUCCESS"},"items":"`
		return head + strings.Repeat("x", size-len(head)-2) + `"}`
	}
	long := padded(httpsend.ReadLimit + 100)
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{name: "WithLength", handler: httpsendtest.Answer(200, long, "Content-Type", "application/json")},
		{name: "Chunked", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			for i := 0; i < len(long); i += 4 << 10 {
				_, _ = w.Write([]byte(long[i:min(i+4<<10, len(long))]))
				w.(http.Flusher).Flush()
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, tt.handler, "", true)
			_, err := bundle.sender.Send(context.Background(), notification(bundle.provider.URL()))
			require.ErrorContains(t, err, "longer than the read limit of 65536 bytes")
			require.NotContains(t, err.Error(), "not JSON")
			require.False(t, isPermanent(err), "error: %v", err)
			require.Empty(t, bundle.onDone.Requests())
		})
	}

	t.Run("AtTheLimitIsDone", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, httpsendtest.Answer(200, padded(httpsend.ReadLimit), "Content-Type", "application/json"), "", true)
		_, err := bundle.sender.Send(context.Background(), notification(bundle.provider.URL()))
		require.NoError(t, err)
		require.Len(t, bundle.onDone.Requests(), 1)
	})
}

// TestSendOnDoneTargetWithoutCredentials polls a provider whose query URL
// carries the provider's credentials as its user information: the provider
// gets them, and the on_done webhook, which goes elsewhere, names the
// target as answers show it, without them, as it leaves the poll's headers
// out.
func TestSendOnDoneTargetWithoutCredentials(t *testing.T) {
	t.Parallel()

	bundle := setup(t, provider(0), "", true)
	n := notification(strings.Replace(bundle.provider.URL(), "http://", "http://app-42:provider-s3cret@", 1) + "/query")
	delete(n.Headers, "Authorization")
	_, err := bundle.sender.Send(context.Background(), n)
	require.NoError(t, err)

	polls := bundle.provider.Requests()
	require.Len(t, polls, 1)
	user, pass, ok := (&http.Request{Header: polls[0].Header}).BasicAuth()
	require.True(t, ok, "the provider gets its credentials")
	require.Equal(t, "app-42", user)
	require.Equal(t, "provider-s3cret", pass)

	done := bundle.onDone.Requests()
	require.Len(t, done, 1)
	var body struct {
		Target string `json:"target"`
	}
	require.NoError(t, json.Unmarshal(done[0].Body, &body))
	require.Equal(t, notify.RedactedURL(n.Target), body.Target)
	require.NotContains(t, string(done[0].Body), "provider-s3cret")
}
