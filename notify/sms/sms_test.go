package sms

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/httpsend/httpsendtest"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/templates"
)

type testBundle struct {
	rec    *httpsendtest.Receiver
	sender *Sender
}

// setup starts a receiver answering with h and a sender of provider
// pointed at it.
func setup(t *testing.T, provider string, h http.HandlerFunc) *testBundle {
	t.Helper()
	rec := httpsendtest.NewReceiver(t, "tcp4", h)
	set, err := templates.Load("../../templates")
	require.NoError(t, err)
	policies, err := policy.NewSet(map[string]policy.Policy{
		"default": {Backoff: []notify.Duration{0, 0}, HonorRetryAfter: true},
		"no-429":  {Backoff: []notify.Duration{0, 0}, RetryOn: []string{"network", "timeout", "5xx"}},
		"acked":   {Backoff: []notify.Duration{0, 0}, SuccessBody: `{"status":"ok"}`},
	}, nil)
	require.NoError(t, err)
	cfg := &Config{
		Provider:   provider,
		URL:        rec.URL() + "/sms",
		AccountSID: "AC0123456789",
		AuthToken:  "token-1",
		From:       "+15005550006",
		Common: httpsend.Common{Rules: policies.Rules, Templates: set, HTTP: httpsend.Config{
			AllowNetworks: []string{"127.0.0.0/8"},
			Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		}},
	}
	if provider == ProviderTwilio {
		cfg.URL = rec.URL()
	}
	sender, err := New(cfg)
	require.NoError(t, err)
	return &testBundle{rec: rec, sender: sender}
}

func notification(payload string) *notify.Notification {
	return &notify.Notification{
		ID:      "appt-42-reminder",
		Topic:   "appointment-reminder",
		Channel: notify.ChannelSMS,
		Target:  "+351912345678",
		Payload: json.RawMessage(payload),
	}
}

func isPermanent(err error) bool {
	var perm *notify.PermanentError
	return errors.As(err, &perm)
}

func TestSendHTTP(t *testing.T) {
	t.Parallel()

	t.Run("Delivered", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, ProviderHTTP, httpsendtest.Answer(202, `{"id":"m1"}`))
		resp, err := bundle.sender.Send(context.Background(), notification(`"Your code is 1234"`))
		require.NoError(t, err)
		require.Equal(t, notify.Response{StatusCode: 202, Body: `{"id":"m1"}`}, resp)
		reqs := bundle.rec.Requests()
		require.Len(t, reqs, 1)
		require.Equal(t, "/sms", reqs[0].Path)
		require.Equal(t, "application/json", reqs[0].Header.Get("Content-Type"))
		require.Equal(t, "appt-42-reminder", reqs[0].Header.Get("Idempotency-Key"))
		require.JSONEq(t, `{"to":"+351912345678","from":"+15005550006","body":"Your code is 1234"}`, string(reqs[0].Body))
	})

	for _, tt := range []struct {
		name      string
		status    int
		permanent bool
	}{
		{name: "Unavailable", status: 503},
		{name: "TooMany", status: 429},
		{name: "BadRequest", status: 400, permanent: true},
		{name: "Unauthorized", status: 401, permanent: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, ProviderHTTP, httpsendtest.Answer(tt.status, "no"))
			resp, err := bundle.sender.Send(context.Background(), notification(`{"text":"hi"}`))
			require.Error(t, err)
			require.Equal(t, tt.permanent, isPermanent(err), "error: %v", err)
			require.Equal(t, tt.status, resp.StatusCode)
		})
	}
}

// twilioQueueFullBody is Twilio's answer when the From number's queue of
// messages is full.
const twilioQueueFullBody = `{"code":21611,"message":"This 'From' number has exceeded the maximum number of queued messages","status":400}`

func TestSendTwilio(t *testing.T) {
	t.Parallel()

	t.Run("Queued", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, ProviderTwilio, httpsendtest.Answer(201, `{"sid":"SM1","status":"queued"}`))
		resp, err := bundle.sender.Send(context.Background(), notification(`{"text":"See you at 15:30"}`))
		require.NoError(t, err)
		require.Equal(t, 201, resp.StatusCode)

		reqs := bundle.rec.Requests()
		require.Len(t, reqs, 1)
		r := reqs[0]
		require.Equal(t, "/2010-04-01/Accounts/AC0123456789/Messages.json", r.Path)
		require.Equal(t, "application/x-www-form-urlencoded", r.Header.Get("Content-Type"))
		hr := &http.Request{Header: r.Header}
		user, pass, ok := hr.BasicAuth()
		require.True(t, ok)
		require.Equal(t, "AC0123456789", user)
		require.Equal(t, "token-1", pass)
		form, err := url.ParseQuery(string(r.Body))
		require.NoError(t, err)
		require.Equal(t, url.Values{"To": {"+351912345678"}, "From": {"+15005550006"}, "Body": {"See you at 15:30"}}, form)
	})

	for _, tt := range []struct {
		name       string
		policy     string
		status     int
		body       string
		header     []string
		permanent  bool
		retryAfter time.Duration
		message    string
	}{
		{name: "InvalidNumber", status: 400, body: `{"code":21211,"message":"Invalid 'To' Phone Number","more_info":"https://www.twilio.com/docs/errors/21211","status":400}`, permanent: true, message: "twilio error 21211"},
		{name: "Unsubscribed", status: 400, body: `{"code":21610,"message":"Attempt to send to unsubscribed recipient","status":400}`, permanent: true, message: "twilio error 21610"},
		// The From number's queue is full: it drains at the number's
		// rate, so a later attempt gets through, as after a 429.
		{name: "QueueFull", status: 400, body: twilioQueueFullBody, message: "twilio error 21611"},
		{name: "QueueFullWhere429IsNotRetried", policy: "no-429", status: 400, body: twilioQueueFullBody, permanent: true, message: "twilio error 21611"},
		{name: "AuthFailed", status: 401, body: `{"code":20003,"message":"Authenticate","status":401}`, permanent: true, message: "status 401"},
		{name: "TooMany", status: 429, body: `{"code":20429,"message":"Too Many Requests","status":429}`, header: []string{"Retry-After", "3"}, retryAfter: 3 * time.Second, message: "status 429"},
		{name: "ServerError", status: 500, body: `{"code":20500,"message":"Internal Server Error","status":500}`, message: "status 500"},
		{name: "BadGatewayNotJSON", status: 502, body: `<html>bad gateway</html>`, message: "status 502"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, ProviderTwilio, httpsendtest.Answer(tt.status, tt.body, tt.header...))
			n := notification(`"hi"`)
			n.Policy = tt.policy
			resp, err := bundle.sender.Send(context.Background(), n)
			require.ErrorContains(t, err, tt.message)
			require.Equal(t, tt.permanent, isPermanent(err), "error: %v", err)
			require.Equal(t, tt.status, resp.StatusCode)
			var re *notify.RetryError
			if tt.retryAfter > 0 {
				require.ErrorAs(t, err, &re)
				require.Equal(t, tt.retryAfter, re.RetryAfter)
			}
		})
	}
}

func TestSendText(t *testing.T) {
	t.Parallel()

	bundle := setup(t, ProviderHTTP, httpsendtest.Answer(200, ""))

	t.Run("Template", func(t *testing.T) {
		t.Parallel()
		n := notification(`{"name":"Ana","with":"Dr. Silva","starts_at":"2026-05-04T15:30:00+02:00"}`)
		n.Template = "appointment-reminder.sms"
		n.ID = "templated"
		_, err := bundle.sender.Send(context.Background(), n)
		require.NoError(t, err)
		var sent struct{ Body string }
		for _, r := range bundle.rec.Requests() {
			if r.Header.Get("Idempotency-Key") == "templated" {
				require.NoError(t, json.Unmarshal(r.Body, &sent))
			}
		}
		require.Equal(t, "Hi Ana, a reminder of your appointment with Dr. Silva at 15:30 on Mon 4 May.", sent.Body)
	})

	for _, tt := range []struct {
		name     string
		target   string
		template string
		payload  string
		message  string
	}{
		{name: "NotE164", target: "912345678", payload: `"hi"`, message: "not an E.164 number"},
		{name: "NoPayload", payload: ``, message: "payload holds an empty message text"},
		{name: "EmptyText", payload: `{"text":"  "}`, message: "payload holds an empty message text"},
		{name: "NumberPayload", payload: `42`, message: `payload must be a JSON string or an object with a "text" string`},
		// A gateway's own field name is a caller's likely slip: the error
		// says which field Herald reads.
		{name: "ObjectWithoutText", payload: `{"body":"Your code is 1234"}`, message: `payload must be a JSON string or an object with a "text" string`},
		{name: "TemplateFails", template: "appointment-reminder.sms", payload: `{"name":"Ana"}`, message: "render appointment-reminder.sms"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := notification(tt.payload)
			n.ID = "bad-" + tt.name
			n.Template = tt.template
			if tt.target != "" {
				n.Target = tt.target
			}
			_, err := bundle.sender.Send(context.Background(), n)
			require.ErrorContains(t, err, tt.message)
			require.True(t, isPermanent(err))
			for _, r := range bundle.rec.Requests() {
				require.NotEqual(t, n.ID, r.Header.Get("Idempotency-Key"), "nothing is sent")
			}
		})
	}
}

func TestSendGuarded(t *testing.T) {
	t.Parallel()

	rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, ""))
	sender, err := New(&Config{URL: rec.URL(), Common: httpsend.Common{HTTP: httpsend.Config{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}}})
	require.NoError(t, err)
	_, err = sender.Send(context.Background(), notification(`"hi"`))
	var blocked *httpsend.BlockedError
	require.ErrorAs(t, err, &blocked)
	require.True(t, isPermanent(err))
	require.Zero(t, rec.Conns())
}

func TestNew(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{name: "HTTPWithoutURL", cfg: Config{}, field: "url"},
		{name: "HTTPBadURL", cfg: Config{URL: "gateway:8080"}, field: "url"},
		// The gateway's credentials stay out of an error a log or a
		// terminal shows.
		{name: "HTTPBadURLWithCredentials", cfg: Config{URL: "ftp://gw:s3cr3t-pass@gw.example/send?key=s3cr3t-key"}, field: "url"},
		{name: "HTTPBadPortWithCredentials", cfg: Config{URL: "https://gw.example:99999/send?api_key=s3cr3t-key"}, field: "url"},
		{name: "UnknownProvider", cfg: Config{Provider: "carrier-pigeon"}, field: "provider"},
		{name: "TwilioWithoutSID", cfg: Config{Provider: ProviderTwilio, AuthToken: "t", From: "+15005550006"}, field: "account_sid"},
		{name: "TwilioWithoutToken", cfg: Config{Provider: ProviderTwilio, AccountSID: "AC1", From: "+15005550006"}, field: "auth_token"},
		{name: "TwilioWithoutFrom", cfg: Config{Provider: ProviderTwilio, AccountSID: "AC1", AuthToken: "t"}, field: "from"},
	} {
		_, err := New(&tt.cfg)
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe, tt.name)
		require.Equal(t, tt.field, fe.Field, tt.name)
		require.NotContains(t, err.Error(), "s3cr3t", tt.name)
	}

	s, err := New(&Config{Provider: ProviderTwilio, AccountSID: "AC1", AuthToken: "t", From: "+15005550006"})
	require.NoError(t, err)
	require.Equal(t, TwilioURLDefault, s.url)
}

// sentOnce returns the texts of reqs that a gateway dropping repeated
// Idempotency-Keys sends, as the package doc invites gateways to do: the
// first of each key.
func sentOnce(reqs []httpsendtest.Request) []string {
	seen := map[string]bool{}
	var sent []string
	for _, r := range reqs {
		if key := r.Header.Get("Idempotency-Key"); !seen[key] {
			seen[key] = true
			var msg struct{ Body string }
			_ = json.Unmarshal(r.Body, &msg)
			sent = append(sent, msg.Body)
		}
	}
	return sent
}

// TestSendHTTPReplacedReminder moves an appointment whose reminder already
// went out: the appointment service enqueues the reminder again under the
// same id with replace, and the store records it with a new created_at. The
// moved reminder is a new message, so a gateway that drops repeated
// attempts must not drop it; a repeated attempt of one message still
// carries the same key.
func TestSendHTTPReplacedReminder(t *testing.T) {
	t.Parallel()

	bundle := setup(t, ProviderHTTP, httpsendtest.Answer(202, ""))
	first := notification(`"Your appointment is at 15:30"`)
	first.CreatedAt = time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)
	for attempt := range 2 {
		first.Attempts = attempt
		_, err := bundle.sender.Send(context.Background(), first)
		require.NoError(t, err)
	}
	moved := notification(`"Your appointment is at 17:00"`)
	moved.CreatedAt = time.Date(2026, 5, 4, 15, 10, 0, 0, time.UTC)
	_, err := bundle.sender.Send(context.Background(), moved)
	require.NoError(t, err)

	reqs := bundle.rec.Requests()
	require.Equal(t, []string{"Your appointment is at 15:30", "Your appointment is at 17:00"}, sentOnce(reqs))
	require.Len(t, reqs, 3)
	require.Equal(t, reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key"), "attempts of one message")
	require.Equal(t, "appt-42-reminder.1777907400000", reqs[2].Header.Get("Idempotency-Key"), "the id and the enqueue time")
}

// TestSendHTTPGatewayKeyNotInHistory sends through a gateway whose URL
// carries its API key, the http provider's only place for one, and gets no
// answer: the error, which the history keeps and the API and dashboard
// show, names the gateway without the key, and the attempt is retried.
// TestSendTwilioErrorHidesTheToken: Twilio's error message goes to the
// history, so an answer that quotes the request's credentials, as a
// gateway in debug mode does, must not put the account's token there.
func TestSendTwilioErrorHidesTheToken(t *testing.T) {
	t.Parallel()
	body := `{"code":21211,"message":"account AC0123456789 with token token-1 refused","status":400}`
	bundle := setup(t, ProviderTwilio, httpsendtest.Answer(400, body))
	resp, err := bundle.sender.Send(context.Background(), notification(`"hi"`))
	require.True(t, isPermanent(err), "error: %v", err)
	require.ErrorContains(t, err, "twilio error 21211: account [redacted] with token [redacted] refused")
	require.NotContains(t, resp.Body, "token-1")
}

func TestSendHTTPGatewayKeyNotInHistory(t *testing.T) {
	t.Parallel()

	hung := httpsendtest.NewReceiver(t, "tcp4", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	for _, tt := range []struct {
		name    string
		gateway string
		message string
		// wait ends the attempt: the hung gateway's answer, and a bound
		// on the refused one's, where a loaded machine's stall past a
		// short wait would end the attempt before the refusal.
		wait time.Duration
	}{
		{name: "Timeout", gateway: hung.URL(), message: "deadline exceeded", wait: 200 * time.Millisecond},
		{name: "Refused", gateway: closedURL, message: "refused", wait: 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sender, err := New(&Config{URL: tt.gateway + "/send?api_key=gw-s3cret&sender=clinic", Common: httpsend.Common{HTTP: httpsend.Config{
				AllowNetworks: []string{"127.0.0.0/8"},
				Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
			}}})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), tt.wait)
			defer cancel()
			_, err = sender.Send(ctx, notification(`"hi"`))
			require.ErrorContains(t, err, tt.message)
			require.ErrorContains(t, err, tt.gateway+"/send?xxxxx", "the gateway is named")
			require.NotContains(t, err.Error(), "gw-s3cret")
			require.False(t, isPermanent(err), "error: %v", err)
		})
	}
}

// TestSendSuccessBody: a policy's success_body holds for an SMS gateway
// as for a webhook's receiver: a gateway that answers 200 with an error in
// its body has not sent the message, and the attempt is retried rather
// than recorded as sent.
func TestSendSuccessBody(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name, provider, answer string
		sent                   bool
	}{
		{name: "HTTPRefused", provider: ProviderHTTP, answer: `{"status":"error","reason":"no credit"}`},
		{name: "HTTPAcknowledged", provider: ProviderHTTP, answer: `{"status":"ok","id":"m1"}`, sent: true},
		{name: "TwilioRefused", provider: ProviderTwilio, answer: `{"status":"failed"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, tt.provider, httpsendtest.Answer(200, tt.answer))
			n := notification(`"Your code is 1234"`)
			n.Policy = "acked"
			resp, err := bundle.sender.Send(context.Background(), n)
			require.Equal(t, 200, resp.StatusCode)
			if tt.sent {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "success_body")
			require.False(t, isPermanent(err), "a gateway that did not acknowledge is asked again: %v", err)
		})
	}
}
