package ui_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/ui"
)

const testToken = "s3cret-token"

// Signing secrets of the test's endpoints, which no page may show.
var (
	fileSecret    = "whsec_" + base64.StdEncoding.EncodeToString([]byte("acme-shop-hmac-key-0123456789abcdef"))
	apiSecret     = "whsk_" + base64.StdEncoding.EncodeToString([]byte("globex-ed25519-seed-0123456789ab"))
	expiredSecret = "whsk_" + base64.StdEncoding.EncodeToString([]byte("globex-ed25519-seed-retired-0000"))
)

type testBundle struct {
	store  *store.Store
	clock  *heraldtest.Clock
	server *httptest.Server
	// handler is the dashboard the server serves, for tests that watch
	// what it reads of a request.
	handler http.Handler
	// http keeps the session cookie; it does not follow redirects, so
	// tests see where they point.
	http *http.Client
}

// setup serves a dashboard with tokens over a store of the test's own,
// whose clock moves only when the test says so.
func setup(t *testing.T, tokens ...string) *testBundle {
	t.Helper()
	return setupOn(t, server, tokens...)
}

// setupOwn is setup on a Redis of the test's own, returned too, for a test
// that counts its commands or makes it fail.
func setupOwn(t *testing.T, tokens ...string) (*testBundle, *redistest.Server) {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	return setupOn(t, rs, tokens...), rs
}

// century is the longest wait a policy takes.
const century = notify.Duration(100 * 365 * 24 * time.Hour)

// setupOn is setup on the Redis rs.
func setupOn(t *testing.T, rs *redistest.Server, tokens ...string) *testBundle {
	t.Helper()
	clock := heraldtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	st, err := store.New(&store.Config{Client: rs.Client(t), Namespace: redistest.Namespace(t), Shards: 4,
		TimeNowFunc: clock.Now, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	set, err := policy.NewSet(map[string]policy.Policy{
		"merchant-notify": {Backoff: []notify.Duration{0, 0, notify.Duration(2 * time.Minute), notify.Duration(10 * time.Minute)}},
		"centuries":       {Backoff: []notify.Duration{0, century, century, century}},
	}, map[string]policy.Topic{"orders": {Channel: notify.ChannelWebhook, Policy: "merchant-notify"},
		"refunds": {Channel: notify.ChannelWebhook, Endpoint: "acme-shop"}})
	require.NoError(t, err)
	set, err = set.WithEndpoints(map[string]endpoint.Endpoint{"acme-shop": {URL: "https://acme.example/hooks",
		Secrets: []endpoint.Secret{{Value: fileSecret}}, MaxInFlight: 4, Rate: 10}})
	require.NoError(t, err)
	h, err := ui.New(&ui.Config{Store: st, Tokens: tokens, PoliciesFunc: func() *policy.Set { return set }, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		_ = h.Close()
	})
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &testBundle{store: st, clock: clock, server: srv, handler: h, http: c}
}

// get fetches path and returns the status and body.
func (b *testBundle) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := b.http.Get(b.server.URL + path)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

// post sends a form to path as the dashboard's own page would (same
// origin) unless origin says otherwise.
func (b *testBundle) post(t *testing.T, path string, form url.Values, origin string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.server.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", origin)
	res, err := b.http.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(body)
}

// process returns the dashboard another API process with tokens serves:
// its own store, on the same Redis and namespace, and the same clock.
func (b *testBundle) process(t *testing.T, tokens ...string) http.Handler {
	t.Helper()
	st, err := store.New(&store.Config{Client: server.Client(t), Namespace: b.store.Namespace(), Shards: 4,
		TimeNowFunc: b.clock.Now, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	h, err := ui.New(&ui.Config{Store: st, Tokens: tokens, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// cookies returns the cookies the test's browser holds for the dashboard.
func (b *testBundle) cookies(t *testing.T) []*http.Cookie {
	t.Helper()
	u, err := url.Parse(b.server.URL + "/ui/")
	require.NoError(t, err)
	return b.http.Jar.Cookies(u)
}

// serve sends h a request carrying cookies, and form when it is not nil,
// from no particular origin (as curl would), and returns the answer.
func serve(h http.Handler, method, path string, cookies []*http.Cookie, form url.Values) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func (b *testBundle) login(t *testing.T) {
	t.Helper()
	res, _ := b.post(t, "/ui/login", url.Values{"token": {testToken}, "next": {"/ui/"}}, b.server.URL)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
}

// csrf reads the form token from a page.
func csrf(t *testing.T, page string) string {
	t.Helper()
	const marker = `name="csrf" value="`
	i := strings.Index(page, marker)
	require.GreaterOrEqual(t, i, 0, "no csrf field in the page")
	rest := page[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

// bury stores a dead notification of topic with one failed attempt whose
// receiver answered answer, at the store's now.
func (b *testBundle) bury(t *testing.T, id, topic, payload, answer string) {
	t.Helper()
	n := heraldtest.Notification(t, id, b.clock.Now(), heraldtest.Topic(topic), heraldtest.Payload(payload),
		heraldtest.Channel(notify.ChannelWebhook, "http://127.0.0.1:9/hook"), heraldtest.Backoff(0))
	now := b.clock.Now()
	res, err := b.store.EnqueueBatch(context.Background(), []store.EnqueueRequest{{Notification: n, Dead: &notify.Attempt{
		StartedAt: now, FinishedAt: now.Add(12 * time.Millisecond), Outcome: notify.OutcomePermanent,
		StatusCode: http.StatusBadRequest, Error: answer, DurationMS: 12,
	}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
}

func TestLogin(t *testing.T) {
	t.Parallel()

	t.Run("PagesNeedASession", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		res, err := b.http.Get(b.server.URL + "/ui/dead?topic=orders")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		require.Equal(t, "/ui/login?next="+url.QueryEscape("/ui/dead?topic=orders"), res.Header.Get("Location"))
	})

	t.Run("WrongTokenIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		res, body := b.post(t, "/ui/login", url.Values{"token": {"guess"}}, b.server.URL)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		require.Contains(t, body, "not one of api.tokens")
		require.Empty(t, res.Cookies())
	})

	t.Run("TokenOpensAStrictHttpOnlySession", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "other-token", testToken)
		res, _ := b.post(t, "/ui/login", url.Values{"token": {testToken}, "next": {"/ui/policies"}}, b.server.URL)
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		require.Equal(t, "/ui/policies", res.Header.Get("Location"))
		cookies := res.Cookies()
		require.Len(t, cookies, 1)
		require.True(t, cookies[0].HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)
		require.Equal(t, "/ui/", cookies[0].Path)
		status, body := b.get(t, "/ui/")
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, "Sign out")
		require.NotContains(t, body, "No API tokens are configured")
	})

	// Herald serves plain HTTP: TLS ends at a proxy in front of it, which
	// says so in X-Forwarded-Proto, and the cookie must then be Secure.
	t.Run("SecureBehindATLSProxy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		for _, tt := range []struct {
			proto  string
			secure bool
		}{{proto: "https", secure: true}, {proto: "", secure: false}, {proto: "http", secure: false}} {
			req, err := http.NewRequest(http.MethodPost, b.server.URL+"/ui/login",
				strings.NewReader(url.Values{"token": {testToken}}.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tt.proto != "" {
				req.Header.Set("X-Forwarded-Proto", tt.proto)
			}
			res, err := b.http.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusSeeOther, res.StatusCode)
			require.Len(t, res.Cookies(), 1)
			require.Equal(t, tt.secure, res.Cookies()[0].Secure, "X-Forwarded-Proto %q", tt.proto)
		}
	})

	t.Run("NextStaysInTheDashboard", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		res, _ := b.post(t, "/ui/login", url.Values{"token": {testToken}, "next": {"//evil.example/ui/"}}, b.server.URL)
		require.Equal(t, "/ui/", res.Header.Get("Location"))
	})

	t.Run("ForgedCookieIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		u, _ := url.Parse(b.server.URL + "/ui/")
		b.http.Jar.SetCookies(u, []*http.Cookie{{Name: "herald_session", Value: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.AAAA", Path: "/ui/"}})
		status, _ := b.get(t, "/ui/")
		require.Equal(t, http.StatusSeeOther, status)
	})

	t.Run("SignOutEndsTheSession", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		_, page := b.get(t, "/ui/")
		res, _ := b.post(t, "/ui/logout", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		status, _ := b.get(t, "/ui/")
		require.Equal(t, http.StatusSeeOther, status)
	})

	// Without tokens, any number of API processes serve the dashboard
	// behind one address: a form from one's page works on another.
	t.Run("NoTokensFormsWorkAcrossProcesses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := b.process(t)
		_, page := b.get(t, "/ui/")
		pause := func(token string) int {
			return serve(other, http.MethodPost, "/ui/topics/orders/pause", b.cookies(t), url.Values{"csrf": {token}}).Code
		}
		require.Equal(t, http.StatusForbidden, pause("made-up"), "the CSRF token is still needed")
		require.Equal(t, http.StatusSeeOther, pause(csrf(t, page)))
		paused, err := b.store.IsPaused(context.Background(), store.PauseTopic, "orders")
		require.NoError(t, err)
		require.True(t, paused)
	})

	t.Run("NoTokensSaysSoOnEveryPage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, path := range []string{"/ui/", "/ui/dead", "/ui/policies"} {
			status, body := b.get(t, path)
			require.Equal(t, http.StatusOK, status, path)
			require.Contains(t, body, "No API tokens are configured", path)
		}
	})
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	for _, path := range []string{"/ui/login", "/ui/static/app.js"} {
		res, err := b.http.Get(b.server.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		csp := res.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "script-src 'self'", path)
		require.NotContains(t, csp, "unsafe-inline", path)
		require.Contains(t, csp, "frame-ancestors 'none'", path)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), path)
	}
	_, body := b.get(t, "/ui/login")
	require.NotContains(t, body, "<script>", "no inline script")
	require.NotContains(t, body, "style=", "no inline style")
}

// TestStaticAssetsAreVersioned: browsers keep the stylesheet and the
// script for an hour, so each page names them with a version of their
// content, and an upgraded dashboard is not shown with the old ones.
func TestStaticAssetsAreVersioned(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	_, page := b.get(t, "/ui/login")
	for _, re := range []string{`<link rel="stylesheet" href="([^"]+)">`, `<script src="([^"]+)" defer>`} {
		m := regexp.MustCompile(re).FindStringSubmatch(page)
		require.NotNil(t, m, re)
		link := html.UnescapeString(m[1])
		status, body := b.get(t, link)
		require.Equal(t, http.StatusOK, status, link)
		sum := sha256.Sum256([]byte(body))
		_, version, _ := strings.Cut(link, "?v=")
		require.Equal(t, hex.EncodeToString(sum[:])[:12], version, "%s does not name its content", link)
	}
}

func TestEscaping(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	b.bury(t, "evil-1", "orders", `{"note":"<script>alert('payload')</script>"}`, `status 400: <script>alert("answer")</script>`)

	for _, path := range []string{"/ui/notifications/evil-1", "/ui/dead?topic=orders"} {
		status, body := b.get(t, path)
		require.Equal(t, http.StatusOK, status, path)
		require.NotContains(t, body, "<script>alert", path)
		require.Contains(t, body, "&lt;script&gt;alert(&#34;answer&#34;)&lt;/script&gt;", path)
	}
	_, body := b.get(t, "/ui/notifications/evil-1")
	require.Contains(t, body, "&lt;script&gt;alert(&#39;payload&#39;)&lt;/script&gt;")
}

func TestNotificationPage(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	b.bury(t, "dead-1", "orders", `{"order":42}`, "status 400: no such order")
	_, body := b.get(t, "/ui/notifications/dead-1")
	require.Contains(t, body, `id="state">dead<`)
	require.Contains(t, body, "no such order")
	require.Contains(t, body, "<td class=\"n\">400</td>")
	require.Contains(t, body, "12 ms")

	n := heraldtest.Notification(t, "later-1", b.clock.Now(), heraldtest.Topic("orders"), heraldtest.Delay(90*time.Second))
	_, _, err := b.store.Enqueue(context.Background(), n, false)
	require.NoError(t, err)
	_, body = b.get(t, "/ui/notifications/later-1")
	require.Contains(t, body, "next attempt due 2026-03-01 12:01:30.000 UTC (in 1m30s)")

	status, _ := b.get(t, "/ui/notifications/nope")
	require.Equal(t, http.StatusNotFound, status)
	res, err := b.http.Get(b.server.URL + "/ui/find?id=dead-1")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, "/ui/notifications/dead-1", res.Header.Get("Location"))
}

// TestNotificationPageOverdue: the timeline of a notification whose next
// attempt should have started long ago (no dispatcher took it) says how
// late it is, not that it is due now.
func TestNotificationPageOverdue(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	// stuck-1 is due now; behind-1 waits for it, the earlier of their
	// order key.
	for _, id := range []string{"stuck-1", "behind-1"} {
		n := heraldtest.Notification(t, id, b.clock.Now(), heraldtest.Topic("orders"), heraldtest.OrderKey("order-42"))
		_, _, err := b.store.Enqueue(context.Background(), n, false)
		require.NoError(t, err)
	}
	_, body := b.get(t, "/ui/notifications/stuck-1")
	require.Contains(t, body, "next attempt due 2026-03-01 12:00:00.000 UTC (now)")
	b.clock.Advance(2*time.Hour + 30*time.Second)
	_, body = b.get(t, "/ui/notifications/stuck-1")
	require.Contains(t, body, "next attempt due 2026-03-01 12:00:00.000 UTC (overdue by 2h0m30s)")
	// The one that waits is not overdue: it waits for the other.
	_, body = b.get(t, "/ui/notifications/behind-1")
	require.NotContains(t, body, "overdue")
	require.Contains(t, body, `next attempt waits for <a href="/ui/notifications/stuck-1">stuck-1</a>, the earlier of its order key, to end`)
}

// TestNotificationPageRunning: the timeline of a reserved notification
// shows its attempt running since its reservation and until when, not a
// next attempt due in the past.
func TestNotificationPageRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testToken)
	b.login(t)
	n := heraldtest.Notification(t, "run-1", b.clock.Now(), heraldtest.Topic("orders"),
		heraldtest.Channel(notify.ChannelWebhook, "http://127.0.0.1:9/hook"))
	_, _, err := b.store.Enqueue(ctx, n, false)
	require.NoError(t, err)
	b.clock.Advance(2 * time.Second)
	items, _, err := b.store.Reserve(ctx, store.QueuePush, []int{0, 1, 2, 3}, store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, items, 1)
	b.clock.Advance(5 * time.Second)

	status, body := b.get(t, "/ui/notifications/run-1")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `id="state">reserved<`)
	require.NotContains(t, body, "next attempt due")
	deadline := items[0].Deadline.UTC().Format("2006-01-02 15:04:05.000")
	require.Contains(t, body, `<tr class="next" id="running"><td class="n">0</td><td colspan="6">running since 2026-03-01 12:00:02.000 UTC (for 5s); `+
		`counted as failed (ttr expired) unless it ends by `+deadline+` UTC</td></tr>`)
}

// TestNotificationPagePaused: the page of a notification a dispatcher
// parked names its endpoint and says it is paused, and by what, where its
// next attempt would be.
func TestNotificationPagePaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		// kind is the pause the notification is parked under, made by
		// pauseFunc.
		kind      string
		pauseFunc func(t *testing.T, b *testBundle)
		want      string
	}{
		{
			name: "Endpoint", kind: store.PauseEndpoint,
			pauseFunc: func(t *testing.T, b *testBundle) {
				require.NoError(t, b.store.Pause(ctx, store.PauseEndpoint, "acme-shop"))
			},
			want: `next attempt waits for endpoint <a href="/ui/?endpoint=acme-shop#endpoint-acme-shop">acme-shop</a>, paused since 2026-03-01 12:00:00.000 UTC, to be resumed`,
		},
		{
			name: "Topic", kind: store.PauseTopic,
			pauseFunc: func(t *testing.T, b *testBundle) {
				require.NoError(t, b.store.Pause(ctx, store.PauseTopic, "orders"))
			},
			want: "next attempt waits for topic orders, paused since 2026-03-01 12:00:00.000 UTC, to be resumed",
		},
		{
			name: "DisabledEndpoint", kind: store.PauseDisabled,
			pauseFunc: func(t *testing.T, b *testBundle) {
				_, err := b.store.EndpointFailed(ctx, "acme-shop", time.Minute)
				require.NoError(t, err)
				b.clock.Advance(2 * time.Minute)
				disabled, err := b.store.EndpointFailed(ctx, "acme-shop", time.Minute)
				require.NoError(t, err)
				require.True(t, disabled)
			},
			want: `next attempt waits for endpoint <a href="/ui/?endpoint=acme-shop#endpoint-acme-shop">acme-shop</a>, disabled by its health since 2026-03-01 12:02:00.000 UTC, to be enabled`,
		},
		{
			// Resumed while a dispatcher parked it: the next sweep unparks
			// it.
			name: "PauseEnded", kind: store.PauseEndpoint,
			pauseFunc: func(*testing.T, *testBundle) {},
			want:      "next attempt waits for a dispatcher to see that its pause has ended",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, testToken)
			b.login(t)
			tt.pauseFunc(t, b)
			b.park(t, "parked-1", tt.kind, "acme-shop", heraldtest.Endpoint("acme-shop"))

			status, body := b.get(t, "/ui/notifications/parked-1")
			require.Equal(t, http.StatusOK, status)
			require.Contains(t, body, `<dt>Endpoint</dt><dd><a href="/ui/?endpoint=acme-shop#endpoint-acme-shop">acme-shop</a></dd>`)
			require.Contains(t, body, `id="state">scheduled</span> <span class="tag paused">paused</span>`)
			require.Contains(t, body, tt.want)
			require.NotContains(t, body, "No attempts.")

			_, page := b.get(t, "/ui/")
			require.Contains(t, page, `<tr data-endpoint="acme-shop" id="endpoint-acme-shop">`, "the link's target")
		})
	}
}

// TestNotificationPageRedactsCredentials: the page shows a notification's
// credential headers as the API does, "[redacted]", and its other headers
// as given.
func TestNotificationPageRedactsCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	n := heraldtest.Notification(t, "cred-1", b.clock.Now(), heraldtest.Topic("orders"), heraldtest.Delay(time.Hour),
		func(r *notify.Request) {
			r.Headers = map[string]string{"Authorization": "Bearer s3cr3t-token", "cookie": "session=s3cr3t-cookie", "X-Shop": "42"}
		})
	_, _, err := b.store.Enqueue(context.Background(), n, false)
	require.NoError(t, err)
	status, body := b.get(t, "/ui/notifications/cred-1")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, "s3cr3t")
	require.Contains(t, body, "<th>Authorization</th><td><code>[redacted]</code></td>")
	require.Contains(t, body, "<th>cookie</th><td><code>[redacted]</code></td>")
	require.Contains(t, body, "<th>X-Shop</th><td><code>42</code></td>")
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestFormBodyIsBounded: a form far larger than any of the dashboard's is
// refused with 413 once a little of it is read, if any, whether or not
// its length is declared: at the sign-in that anyone may reach, and behind
// the guard of a dashboard without tokens, which opens a session for
// anyone.
func TestFormBodyIsBounded(t *testing.T) {
	t.Parallel()

	const size = 8 << 20
	tests := []struct {
		name string
		// open serves the dashboard without tokens.
		open        bool
		path        string
		contentType string
		// undeclared sends the body without a length, as chunks.
		undeclared bool
	}{
		{name: "Login", path: "/ui/login", contentType: "application/x-www-form-urlencoded"},
		{name: "LoginUndeclared", path: "/ui/login", contentType: "application/x-www-form-urlencoded", undeclared: true},
		{name: "LoginMultipart", path: "/ui/login", contentType: "multipart/form-data; boundary=x"},
		{name: "GuardedFormWithoutTokens", open: true, path: "/ui/dead/purge", contentType: "application/x-www-form-urlencoded"},
		{name: "GuardedFormWithoutTokensUndeclared", open: true, path: "/ui/dead/purge",
			contentType: "application/x-www-form-urlencoded", undeclared: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tokens := []string{testToken}
			if tt.open {
				tokens = nil
			}
			b := setup(t, tokens...)
			form := "token=" + strings.Repeat("A", size)
			body := &countingReader{r: strings.NewReader(form)}
			req := httptest.NewRequest(http.MethodPost, tt.path, body)
			req.Header.Set("Content-Type", tt.contentType)
			req.ContentLength = int64(len(form))
			if tt.undeclared {
				req.ContentLength = -1
			}
			if tt.open {
				rec := httptest.NewRecorder()
				b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/", nil))
				cookies := rec.Result().Cookies()
				require.NotEmpty(t, cookies, "no session opened")
				req.AddCookie(cookies[0])
			}
			rec := httptest.NewRecorder()
			b.handler.ServeHTTP(rec, req)
			require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
			require.Less(t, body.n, int64(1<<20), "read %d bytes", body.n)
		})
	}
}

func TestStateChanges(t *testing.T) {
	t.Parallel()

	t.Run("RefusedWithoutTheCSRFToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		b.bury(t, "d1", "orders", `{}`, "x")
		res, body := b.post(t, "/ui/dead/replay", url.Values{"ids": {"d1"}}, b.server.URL)
		require.Equal(t, http.StatusForbidden, res.StatusCode)
		require.Contains(t, body, "Nothing was changed")
		res, _ = b.post(t, "/ui/dead/purge", url.Values{"ids": {"d1"}, "csrf": {"made-up"}}, b.server.URL)
		require.Equal(t, http.StatusForbidden, res.StatusCode)
		stats, err := b.store.Stats(context.Background())
		require.NoError(t, err)
		require.EqualValues(t, 1, stats["orders"].Dead)
	})

	t.Run("RefusedFromAnotherOrigin", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		b.bury(t, "d1", "orders", `{}`, "x")
		_, page := b.get(t, "/ui/dead/confirm?action=purge&ids=d1")
		res, _ := b.post(t, "/ui/dead/purge", url.Values{"ids": {"d1"}, "csrf": {csrf(t, page)}}, "https://evil.example")
		require.Equal(t, http.StatusForbidden, res.StatusCode)
		res, _ = b.post(t, "/ui/login", url.Values{"token": {testToken}}, "https://evil.example")
		require.Equal(t, http.StatusForbidden, res.StatusCode)
	})

	t.Run("TokenOfAnotherSessionIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		b.bury(t, "d1", "orders", `{}`, "x")
		_, page := b.get(t, "/ui/dead/confirm?action=purge&ids=d1")
		b.login(t) // a new session, with a new token
		res, _ := b.post(t, "/ui/dead/purge", url.Values{"ids": {"d1"}, "csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusForbidden, res.StatusCode)
	})

	t.Run("ConfirmCountsThenReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		for i := range 3 {
			b.bury(t, fmt.Sprintf("d%d", i), "orders", `{}`, "x")
		}
		b.bury(t, "other", "billing", `{}`, "x")
		_, page := b.get(t, "/ui/dead/confirm?action=replay&topic=orders")
		require.Contains(t, page, "<strong>3</strong> dead notifications match.")
		stats, err := b.store.Stats(context.Background())
		require.NoError(t, err)
		require.EqualValues(t, 3, stats["orders"].Dead, "the confirmation page changes nothing")

		res, body := b.post(t, "/ui/dead/replay", url.Values{"topic": {"orders"}, "csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Contains(t, body, "Replayed 3 of 3 matching dead notifications.")
		stats, err = b.store.Stats(context.Background())
		require.NoError(t, err)
		require.EqualValues(t, 0, stats["orders"].Dead)
		require.EqualValues(t, 3, stats["orders"].Scheduled)
		require.EqualValues(t, 1, stats["billing"].Dead)
	})

	// A confirmation acts on what it counted: a notification that dies
	// after the count is not purged with the others unseen.
	t.Run("ActsOnWhatItCounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		for _, id := range []string{"d1", "d2"} {
			b.bury(t, id, "orders", `{}`, "x")
		}
		_, page := b.get(t, "/ui/dead/confirm?action=purge&topic=orders")
		require.Contains(t, page, "<strong>2</strong> dead notifications match.")
		b.clock.Advance(time.Second)
		b.bury(t, "d3", "orders", `{}`, "x")

		form := url.Values{"csrf": {csrf(t, page)}}
		for _, m := range hiddenRe.FindAllStringSubmatch(page, -1) {
			if m[1] != "csrf" {
				form.Set(m[1], html.UnescapeString(m[2]))
			}
		}
		res, body := b.post(t, "/ui/dead/purge", form, b.server.URL)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Contains(t, body, "Purged 2 of 2 matching dead notifications.")
		status, _ := b.get(t, "/ui/notifications/d3")
		require.Equal(t, http.StatusOK, status, "the one that died after the count is still there")
	})

	// A filter the dashboard cannot read whole (a pair with a ";" or a bad
	// %-escape, which Go's parser drops) is refused, naming it: dropped, the
	// confirmation would count, and offer to purge, every topic's dead.
	t.Run("FilterItCannotReadIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		b.bury(t, "d1", "orders", `{}`, "x")
		b.bury(t, "other", "billing", `{}`, "x")
		for _, q := range []string{"topic=orders;", "topic=orders%zz", "topic=orders;since=2026-01-01T00:00:00Z"} {
			status, page := b.get(t, "/ui/dead/confirm?action=purge&"+q)
			require.Equal(t, http.StatusBadRequest, status, q)
			require.Contains(t, page, "topic", q)
			require.NotContains(t, page, "match", q)
			status, page = b.get(t, "/ui/dead?"+q)
			require.Equal(t, http.StatusBadRequest, status, q)
			require.NotContains(t, page, "other", q)
		}
	})

	t.Run("PurgeOneFromItsPage", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		b.bury(t, "d1", "orders", `{}`, "x")
		b.bury(t, "d2", "orders", `{}`, "x")
		_, page := b.get(t, "/ui/dead/confirm?action=purge&ids=d1")
		require.Contains(t, page, "<strong>1</strong> dead notification match.")
		res, body := b.post(t, "/ui/dead/purge", url.Values{"ids": {"d1"}, "csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Contains(t, body, "Purged 1 of 1 matching dead notification.")
		status, _ := b.get(t, "/ui/notifications/d1")
		require.Equal(t, http.StatusNotFound, status)
		status, _ = b.get(t, "/ui/notifications/d2")
		require.Equal(t, http.StatusOK, status)
	})
}

func TestDeadBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	// 130 dead notifications, one a minute from 12:00, and 5 of another
	// topic.
	start := b.clock.Now()
	for i := range 130 {
		b.bury(t, fmt.Sprintf("o%03d", i), "orders", `{}`, "x")
		if i < 5 {
			b.bury(t, fmt.Sprintf("b%03d", i), "billing", `{}`, "x")
		}
		b.clock.Advance(time.Minute)
	}

	// pages follows the next-page links from path and returns the ids
	// listed.
	pages := func(t *testing.T, path string) []string {
		t.Helper()
		var ids []string
		for range 10 {
			status, body := b.get(t, path)
			require.Equal(t, http.StatusOK, status)
			for _, part := range strings.Split(body, `<a href="/ui/notifications/`)[1:] {
				ids = append(ids, part[:strings.IndexByte(part, '"')])
			}
			m := nextPageRe.FindStringSubmatch(body)
			if m == nil {
				return ids
			}
			path = html.UnescapeString(m[1])
		}
		t.Fatal("more pages than expected")
		return nil
	}

	t.Run("PagesThroughATopic", func(t *testing.T) {
		ids := pages(t, "/ui/dead?topic=orders")
		require.Len(t, ids, 130)
		require.Equal(t, "o000", ids[0])
		require.Equal(t, "o129", ids[129])
	})

	t.Run("EveryTopic", func(t *testing.T) {
		require.Len(t, pages(t, "/ui/dead"), 135)
	})

	t.Run("TimeRange", func(t *testing.T) {
		since := start.Add(10 * time.Minute).Format("2006-01-02T15:04")
		until := start.Add(75 * time.Minute).Format("2006-01-02T15:04")
		ids := pages(t, "/ui/dead?topic=orders&since="+since+"&until="+until)
		require.Len(t, ids, 65)
		require.Equal(t, "o010", ids[0])
		require.Equal(t, "o074", ids[64])

		_, page := b.get(t, "/ui/dead/confirm?action=purge&topic=orders&since="+since+"&until="+until)
		require.Contains(t, page, "<strong>65</strong> dead notifications match.")
	})

	t.Run("BadFilterNamesTheField", func(t *testing.T) {
		status, body := b.get(t, "/ui/dead?since=yesterday")
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, body, "since")
		// The zero time, taken for no bound, would confirm a purge of
		// every dead notification of the topic.
		status, body = b.get(t, "/ui/dead/confirm?action=purge&topic=orders&until=0001-01-01T00:00")
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, body, "until")
		require.NotContains(t, body, "dead notifications match")
	})
}

// TestDeadBrowserSaysWhereEachWent: each dead letter names the endpoint
// (the merchant) or the target it was for, so that an operator sees whose
// receiver failed; a target's credentials stay hidden.
func TestDeadBrowserSaysWhereEachWent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testToken)
	b.login(t)
	now := b.clock.Now()
	var reqs []store.EnqueueRequest
	for _, n := range []*notify.Notification{
		heraldtest.Notification(t, "to-acme", now, heraldtest.Topic("refunds"), heraldtest.Endpoint("acme-shop"), heraldtest.Backoff(0)),
		heraldtest.Notification(t, "to-target", now, heraldtest.Topic("orders"),
			heraldtest.Channel(notify.ChannelWebhook, "https://shop:s3cr3t@shop.example/notify"), heraldtest.Backoff(0)),
	} {
		reqs = append(reqs, store.EnqueueRequest{Notification: n, Dead: &notify.Attempt{StartedAt: now, FinishedAt: now,
			Outcome: notify.OutcomePermanent, StatusCode: http.StatusGone, Error: "gone"}})
	}
	res, err := b.store.EnqueueBatch(ctx, reqs)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	status, body := b.get(t, "/ui/dead")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, "s3cr3t")
	require.Contains(t, row(t, body, `<tr data-id="to-acme">`), `<a href="/ui/?endpoint=acme-shop#endpoint-acme-shop">acme-shop</a>`)
	require.Contains(t, row(t, body, `<tr data-id="to-target">`), `<code>https://xxxxx@shop.example/notify</code>`)
}

// TestDotIDsOpen: "." and ".." are notification ids like any other, which
// a browser would drop from a link's path as dot segments: the dead-letter
// browser's links, the search box and a replay's way back open their pages,
// not the overview.
func TestDotIDsOpen(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	// open follows link from the page at from as a browser does, and
	// returns the status and body of where it leads.
	open := func(t *testing.T, from, link string) (int, string) {
		t.Helper()
		base, err := url.Parse(b.server.URL + from)
		require.NoError(t, err)
		ref, err := url.Parse(html.UnescapeString(link))
		require.NoError(t, err)
		return b.get(t, base.ResolveReference(ref).RequestURI())
	}
	hrefRe := regexp.MustCompile(`<a href="([^"]+)">`)
	for _, id := range []string{".", ".."} {
		b.bury(t, id, "orders", `{}`, "gone")
		want := "<h1>Notification <code>" + id + "</code></h1>"

		_, page := b.get(t, "/ui/dead?topic=orders")
		link := hrefRe.FindStringSubmatch(row(t, page, `<tr data-id="`+id+`">`))
		require.NotNil(t, link, id)
		status, body := open(t, "/ui/dead?topic=orders", link[1])
		require.Equal(t, http.StatusOK, status, "%s: %s", id, link[1])
		require.Contains(t, body, want, "the dead letters' link to %s", id)

		res, err := b.http.Get(b.server.URL + "/ui/find?id=" + id)
		require.NoError(t, err)
		res.Body.Close()
		status, body = open(t, "/ui/find", res.Header.Get("Location"))
		require.Equal(t, http.StatusOK, status, "%s: %s", id, res.Header.Get("Location"))
		require.Contains(t, body, want, "the search box's jump to %s", id)

		_, confirm := b.get(t, "/ui/dead/confirm?action=replay&ids="+url.QueryEscape(id))
		_, done := b.post(t, "/ui/dead/replay", url.Values{"csrf": {csrf(t, confirm)}, "ids": {id}}, b.server.URL)
		back := regexp.MustCompile(`<a href="([^"]+)" id="back">`).FindStringSubmatch(done)
		require.NotNil(t, back, id)
		status, body = open(t, "/ui/dead/replay", back[1])
		require.Equal(t, http.StatusOK, status, "%s: %s", id, back[1])
		require.Contains(t, body, want, "the way back from replaying %s", id)
	}
}

// hiddenRe finds the hidden fields of a page's forms: name and value.
var hiddenRe = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// nextPageRe finds the dead-letter browser's next-page link.
var nextPageRe = regexp.MustCompile(`<a href="([^"]+)" id="next-page"`)

func TestOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	b.bury(t, "d1", "orders", `{}`, "x")
	n := heraldtest.Notification(t, "s1", b.clock.Now(), heraldtest.Topic("billing"), heraldtest.Delay(time.Hour))
	_, _, err := b.store.Enqueue(context.Background(), n, false)
	require.NoError(t, err)
	status, body := b.get(t, "/ui/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<tr data-topic="orders">`)
	require.Contains(t, body, `<a class="dead" href="/ui/dead?topic=orders">1</a>`)
	require.Contains(t, body, `<tr data-topic="billing">`)
	require.Contains(t, body, `data-refresh="5"`)
}

// TestOverviewIsPaged: with 250 topics and 150 endpoints, each of the
// overview's tables shows 100 rows a page, every topic and endpoint is on
// exactly one page, the totals count them all on every page, and a paused
// topic is linked from every page.
// crowd stores a notification due in an hour in each of topics topics,
// t000 on, and endpoints endpoints through the API's, e000 on.
func (b *testBundle) crowd(t *testing.T, topics, endpoints int) {
	t.Helper()
	ctx := context.Background()
	var reqs []store.EnqueueRequest
	for i := range topics {
		reqs = append(reqs, store.EnqueueRequest{Notification: heraldtest.Notification(t, fmt.Sprintf("n%03d", i), b.clock.Now(),
			heraldtest.Topic(fmt.Sprintf("t%03d", i)), heraldtest.Delay(time.Hour))})
	}
	_, err := b.store.EnqueueBatch(ctx, reqs)
	require.NoError(t, err)
	for i := range endpoints {
		_, err := b.store.PutEndpoint(ctx, fmt.Sprintf("e%03d", i), &endpoint.Endpoint{URL: "https://e.example/"})
		require.NoError(t, err)
	}
}

func TestOverviewIsPaged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testToken)
	b.login(t)
	b.crowd(t, 250, 149) // and the file's acme-shop
	require.NoError(t, b.store.Pause(ctx, store.PauseTopic, "t180"))
	require.NoError(t, b.store.Pause(ctx, store.PauseEndpoint, "e140"))

	// walk follows the next-page links of the table of kind (topic or
	// endpoint) and counts the rows it lists.
	walk := func(kind string) map[string]int {
		rowRe := regexp.MustCompile(`<tr data-` + kind + `="([^"]+)"`)
		nextRe := regexp.MustCompile(`<div id="` + kind + `-pages"><p class="pager">[^<]*(?:<a[^>]*>[^<]*</a>[^<]*)*?<a href="([^"]+)" rel="next">`)
		seen := map[string]int{}
		path := "/ui/"
		for page := 1; page <= 3; page++ {
			status, body := b.get(t, path)
			require.Equal(t, http.StatusOK, status)
			rows := rowRe.FindAllStringSubmatch(body, -1)
			require.LessOrEqual(t, len(rows), 100, "%s page %d", kind, page)
			for _, m := range rows {
				seen[m[1]]++
			}
			require.True(t, strings.Contains(body, `<th>All topics</th><td class="n">250</td>`), "%s page %d: totals", kind, page)
			require.Regexp(t, `Paused topics: <a href="/ui/\?(epage=\d&amp;)?page=2#topic-t180">t180</a>`,
				body[:strings.Index(body, "<table")], "%s page %d", kind, page)
			require.Regexp(t, `Paused or disabled endpoints: <a href="/ui/\?epage=2(&amp;page=\d)?#endpoint-e140">e140</a> \(paused\)`,
				body[:strings.Index(body, "<table")], "%s page %d", kind, page)
			m := nextRe.FindStringSubmatch(body)
			if m == nil {
				return seen
			}
			path = html.UnescapeString(m[1])
		}
		t.Fatalf("more %s pages than expected", kind)
		return nil
	}
	for kind, want := range map[string]int{"topic": 250, "endpoint": 150} {
		seen := walk(kind)
		require.Len(t, seen, want, kind)
		for name, n := range seen {
			require.Equal(t, 1, n, "%s %s", kind, name)
		}
	}
	_, body := b.get(t, "/ui/?page=2")
	require.True(t, strings.Contains(body, `<td class="topic" id="topic-t180">`), "the paused topic's link leads to its row")
	require.True(t, strings.Contains(body, "101–200 of 250"), "the pager says where the page is")
}

// TestOverviewListsFailingEndpoints: with more endpoints than a page
// shows, every page names the endpoints that fail, linked to their rows:
// those whose health says every attempt has failed since some time, and
// those whose attempts of the last five minutes all failed, so that an
// operator need not page through every merchant to find them.
func TestOverviewListsFailingEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testToken)
	b.login(t)
	b.crowd(t, 1, 149) // and the file's acme-shop, first
	_, err := b.store.PutEndpoint(ctx, "e120", &endpoint.Endpoint{URL: "https://e.example/", DisableAfter: notify.Duration(time.Hour)})
	require.NoError(t, err)
	_, err = b.store.EndpointFailed(ctx, "e120", time.Hour)
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	// e130's one attempt of the last minutes failed; e131's succeeded.
	for _, id := range []string{"to-e130", "to-e131"} {
		n := heraldtest.Notification(t, id, b.clock.Now(), heraldtest.Topic("orders"), heraldtest.Endpoint("e"+id[4:]))
		_, _, err := b.store.Enqueue(ctx, n, false)
		require.NoError(t, err)
	}
	b.attempt(t, 2, func(n *notify.Notification) bool { return n.ID == "to-e130" })

	for _, path := range []string{"/ui/", "/ui/?epage=2"} {
		_, body := b.get(t, path)
		top := body[:strings.Index(body, "<table")]
		require.Contains(t, top, `<p id="failing-endpoints">Failing endpoints: `+
			`<a href="/ui/?epage=2#endpoint-e120">e120</a> (every attempt since 2026-03-01 12:00:00.000 UTC), `+
			`<a href="/ui/?epage=2#endpoint-e130">e130</a> (every attempt of the last 5 minutes)</p>`, path)
	}
}

func TestOverviewActivity(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	// One attempt succeeds now, two fail three minutes ago, one an hour and
	// a half ago: the recent columns count the last five minutes, the
	// chart the last hour.
	c, err := client.New(&client.Config{Store: b.store})
	require.NoError(t, err)
	defer c.Close()
	finish := func(id string, ok bool) {
		t.Helper()
		n := heraldtest.Notification(t, id, b.clock.Now(), heraldtest.Topic("orders"), heraldtest.Backoff(0, time.Hour))
		_, _, err := b.store.Enqueue(context.Background(), n, false)
		require.NoError(t, err)
		got, err := c.Reserve(context.Background(), "orders", 1, 0)
		require.NoError(t, err)
		require.Len(t, got, 1)
		if ok {
			require.NoError(t, c.Ack(context.Background(), id, got[0].Receipt))
		} else {
			require.NoError(t, c.Nack(context.Background(), id, got[0].Receipt, errors.New("busy")))
		}
	}
	finish("old", true)
	b.clock.Advance(87 * time.Minute)
	finish("f1", false)
	finish("f2", false)
	b.clock.Advance(3 * time.Minute)
	finish("ok", true)

	_, body := b.get(t, "/ui/")
	row := body[strings.Index(body, `<tr data-topic="orders">`):]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, `<td class="n">1</td><td class="n bad">2</td>`)
	require.Contains(t, row, "1 ok · 2 failed", "the hour leaves out the attempt of 90 minutes ago")
	require.Equal(t, 2, strings.Count(row, `<rect class="ok"`)+strings.Count(row, `<rect class="fail"`))
}

// attempt reserves the want notifications due in the push queue and
// finishes each one's attempt at the clock's now: failed (retried in an
// hour) when fail says so, succeeded otherwise.
func (b *testBundle) attempt(t *testing.T, want int, fail func(*notify.Notification) bool) {
	t.Helper()
	ctx := context.Background()
	items, _, err := b.store.Reserve(ctx, store.QueuePush, []int{0, 1, 2, 3}, store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, items, want)
	now := b.clock.Now()
	var fs []store.Finish
	for _, n := range items {
		f := store.Finish{Notification: n, Action: notify.ActionAck,
			Attempt: notify.Attempt{StartedAt: now, FinishedAt: now, Outcome: notify.OutcomeSuccess}}
		if fail(n) {
			f.Action, f.NextAt, f.Attempt.Outcome = notify.ActionRetry, now.Add(time.Hour), notify.OutcomeRetry
		}
		fs = append(fs, f)
	}
	errs, err := b.store.Finish(ctx, fs)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
}

// TestOverviewEndpointActivity finishes attempts to an endpoint: its row
// counts them, as its topic's row does.
func TestOverviewEndpointActivity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testToken)
	b.login(t)
	for _, id := range []string{"e1", "e2", "e3"} {
		n := heraldtest.Notification(t, id, b.clock.Now(), heraldtest.Topic("orders"), heraldtest.Endpoint("acme-shop"))
		_, _, err := b.store.Enqueue(ctx, n, false)
		require.NoError(t, err)
	}
	first := true
	b.attempt(t, 3, func(*notify.Notification) bool {
		failed := first
		first = false
		return failed
	})

	_, body := b.get(t, "/ui/")
	for _, open := range []string{`<tr data-endpoint="acme-shop"`, `<tr data-topic="orders">`} {
		r := row(t, body, open)
		require.Contains(t, r, `<td class="n">2</td><td class="n bad">1</td>`, open)
		require.Contains(t, r, "2 ok · 1 failed", open)
	}
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	_, body := b.get(t, "/ui/policies")
	require.Contains(t, body, `id="policy-merchant-notify"`)
	// 0, 0, 2m, 10m: the fourth attempt starts 12m after send_at.
	require.Contains(t, body, `<td class="n">3</td><td class="n">10m0s</td><td class="n">12m0s</td>`)
	require.Contains(t, body, `<td>orders</td><td>webhook</td><td>merchant-notify</td>`)
	// Three waits of a century: the last attempt is past what an offset
	// can say, and the page says so instead of a negative offset.
	require.Contains(t, body, `<td class="n">3</td><td class="n">876000h0m0s</td><td class="n">more than 292 years</td>`)
	// A topic's default endpoint is where it sends, as a target would be.
	require.Contains(t, body, `<td>refunds</td><td>webhook</td><td>default</td><td></td><td>endpoint acme-shop</td>`)
}

// TestPoliciesPageRedactsTargets: a topic's default target shows on the
// policies page as a notification's does, its user information (the
// receiver's credentials) replaced by xxxxx.
func TestPoliciesPageRedactsTargets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set, err := policy.NewSet(nil, map[string]policy.Topic{
		"callbacks": {Channel: notify.ChannelWebhook, Target: "https://shop:s3cr3t@shop.example/notify"}})
	require.NoError(t, err)
	h, err := ui.New(&ui.Config{Store: b.store, PoliciesFunc: func() *policy.Set { return set }, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	rec := serve(h, http.MethodGet, "/ui/policies", nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.NotContains(t, rec.Body.String(), "s3cr3t")
	require.Contains(t, rec.Body.String(), "<code>https://xxxxx@shop.example/notify</code>")
}

// park stores a webhook notification of topic orders, changed by opts, and
// gives it back parked under kind name's pause, as a dispatcher does when it
// reserves one whose topic or endpoint is paused.
func (b *testBundle) park(t *testing.T, id, kind, name string, opts ...heraldtest.NotificationOption) {
	t.Helper()
	ctx := context.Background()
	opts = append([]heraldtest.NotificationOption{heraldtest.Topic("orders"),
		heraldtest.Channel(notify.ChannelWebhook, "http://127.0.0.1:9/hook")}, opts...)
	n := heraldtest.Notification(t, id, b.clock.Now(), opts...)
	_, _, err := b.store.Enqueue(ctx, n, false)
	require.NoError(t, err)
	items, _, err := b.store.Reserve(ctx, store.QueuePush, []int{0, 1, 2, 3}, store.MaxReserve)
	require.NoError(t, err)
	require.Len(t, items, 1)
	errs, err := b.store.Finish(ctx, []store.Finish{{Notification: items[0], Action: notify.ActionRelease, NextAt: store.ParkAt(kind, name)}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
}

// row returns the overview's table row whose opening tag starts with open.
func row(t *testing.T, page, open string) string {
	t.Helper()
	i := strings.Index(page, open)
	require.GreaterOrEqual(t, i, 0, "no row %s in the page", open)
	r := page[i:]
	return r[:strings.Index(r, "</tr>")]
}

// TestPauseDotTopics: the topics "." and ".." are valid, and their
// buttons post where a browser sends them, which drops dot segments.
func TestPauseDotTopics(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.login(t)
	base, err := url.Parse(b.server.URL + "/ui/")
	require.NoError(t, err)
	for _, topic := range []string{".", ".."} {
		b.bury(t, "d"+topic, topic, `{}`, "x")
		_, page := b.get(t, "/ui/")
		action := regexp.MustCompile(`<form method="post" action="([^"]+)"`).FindStringSubmatch(row(t, page, `<tr data-topic="`+topic+`">`))
		require.NotNil(t, action, "topic %q has no button", topic)
		ref, err := url.Parse(html.UnescapeString(action[1]))
		require.NoError(t, err)
		res, _ := b.post(t, base.ResolveReference(ref).EscapedPath(), url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusSeeOther, res.StatusCode, "topic %q", topic)
		paused, err := b.store.IsPaused(context.Background(), store.PauseTopic, topic)
		require.NoError(t, err)
		require.True(t, paused, "the Pause button of topic %q paused nothing", topic)
	}
}

// button returns the form of the row that posts to action, or "".
func button(r, action string) string {
	i := strings.Index(r, `<form method="post" action="`+action+`"`)
	if i < 0 {
		return ""
	}
	return r[i : i+strings.Index(r[i:], "</form>")]
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testToken)
	b.login(t)
	expired := b.clock.Now().Add(-time.Hour)
	_, err := b.store.PutEndpoint(ctx, "globex", &endpoint.Endpoint{URL: "https://globex.example/in?x=<b>", Signing: endpoint.SigningEd25519,
		Secrets: []endpoint.Secret{{Value: apiSecret}, {Value: expiredSecret, ExpiresAt: &expired}}, Rate: 2.5,
		DisableAfter: notify.Duration(time.Minute)})
	require.NoError(t, err)

	t.Run("ListsTheFilesAndTheAPIsWithoutSecrets", func(t *testing.T) {
		_, page := b.get(t, "/ui/")
		acme := row(t, page, `<tr data-endpoint="acme-shop"`)
		require.Contains(t, acme, "<td>file</td>")
		require.Contains(t, acme, "<code>https://acme.example/hooks</code>")
		require.Contains(t, acme, "<td>hmac</td>")
		require.Contains(t, acme, `<td class="n">1</td>`, "one secret")
		require.Contains(t, acme, `<td class="n">4</td>`, "max_in_flight")
		require.Contains(t, acme, `<td class="n">10/s</td>`)
		require.Contains(t, acme, `<td class="health">ok</td>`)
		require.NotEmpty(t, button(acme, "/ui/endpoints/acme-shop/pause"))

		globex := row(t, page, `<tr data-endpoint="globex"`)
		require.Contains(t, globex, "<td>api</td>")
		require.Contains(t, globex, "<code>https://globex.example/in?x=&lt;b&gt;</code>")
		require.Contains(t, globex, "<td>ed25519</td>")
		require.Contains(t, globex, `2 <span class="muted">(1 expired)</span>`)
		require.Contains(t, globex, `<td class="n">–</td>`, "no max_in_flight")
		require.Contains(t, globex, `<td class="n">2.5/s</td>`)

		for _, secret := range []string{fileSecret, apiSecret, expiredSecret} {
			require.NotContains(t, page, secret)
			require.NotContains(t, page, strings.TrimPrefix(strings.TrimPrefix(secret, "whsec_"), "whsk_"))
		}
	})

	t.Run("PauseAndResumeAnEndpoint", func(t *testing.T) {
		_, page := b.get(t, "/ui/")
		res, _ := b.post(t, "/ui/endpoints/globex/pause", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		paused, err := b.store.IsPaused(ctx, store.PauseEndpoint, "globex")
		require.NoError(t, err)
		require.True(t, paused)
		_, page = b.get(t, "/ui/")
		require.Contains(t, page, "Paused endpoint globex: no attempt of its notifications starts until it is resumed")
		globex := row(t, page, `<tr data-endpoint="globex"`)
		require.Contains(t, globex, `<span class="tag paused" title="paused since 2026-03-01 12:00:00.000 UTC">paused</span>`)
		require.NotEmpty(t, button(globex, "/ui/endpoints/globex/resume"))

		res, _ = b.post(t, "/ui/endpoints/globex/resume", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		paused, err = b.store.IsPaused(ctx, store.PauseEndpoint, "globex")
		require.NoError(t, err)
		require.False(t, paused)

		status, body := b.post(t, "/ui/endpoints/nobody/pause", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusNotFound, status.StatusCode)
		require.Contains(t, body, "No such endpoint.")
	})

	t.Run("EnableADisabledEndpoint", func(t *testing.T) {
		// Every attempt fails from 12:00; at 12:02, past its one-minute
		// disable_after, the endpoint is disabled and its notification
		// waits, parked.
		_, err := b.store.EndpointFailed(ctx, "globex", time.Minute)
		require.NoError(t, err)
		_, page := b.get(t, "/ui/")
		require.Contains(t, row(t, page, `<tr data-endpoint="globex"`),
			`<td class="health"><span class="bad">failing</span> since 2026-03-01 12:00:00.000 UTC</td>`)
		b.clock.Advance(2 * time.Minute)
		disabled, err := b.store.EndpointFailed(ctx, "globex", time.Minute)
		require.NoError(t, err)
		require.True(t, disabled)
		b.park(t, "waits-for-globex", store.PauseDisabled, "globex")

		_, page = b.get(t, "/ui/")
		globex := row(t, page, `<tr data-endpoint="globex"`)
		require.Contains(t, globex, `<span class="tag disabled">disabled</span> at 2026-03-01 12:02:00.000 UTC`)
		require.NotEmpty(t, button(globex, "/ui/endpoints/globex/enable"))
		require.Empty(t, button(row(t, page, `<tr data-endpoint="acme-shop"`), "/ui/endpoints/acme-shop/enable"))

		res, _ := b.post(t, "/ui/endpoints/globex/enable", url.Values{}, b.server.URL)
		require.Equal(t, http.StatusForbidden, res.StatusCode, "no CSRF token")
		res, _ = b.post(t, "/ui/endpoints/globex/enable", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		require.Equal(t, "/ui/?endpoint=globex#endpoint-globex", res.Header.Get("Location"))

		_, page = b.get(t, "/ui/")
		require.Contains(t, page, "Enabled endpoint globex: the 1 notification that waited while it was disabled start now.")
		globex = row(t, page, `<tr data-endpoint="globex"`)
		require.Contains(t, globex, `<td class="health">ok</td>`)
		require.Empty(t, button(globex, "/ui/endpoints/globex/enable"))
		n, err := b.store.Get(ctx, "waits-for-globex")
		require.NoError(t, err)
		require.False(t, store.Parked(n), "the waiting notification is due again")
		require.Equal(t, 0, n.Attempts)

		_, page = b.get(t, "/ui/")
		require.NotContains(t, page, `id="flash"`, "the message shows once")
	})
}

func TestPauseTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testToken)
	b.login(t)
	b.bury(t, "d1", "orders", `{}`, "x")
	_, page := b.get(t, "/ui/")
	orders := row(t, page, `<tr data-topic="orders">`)
	require.NotContains(t, orders, "paused")
	require.NotEmpty(t, button(orders, "/ui/topics/orders/pause"))

	res, body := b.post(t, "/ui/topics/orders/pause", url.Values{}, b.server.URL)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Contains(t, body, "Nothing was changed")
	res, _ = b.post(t, "/ui/topics/orders/pause", url.Values{"csrf": {csrf(t, page)}}, "https://evil.example")
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	paused, err := b.store.IsPaused(ctx, store.PauseTopic, "orders")
	require.NoError(t, err)
	require.False(t, paused, "a refused form paused the topic")

	res, _ = b.post(t, "/ui/topics/orders/pause", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	paused, err = b.store.IsPaused(ctx, store.PauseTopic, "orders")
	require.NoError(t, err)
	require.True(t, paused)
	b.park(t, "o1", store.PauseTopic, "orders")

	// A paused topic with nothing stored is listed too, to be resumed.
	res, _ = b.post(t, "/ui/topics/quiet/pause", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)

	_, page = b.get(t, "/ui/")
	require.Contains(t, page, `<p class="flash" id="flash" role="status">Paused topic quiet: `)
	orders = row(t, page, `<tr data-topic="orders">`)
	require.Contains(t, orders, `<span class="tag paused" title="paused since 2026-03-01 12:00:00.000 UTC">paused</span>`)
	require.NotEmpty(t, button(orders, "/ui/topics/orders/resume"))
	require.Empty(t, button(orders, "/ui/topics/orders/pause"))
	require.NotEmpty(t, button(row(t, page, `<tr data-topic="quiet">`), "/ui/topics/quiet/resume"))

	res, _ = b.post(t, "/ui/topics/orders/resume", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	paused, err = b.store.IsPaused(ctx, store.PauseTopic, "orders")
	require.NoError(t, err)
	require.False(t, paused)
	_, page = b.get(t, "/ui/")
	require.Contains(t, page, "Resumed topic orders: the 1 notification that waited while it was paused start now.")
	orders = row(t, page, `<tr data-topic="orders">`)
	require.NotContains(t, orders, "paused")
	require.NotEmpty(t, button(orders, "/ui/topics/orders/pause"))
	n, err := b.store.Get(ctx, "o1")
	require.NoError(t, err)
	require.False(t, store.Parked(n))

	res, body = b.post(t, "/ui/topics/Not%20A%20Topic/pause", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, body, "topic")
}

// TestLinksFindTheRowsPage: with more endpoints and topics than the
// overview shows on a page, a notification's link to its endpoint, and the
// overview a pause or resume returns to, open the page that holds the row
// the link names, not the first.
func TestLinksFindTheRowsPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testToken)
	b.login(t)
	b.crowd(t, 150, 149) // and the file's acme-shop, first
	n := heraldtest.Notification(t, "to-e140", b.clock.Now(), heraldtest.Endpoint("e140"), heraldtest.Delay(time.Hour))
	_, _, err := b.store.Enqueue(ctx, n, false)
	require.NoError(t, err)

	// follow gets the overview a link leads to and requires the row its
	// fragment names there.
	follow := func(t *testing.T, link string) string {
		t.Helper()
		path, fragment, ok := strings.Cut(html.UnescapeString(link), "#")
		require.True(t, ok, "%s names no row", link)
		status, page := b.get(t, path)
		require.Equal(t, http.StatusOK, status)
		require.True(t, strings.Contains(page, `id="`+fragment+`"`), "%s does not lead to its row", link)
		return page
	}

	_, page := b.get(t, "/ui/notifications/to-e140")
	m := regexp.MustCompile(`<dt>Endpoint</dt><dd><a href="([^"]+)">e140</a>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no link to the endpoint")
	follow(t, m[1])

	for _, action := range []string{"/ui/endpoints/e140/pause", "/ui/endpoints/e140/resume", "/ui/topics/t140/pause"} {
		res, _ := b.post(t, action, url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusSeeOther, res.StatusCode, action)
		page = follow(t, res.Header.Get("Location"))
		require.Contains(t, page, `id="flash"`, action)
	}
}
