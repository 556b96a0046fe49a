package webhook

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/httpsend/httpsendtest"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/templates"
)

// testSecret is a Standard Webhooks secret; its key is the bytes
// "herald-test-key-0123456789abcdef".
const testSecret = "whsec_aGVyYWxkLXRlc3Qta2V5LTAxMjM0NTY3ODlhYmNkZWY="

// testPolicies are the policies the tests name.
func testPolicies(tb testing.TB) func() *policy.Set {
	tb.Helper()
	backoff := []notify.Duration{0, 0, notify.Duration(time.Minute)}
	set, err := policy.NewSet(map[string]policy.Policy{
		"default":   {Backoff: backoff, Timeout: notify.Duration(5 * time.Second), HonorRetryAfter: true},
		"slow":      {Backoff: backoff, Timeout: notify.Duration(100 * time.Millisecond)},
		"alipay":    {Backoff: backoff, SuccessBody: "success"},
		"wechat":    {Backoff: backoff, SuccessBody: `{"code":"SUCCESS"}`},
		"nested":    {Backoff: backoff, SuccessBody: `{"result":{"code":"SUCCESS"}}`},
		"redirects": {Backoff: backoff, RetryOn: []string{"3xx"}},
	}, nil)
	require.NoError(tb, err)
	return func() *policy.Set { return set }
}

// loopback lets the sender reach the tests' receivers.
var loopback = httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}}

// fakeResolver resolves nothing outside the test: "internal.test" is a
// private address, every other name is unknown.
var fakeResolver = httpsend.ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "internal.test" {
		return []netip.Addr{netip.MustParseAddr("10.9.8.7")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
})

func newSender(tb testing.TB, cfg Config) *Sender {
	tb.Helper()
	cfg.Secret = cmp.Or(cfg.Secret, testSecret)
	if cfg.Rules == nil {
		cfg.Rules = policy.CurrentRules(testPolicies(tb))
	}
	if cfg.HTTP.Resolver == nil {
		cfg.HTTP.Resolver = fakeResolver
	}
	cfg.HTTP.Logger = slog.New(slog.NewTextHandler(tb.Output(), nil))
	s, err := New(&cfg)
	require.NoError(tb, err)
	return s
}

func notification(target string) *notify.Notification {
	return &notify.Notification{
		ID:      "evt_2KWPBgLlAfxdpx2AI54pPJ85f4W",
		Topic:   "order-notify",
		Channel: notify.ChannelWebhook,
		Target:  target,
		Payload: json.RawMessage(`{"out_trade_no":"T-1","trade_status":"TRADE_SUCCESS","total_amount":"88.88"}`),
		Headers: map[string]string{"X-Merchant": "m-42"},
	}
}

type outcome int

const (
	success outcome = iota
	retry
	permanent
)

func classify(err error) outcome {
	var perm *notify.PermanentError
	switch {
	case err == nil:
		return success
	case errors.As(err, &perm):
		return permanent
	default:
		return retry
	}
}

func retryAfter(err error) time.Duration {
	var re *notify.RetryError
	if errors.As(err, &re) {
		return re.RetryAfter
	}
	return 0
}

func TestSendClassification(t *testing.T) {
	t.Parallel()

	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})

	// A port nothing listens on, from below the ephemeral range so that no
	// outgoing connection of a parallel test takes it meanwhile.
	refusedPort := func(t *testing.T) string {
		addr, err := redistest.FreeAddr()
		require.NoError(t, err)
		return addr
	}

	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
		policy  string
		// target, when set, replaces the receiver's URL.
		target        func(t *testing.T) string
		want          outcome
		status        int
		minRetryAfter time.Duration
		maxRetryAfter time.Duration
	}{
		{name: "OK", handler: httpsendtest.Answer(200, "ok"), want: success, status: 200},
		{name: "NoContent", handler: httpsendtest.Answer(204, ""), want: success, status: 204},
		{name: "MovedPermanently", handler: httpsendtest.Answer(301, "", "Location", "/elsewhere"), want: permanent, status: 301},
		{name: "RedirectRetriedWhenNamed", policy: "redirects", handler: httpsendtest.Answer(302, "", "Location", "/elsewhere"), want: retry, status: 302},
		{name: "BadRequest", handler: httpsendtest.Answer(400, `{"error":"bad"}`), want: permanent, status: 400},
		{name: "NotFound", handler: httpsendtest.Answer(404, ""), want: permanent, status: 404},
		{name: "RequestTimeout", handler: httpsendtest.Answer(408, ""), want: retry, status: 408},
		{name: "Gone", handler: httpsendtest.Answer(410, ""), want: permanent, status: 410},
		{name: "TooEarly", handler: httpsendtest.Answer(425, ""), want: retry, status: 425},
		{name: "TooManySeconds", handler: httpsendtest.Answer(429, "", "Retry-After", "7"), want: retry, status: 429, minRetryAfter: 7 * time.Second, maxRetryAfter: 7 * time.Second},
		{
			name: "TooManyHTTPDate",
			handler: func(w http.ResponseWriter, r *http.Request) {
				httpsendtest.Answer(429, "", "Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))(w, r)
			},
			want: retry, status: 429, minRetryAfter: 88 * time.Second, maxRetryAfter: 90 * time.Second,
		},
		{name: "TooManyNotHonoured", policy: "alipay", handler: httpsendtest.Answer(429, "", "Retry-After", "7"), want: retry, status: 429},
		{name: "InternalError", handler: httpsendtest.Answer(500, "boom"), want: retry, status: 500},
		{name: "BadGateway", handler: httpsendtest.Answer(502, ""), want: retry, status: 502},
		{name: "Unavailable", handler: httpsendtest.Answer(503, "", "Retry-After", "120"), want: retry, status: 503, minRetryAfter: 2 * time.Minute, maxRetryAfter: 2 * time.Minute},
		{
			name:   "Timeout",
			policy: "slow",
			handler: func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			},
			want: retry,
		},
		{
			name:   "ConnectionRefused",
			target: func(t *testing.T) string { return "http://" + refusedPort(t) + "/hook" },
			want:   retry,
		},
		{
			name:   "UnresolvableHost",
			target: func(*testing.T) string { return "http://nowhere.invalid/hook" },
			want:   retry,
		},
		{
			name:   "NotHTTP",
			target: func(*testing.T) string { return "ftp://127.0.0.1/hook" },
			want:   permanent,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			handler := tt.handler
			if handler == nil {
				handler = httpsendtest.Answer(200, "")
			}
			rec := httpsendtest.NewReceiver(t, "tcp4", handler)
			n := notification(rec.URL() + "/hook")
			n.Policy = tt.policy
			if tt.target != nil {
				n.Target = tt.target(t)
			}
			start := time.Now()
			resp, err := sender.Send(context.Background(), n)
			require.Equal(t, tt.want, classify(err), "error: %v", err)
			require.Equal(t, tt.status, resp.StatusCode)
			got := retryAfter(err)
			require.GreaterOrEqual(t, got, tt.minRetryAfter)
			require.LessOrEqual(t, got, tt.maxRetryAfter)
			if tt.status != 0 && tt.want != success {
				require.ErrorContains(t, err, "status "+strconv.Itoa(tt.status))
			}
			if tt.name == "Timeout" {
				require.Less(t, time.Since(start), 2*time.Second)
				require.ErrorIs(t, err, context.DeadlineExceeded)
			}
			for _, r := range rec.Requests() {
				require.Equal(t, "/hook", r.Path, "a redirect was followed")
			}
		})
	}
}

func TestSendRequest(t *testing.T) {
	t.Parallel()

	t.Run("SignatureAndHeaders", func(t *testing.T) {
		t.Parallel()
		rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, "ok"))
		sender := newSender(t, Config{Common: httpsend.Common{HTTP: httpsend.Config{AllowNetworks: loopback.AllowNetworks, UserAgent: "herald/1.2.3"}}})
		n := notification(rec.URL() + "/hook")
		n.Headers["webhook-id"] = "forged"
		n.Headers["content-type"] = "text/html"

		before := time.Now().Unix()
		_, err := sender.Send(context.Background(), n)
		require.NoError(t, err)
		reqs := rec.Requests()
		require.Len(t, reqs, 1)
		r := reqs[0]
		require.Equal(t, http.MethodPost, r.Method)
		require.JSONEq(t, string(n.Payload), string(r.Body))
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		require.Equal(t, "herald/1.2.3", r.Header.Get("User-Agent"))
		require.Equal(t, "m-42", r.Header.Get("X-Merchant"))
		require.Equal(t, []string{n.ID}, r.Header.Values("Webhook-Id"))
		require.Equal(t, "0", r.Header.Get("Herald-Attempt"))
		ts, err := strconv.ParseInt(r.Header.Get("Webhook-Timestamp"), 10, 64)
		require.NoError(t, err)
		require.InDelta(t, before, ts, 2)

		// The receiver's check, computed apart from the sender's code.
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(testSecret, "whsec_"))
		require.NoError(t, err)
		require.Equal(t, "herald-test-key-0123456789abcdef", string(key))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(n.ID + "." + r.Header.Get("Webhook-Timestamp") + "." + string(r.Body)))
		require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), r.Header.Get("Webhook-Signature"))
	})

	t.Run("RawSecret", func(t *testing.T) {
		t.Parallel()
		rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, "ok"))
		sender := newSender(t, Config{Secret: "plain-secret", Common: httpsend.Common{HTTP: loopback}})
		_, err := sender.Send(context.Background(), notification(rec.URL()))
		require.NoError(t, err)
		r := rec.Requests()[0]
		mac := hmac.New(sha256.New, []byte("plain-secret"))
		mac.Write([]byte(r.Header.Get("Webhook-Id") + "." + r.Header.Get("Webhook-Timestamp") + "." + string(r.Body)))
		require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), r.Header.Get("Webhook-Signature"))
	})

	t.Run("StableAcrossAttempts", func(t *testing.T) {
		t.Parallel()
		rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(503, ""))
		sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
		n := notification(rec.URL())
		for attempt := range 3 {
			n.Attempts = attempt
			_, err := sender.Send(context.Background(), n)
			require.Equal(t, retry, classify(err))
		}
		reqs := rec.Requests()
		require.Len(t, reqs, 3)
		for i, r := range reqs {
			require.Equal(t, n.ID, r.Header.Get("Webhook-Id"))
			require.Equal(t, strconv.Itoa(i), r.Header.Get("Herald-Attempt"))
			require.Equal(t, "m-42", r.Header.Get("X-Merchant"))
			require.Equal(t, string(reqs[0].Body), string(r.Body))
		}
	})

	t.Run("Template", func(t *testing.T) {
		t.Parallel()
		set, err := templates.Load("../../templates")
		require.NoError(t, err)
		rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, "success"))
		sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback, Templates: set}})
		n := notification(rec.URL())
		n.Template, n.Policy = "order-notify.json", "alipay"
		_, err = sender.Send(context.Background(), n)
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal(rec.Requests()[0].Body, &got))
		require.Equal(t, "T-1", got["out_trade_no"])
		require.Equal(t, n.ID, got["notify_id"])

		n.Payload = json.RawMessage(`{"out_trade_no":"T-1"}`)
		_, err = sender.Send(context.Background(), n)
		require.Equal(t, permanent, classify(err))
		require.ErrorContains(t, err, "trade_status")
		require.Len(t, rec.Requests(), 1, "a failed render sends nothing")
	})

	t.Run("ResponseBodyCut", func(t *testing.T) {
		t.Parallel()
		rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, strings.Repeat("x", 100<<10)))
		sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
		resp, err := sender.Send(context.Background(), notification(rec.URL()))
		require.NoError(t, err)
		require.Equal(t, notify.Response{StatusCode: 200, Body: strings.Repeat("x", notify.MaxErrorLen)}, resp)
	})
}

// TestSendKeptAliveConnectionClosedByReceiver sends two webhooks to a
// receiver that closes the kept-alive connection as the second one arrives,
// as a server does whose keep-alive timeout runs out at that moment (5s for
// Apache and Node). The second is sent again at once on a new connection,
// as net/http does for a GET, instead of the attempt failing with an EOF and
// the merchant waiting for the next attempt on the backoff array.
func TestSendKeptAliveConnectionClosedByReceiver(t *testing.T) {
	t.Parallel()

	rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.HangUpOn(2, httpsendtest.Answer(200, "success")))
	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
	n := notification(rec.URL())
	n.Policy = "alipay"
	for attempt := range 2 {
		n.Attempts = attempt
		_, err := sender.Send(context.Background(), n)
		require.NoError(t, err, "attempt %d", attempt)
	}
	reqs := rec.Requests()
	require.Len(t, reqs, 3)
	require.EqualValues(t, 2, rec.Conns())
	require.Equal(t, reqs[1].Body, reqs[2].Body)
	require.Equal(t, reqs[1].Header.Get("Webhook-Signature"), reqs[2].Header.Get("Webhook-Signature"))
	require.Empty(t, reqs[2].Header.Values("Idempotency-Key"))
}

// TestSendHugeResponseHeaders posts to a receiver that answers with 256
// KiB of headers, as a merchant's server with a debugging header left on
// may: the attempt stops reading at the response cap, 64 KiB, and is
// retried, instead of reading up to 10 MiB of headers into memory for each
// attempt to that merchant.
func TestSendHugeResponseHeaders(t *testing.T) {
	t.Parallel()

	rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, "ok", "X-Debug", strings.Repeat("d", 256<<10)))
	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
	_, err := sender.Send(context.Background(), notification(rec.URL()))
	require.Equal(t, retry, classify(err), "error: %v", err)
	require.ErrorContains(t, err, "exceeded 65536 bytes")
}

// TestSendNotificationAcceptEncoding sends a notification whose producer
// set its own Accept-Encoding to a receiver that compresses its answer when
// asked: the receiver's "success" is read as such, not as gzip bytes that
// never equal the success_body, which retried the webhook until it died.
func TestSendNotificationAcceptEncoding(t *testing.T) {
	t.Parallel()

	rec := httpsendtest.NewReceiver(t, "tcp4", func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			_, _ = io.WriteString(w, "success")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		_, _ = io.WriteString(gz, "success")
		_ = gz.Close()
	})
	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
	n := notification(rec.URL())
	n.Policy = "alipay"
	n.Headers["Accept-Encoding"] = "gzip, deflate"
	_, err := sender.Send(context.Background(), n)
	require.NoError(t, err)
}

// TestSendHistoryHidesEchoedCredentials posts a notification carrying the
// merchant's credentials (an Authorization header, a cookie, a token under
// a name of the receiver's own, a password in its target URL) to a receiver whose answer echoes the request, as a
// server in debug mode does. The API never shows those values, and the
// error and response that the history keeps do not either: they show
// "[redacted]" where the receiver echoed them.
func TestSendHistoryHidesEchoedCredentials(t *testing.T) {
	t.Parallel()

	const (
		token    = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
		cookie   = "s3ss10n-v4lu3"
		password = "pa55-w0rd-of-merchant"
		gitlab   = "glpat-s3cr3t-0f-merchant"
	)
	basic := base64.StdEncoding.EncodeToString([]byte("m-42:" + password))
	echo := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_ = r.Header.Write(w)
		}
	}
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
		policy  string
		// authorization is the notification's own Authorization header;
		// without one, the target's user and password are sent as Basic.
		authorization string
	}{
		{name: "ServerError", handler: echo(500), authorization: "Bearer " + token},
		{name: "WithoutSuccessBody", handler: echo(200), policy: "alipay", authorization: "Bearer " + token},
		{name: "BadRequestPasswordInURL", handler: echo(400)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httpsendtest.NewReceiver(t, "tcp4", tt.handler)
			sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
			n := notification("http://m-42:" + password + "@" + rec.Addr() + "/hook")
			n.Policy = tt.policy
			if tt.authorization != "" {
				n.Headers["authorization"] = tt.authorization
			}
			n.Headers["Cookie"] = "lang=en; session=" + cookie
			n.Headers["X-Gitlab-Token"] = gitlab
			resp, err := sender.Send(context.Background(), n)
			require.Error(t, err)
			sent := rec.Requests()[0].Header.Get("Authorization")
			require.Equal(t, cmp.Or(tt.authorization, "Basic "+basic), sent, "the receiver gets the credentials")
			for _, recorded := range []string{err.Error(), resp.Body} {
				require.Contains(t, recorded, "[redacted]")
				for _, secret := range []string{token, cookie, password, basic, gitlab} {
					require.NotContains(t, recorded, secret)
				}
			}
		})
	}
}

// TestSendHistoryHidesEchoedQueryCredentials posts to a target whose query
// carries the merchant's token, as many receivers take it, and which
// answers quoting the request line: the history shows "[redacted]" where
// the token was, and keeps the rest of the query.
func TestSendHistoryHidesEchoedQueryCredentials(t *testing.T) {
	t.Parallel()

	const token = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	got := make(chan string, 1)
	rec := httpsendtest.NewReceiver(t, "tcp4", func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Query().Get("access_token")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "failed "+r.Method+" "+r.URL.RequestURI())
	})
	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
	resp, err := sender.Send(context.Background(), notification(rec.URL()+"/hook?order=42&access_token="+token))
	require.Equal(t, retry, classify(err), "error: %v", err)
	require.Equal(t, token, <-got, "the receiver gets the token")
	for _, recorded := range []string{err.Error(), resp.Body} {
		require.Contains(t, recorded, "failed POST /hook?order=42&access_token=[redacted]")
		require.NotContains(t, recorded, token)
	}
}

// TestSendHistoryHidesDecodedPasswords posts to a receiver that answers
// 401 quoting the user and password it decoded from the request's Basic
// credentials, as a login page in debug mode does: whether they came from
// the notification's Authorization header or from its target URL, and
// however short the password, the history shows "[redacted]" in its place.
func TestSendHistoryHidesDecodedPasswords(t *testing.T) {
	t.Parallel()

	rec := httpsendtest.NewReceiver(t, "tcp4", func(w http.ResponseWriter, r *http.Request) {
		user, password, _ := r.BasicAuth()
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "no account "+user+" with password "+password)
	})
	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
	const user = "merchant-42"
	// Each password, and whether it goes in the notification's own
	// Authorization header rather than in the target URL.
	for name, tt := range map[string]struct {
		password string
		header   bool
	}{
		"AuthorizationHeader":              {password: "s3cret-passw0rd", header: true},
		"AuthorizationHeaderShortPassword": {password: "pw12", header: true},
		"URLShortPassword":                 {password: "pw12"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := notification("http://" + user + ":" + tt.password + "@" + rec.Addr() + "/hook")
			if tt.header {
				n = notification(rec.URL() + "/hook")
				n.Headers["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+tt.password))
			}
			resp, err := sender.Send(context.Background(), n)
			require.Equal(t, permanent, classify(err), "error: %v", err)
			for _, recorded := range []string{err.Error(), resp.Body} {
				require.Contains(t, recorded, "with password [redacted]")
				require.NotContains(t, recorded, tt.password)
			}
		})
	}
}

func TestSendSuccessBody(t *testing.T) {
	t.Parallel()

	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
	for _, tt := range []struct {
		name   string
		policy string
		body   string
		want   outcome
	}{
		{name: "AlipaySuccess", policy: "alipay", body: "success\n", want: success},
		{name: "AlipayFail", policy: "alipay", body: "fail", want: retry},
		{name: "AlipayEmpty", policy: "alipay", body: "", want: retry},
		{name: "WeChatSuccess", policy: "wechat", body: `{ "code" : "SUCCESS" }`, want: success},
		{name: "WeChatFail", policy: "wechat", body: `{"code":"FAIL","message":"sign error"}`, want: retry},
		{name: "WeChatNotJSON", policy: "wechat", body: `SUCCESS`, want: retry},
		{name: "WeChatWithMessage", policy: "wechat", body: `{"code":"SUCCESS","message":"成功"}`, want: success},
		{name: "WeChatFailWithMessage", policy: "wechat", body: `{"message":"SUCCESS","code":"FAIL"}`, want: retry},
		{name: "WeChatArray", policy: "wechat", body: `[{"code":"SUCCESS"}]`, want: retry},
		{name: "WeChatNested", policy: "nested", body: `{"result":{"code":"SUCCESS","id":7},"ts":1}`, want: success},
		{name: "WeChatNestedFail", policy: "nested", body: `{"result":{"code":"FAIL"},"code":"SUCCESS"}`, want: retry},
		{name: "NoSuccessBodyAnything", policy: "default", body: "whatever", want: success},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, tt.body))
			n := notification(rec.URL())
			n.Policy = tt.policy
			resp, err := sender.Send(context.Background(), n)
			require.Equal(t, tt.want, classify(err), "error: %v", err)
			require.Equal(t, 200, resp.StatusCode)
			if tt.want == retry {
				require.ErrorContains(t, err, "success_body")
			}
		})
	}
}

func TestSendPolicyReload(t *testing.T) {
	t.Parallel()

	rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, "ok"))
	var current atomic.Pointer[policy.Set]
	current.Store(testPolicies(t)())
	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback, Rules: policy.CurrentRules(current.Load)}})
	n := notification(rec.URL())
	n.Policy = "strict"

	_, err := sender.Send(context.Background(), n)
	require.NoError(t, err, "an unknown policy falls back to the default")

	reloaded, err := policy.NewSet(map[string]policy.Policy{
		"strict": {Backoff: []notify.Duration{0}, SuccessBody: "success"},
	}, nil)
	require.NoError(t, err)
	current.Store(reloaded)
	_, err = sender.Send(context.Background(), n)
	require.Equal(t, retry, classify(err))
	require.ErrorContains(t, err, "success_body")
}

func TestNew(t *testing.T) {
	t.Parallel()

	_, err := New(&Config{Secret: "whsec_!!!"})
	require.ErrorContains(t, err, "base64")
	// An ed25519 key, private or public, is not an hmac key: taken for a
	// raw one, it signed what no receiver could verify.
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	for _, secret := range []string{endpoint.PrefixSecretKey + key, endpoint.PrefixPublicKey + key} {
		_, err = New(&Config{Secret: secret})
		require.ErrorContains(t, err, "ed25519", secret)
		require.NotContains(t, err.Error(), key, "the error holds no key")
	}
	_, err = New(&Config{Common: httpsend.Common{HTTP: httpsend.Config{AllowNetworks: []string{"loopback"}}}})
	require.ErrorContains(t, err, "allow_networks[0]")

	s, err := New(&Config{Common: httpsend.Common{HTTP: httpsend.Config{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}}})
	require.NoError(t, err)
	require.Nil(t, s.hmac, "no secret: requests go out unsigned")
}

// TestNewWarnsOfAShortKey: Standard Webhooks keys are 24 to 64 random
// bytes, as an endpoint's must be; senders.webhook.secret takes a shorter
// one, a raw "changeme" or a whsec_ of a few bytes, which an attacker who
// sees one signed request can guess offline, and says so at start, without
// the secret.
func TestNewWarnsOfAShortKey(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		secret string
		warned bool
	}{
		{secret: "changeme", warned: true},
		{secret: "whsec_c2VjcmV0", warned: true},
		{secret: testSecret},
		{secret: "a raw secret of twenty-four"},
	} {
		var logs bytes.Buffer
		_, err := New(&Config{Secret: tt.secret, Common: httpsend.Common{HTTP: httpsend.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}}})
		require.NoError(t, err)
		if !tt.warned {
			require.Empty(t, logs.String(), tt.secret)
			continue
		}
		require.Contains(t, logs.String(), "24 to 64 random bytes", tt.secret)
		require.NotContains(t, logs.String(), tt.secret)
	}
}

func TestSendSSRF(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name    string
		network string
		// target builds the URL from the receiver's port.
		target func(port string) string
		allow  string
		addr   string
	}{
		{name: "Loopback", network: "tcp4", target: func(p string) string { return "http://127.0.0.1:" + p + "/hook" }, allow: "127.0.0.0/8", addr: "127.0.0.1"},
		{name: "LoopbackIPv6", network: "tcp6", target: func(p string) string { return "http://[::1]:" + p + "/hook" }, allow: "::1/128", addr: "::1"},
		{name: "Unspecified", network: "tcp4", target: func(p string) string { return "http://0.0.0.0:" + p + "/hook" }, allow: "0.0.0.0/32", addr: "0.0.0.0"},
		{name: "NameResolvingToPrivate", network: "tcp4", target: func(p string) string { return "http://internal.test:" + p + "/hook" }, allow: "10.0.0.0/8", addr: "10.9.8.7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httpsendtest.NewReceiver(t, tt.network, httpsendtest.Answer(200, "ok"))
			_, port, err := net.SplitHostPort(rec.Addr())
			require.NoError(t, err)
			target := tt.target(port)

			t.Run("Refused", func(t *testing.T) {
				dials := rec.Dials()
				sender := newSender(t, Config{Common: httpsend.Common{HTTP: httpsend.Config{DialFunc: dials.Dial}}})
				_, err := sender.Send(context.Background(), notification(target))
				require.Equal(t, permanent, classify(err), "error: %v", err)
				var blocked *httpsend.BlockedError
				require.ErrorAs(t, err, &blocked)
				require.ErrorContains(t, err, tt.addr)
				require.Empty(t, dials.Addresses())
				require.Zero(t, rec.Conns())
			})

			t.Run("Allowed", func(t *testing.T) {
				dials := rec.Dials()
				sender := newSender(t, Config{Common: httpsend.Common{HTTP: httpsend.Config{DialFunc: dials.Dial, AllowNetworks: []string{tt.allow}}}})
				_, err := sender.Send(context.Background(), notification(target))
				require.NoError(t, err)
				require.Equal(t, []string{net.JoinHostPort(tt.addr, port)}, dials.Addresses())
				require.Len(t, rec.Requests(), 1)
			})
		})
	}
}

func TestSendSSRFWithoutInjectedDialer(t *testing.T) {
	t.Parallel()

	// The real dialer reaches the loopback receiver only when allowed. The
	// unspecified address is refused with an injected dialer
	// (TestSendSSRF): a test dials nothing but loopback.
	rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, "ok"))
	target := rec.URL() + "/hook"

	_, err := newSender(t, Config{}).Send(context.Background(), notification(target))
	require.Equal(t, permanent, classify(err))
	require.Zero(t, rec.Conns())

	_, err = newSender(t, Config{Common: httpsend.Common{HTTP: loopback}}).Send(context.Background(), notification(target))
	require.NoError(t, err)
	require.Len(t, rec.Requests(), 1)
}

// TestSendInvalidHeaderIsPermanent sends a notification whose own header
// carries a control character (one stored before enqueue validation refused
// them): no request can carry it, so the attempt fails permanently instead
// of being retried as a network error until the array runs out.
func TestSendInvalidHeaderIsPermanent(t *testing.T) {
	t.Parallel()

	rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, "ok"))
	sender := newSender(t, Config{Common: httpsend.Common{HTTP: loopback}})
	for _, headers := range []map[string]string{{"X-A": "a\u0001b"}, {"X A": "b"}} {
		n := notification(rec.URL())
		n.Headers = headers
		_, err := sender.Send(context.Background(), n)
		require.Equal(t, permanent, classify(err), "headers %q: %v", headers, err)
	}
	require.Zero(t, rec.Conns())
}
