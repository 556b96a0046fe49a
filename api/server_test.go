package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Tokens: []string{"s3cret-one", "s3cret-two"}})
	send := func(t *testing.T, method, path, auth string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, b.http.URL+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := b.http.Client().Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	tests := []struct {
		name, method, path, auth string
		want                     int
	}{
		{"NoToken", "GET", "/v1/stats", "", http.StatusUnauthorized},
		{"WrongToken", "GET", "/v1/stats", "Bearer s3cret", http.StatusUnauthorized},
		{"LongerToken", "GET", "/v1/stats", "Bearer s3cret-one-and-more", http.StatusUnauthorized},
		{"NotBearer", "GET", "/v1/stats", "Basic czNjcmV0LW9uZQ==", http.StatusUnauthorized},
		{"FirstToken", "GET", "/v1/stats", "Bearer s3cret-one", http.StatusOK},
		{"SecondToken", "GET", "/v1/stats", "Bearer s3cret-two", http.StatusOK},
		{"SchemeIsCaseInsensitive", "GET", "/v1/stats", "bearer s3cret-two", http.StatusOK},
		{"GuardsEveryV1Route", "POST", "/v1/notifications", "", http.StatusUnauthorized},
		{"UnknownIDIsNotLeakedBeforeAuth", "GET", "/v1/notifications/x", "", http.StatusUnauthorized},
		{"HealthIsOpen", "GET", "/healthz", "", http.StatusOK},
		{"ReadyIsOpen", "GET", "/readyz", "", http.StatusOK},
		{"MetricsIsOpen", "GET", "/metrics", "", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := send(t, tt.method, tt.path, tt.auth)
			require.Equal(t, tt.want, resp.StatusCode)
			if tt.want == http.StatusUnauthorized {
				require.Equal(t, `Bearer realm="herald"`, resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
	// With a token the same request gets through to its answer.
	b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "GET", "/v1/notifications/x", nil)
}

// TestCrossOriginBrowsersRefused: with no tokens configured, a page on
// another site that an operator's browser opens must not make the API act:
// not enqueue a webhook that Herald signs and sends where the page likes
// (a no-cors POST of text/plain needs no preflight), nor pause a topic.
// The dashboard's own pages, and programs, which send no Origin, pass.
func TestCrossOriginBrowsersRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	send := func(method, path, body, site string) (int, string) {
		req, err := http.NewRequest(method, b.http.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if site != "" { // what a browser adds
			req.Header.Set("Sec-Fetch-Site", site)
			req.Header.Set("Origin", map[string]string{"cross-site": "https://evil.example", "same-origin": b.http.URL}[site])
			req.Header.Set("Content-Type", "text/plain;charset=UTF-8")
		}
		res, err := b.http.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(out)
	}
	forged := `{"id":"forged","topic":"orders","channel":"webhook","target":"https://collect.example/","payload":{"paid":true}}`
	status, out := send(http.MethodPost, "/v1/notifications", forged, "cross-site")
	require.Equal(t, http.StatusForbidden, status, out)
	require.Contains(t, out, `"code":"forbidden"`)
	status, out = send(http.MethodPost, "/v1/topics/orders/pause", "", "cross-site")
	require.Equal(t, http.StatusForbidden, status, out)
	status, _ = send(http.MethodGet, "/v1/notifications/forged", "", "cross-site")
	require.Equal(t, http.StatusNotFound, status, "a safe method passes; nothing was stored")
	paused, err := b.store.IsPaused(t.Context(), store.PauseTopic, "orders")
	require.NoError(t, err)
	require.False(t, paused)

	status, out = send(http.MethodPost, "/v1/notifications", forged, "same-origin")
	require.Equal(t, http.StatusCreated, status, out)
	status, out = send(http.MethodPost, "/v1/topics/orders/pause", "", "")
	require.Equal(t, http.StatusOK, status, out)
}

func TestMinimalConfig(t *testing.T) {
	t.Parallel()
	st, err := store.New(&store.Config{Client: sharedServer(t).Client(t), Namespace: redistest.Namespace(t)})
	require.NoError(t, err)
	srv, err := api.New(&api.Config{Store: st, Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	b := &testBundle{api: srv, store: st}
	b.http = httptest.NewServer(srv)
	t.Cleanup(b.http.Close)
	rec := must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"topic": "x", "channel": "pull"})
	require.Equal(t, "default", rec.Policy, "the built-in default policy")
	b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "GET", "/metrics", nil)

	_, err = api.New(&api.Config{})
	require.Error(t, err, "a store is required")
	_, err = api.New(&api.Config{Store: st, Tokens: []string{""}})
	require.Error(t, err, "an empty token would let anyone in")
	_, err = api.New(&api.Config{Store: st, Hosts: []string{"herald.internal", "herald.internal:8080"}})
	require.ErrorContains(t, err, "Hosts[1]")
}

// TestRedisOutage stops the API's Redis: every route that needs it answers
// 503 promptly, health and metrics keep answering, and the API recovers
// when Redis is back.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	opts := srv.Options()
	opts.DialerRetries = 1 // a refused dial fails at once
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	b := setupOn(t, rdb, api.Config{Timeout: 2 * time.Second})
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "before", "topic": "jobs"})

	srv.Stop()
	routes := []struct{ method, path, body string }{
		{"POST", "/v1/notifications", `{"topic":"jobs"}`},
		{"POST", "/v1/notifications/batch", `{"notifications":[{"topic":"jobs"}]}`},
		{"GET", "/v1/notifications/before", ""},
		{"DELETE", "/v1/notifications/before", ""},
		{"POST", "/v1/topics/jobs/reserve?wait=1s", ""},
		{"POST", "/v1/notifications/before/ack", `{"receipt":"r"}`},
		{"POST", "/v1/notifications/before/nack", `{"receipt":"r"}`},
		{"GET", "/v1/dead", ""},
		{"POST", "/v1/dead/replay", `{"topic":"jobs"}`},
		{"DELETE", "/v1/dead?topic=jobs", ""},
		{"GET", "/v1/stats", ""},
		{"GET", "/readyz", ""},
	}
	for _, rt := range routes {
		start := time.Now()
		var body any
		if rt.body != "" {
			body = rt.body
		}
		b.requireError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "", rt.method, rt.path, body)
		require.Less(t, time.Since(start), 10*time.Second, "%s %s must not hang", rt.method, rt.path)
	}
	must[map[string]string](t, b, http.StatusOK, "GET", "/healthz", nil)
	status, _ := b.do(t, "GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, status)

	require.NoError(t, srv.Restart())
	require.Eventually(t, func() bool {
		status, _ := b.do(t, "GET", "/readyz", nil)
		return status == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "after", "topic": "jobs"})
}

// TestServeShutsDownGracefully ends Serve's context while a long poll
// waits: the poll answers at once with nothing, and Serve returns nil.
func TestServeShutsDownGracefully(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.api.Serve(ctx, l) }()

	polled := make(chan error, 1)
	start := time.Now()
	go func() {
		resp, err := http.Post("http://"+l.Addr().String()+"/v1/topics/jobs/reserve?wait=30s", "application/json", nil)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
		polled <- err
	}()
	// A waiting poll has subscribed to the namespace's wake-ups.
	rdb := sharedServer(t).Client(t)
	require.Eventually(t, func() bool {
		n, err := rdb.PubSubNumSub(context.Background(), b.store.Namespace()+":wake").Result()
		return err == nil && n[b.store.Namespace()+":wake"] == 1
	}, 5*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-polled)
	require.NoError(t, <-served)
	require.Less(t, time.Since(start), 10*time.Second, "the long poll did not hold up the shutdown")
}

// TestNotReplicatedSaysSo: with redis.wait_replicas, a change that reached
// Redis but not enough replicas in time is 503, as DESIGN asks, and says
// so: the store answered, and the change is on the master, so a client
// reads before it tries again rather than look for an outage.
func TestNotReplicatedSaysSo(t *testing.T) {
	t.Parallel()
	st, err := store.New(&store.Config{Client: sharedServer(t).Client(t), Namespace: redistest.Namespace(t), Shards: 4,
		WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond, Logger: testLogger(t)}) // there is no replica
	require.NoError(t, err)
	srv, err := api.New(&api.Config{Store: st, Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	b := &testBundle{api: srv, store: st, http: httptest.NewServer(srv)}
	t.Cleanup(b.http.Close)

	e := b.requireError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "", "POST", "/v1/notifications",
		map[string]any{"id": "unconfirmed", "topic": "x", "channel": "pull"})
	require.Contains(t, e.Message, "replicas")
	rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/unconfirmed", nil)
	require.Equal(t, notify.StateScheduled, rec.State, "the master has it")
}

// TestHostsWithoutTokens: with no tokens, a web page the operator opens at
// http://evil.example:8080 can point evil.example at 127.0.0.1 (DNS
// rebinding); its scripts are then same-origin with the API, so only the
// Host they send, evil.example:8080, tells them from the operator. /v1 and
// the dashboard answer IP addresses, localhost and the listed names, and
// refuse other names before any handler runs; the probes and /metrics
// answer any name, as a Prometheus scraping a service name needs.
func TestHostsWithoutTokens(t *testing.T) {
	t.Parallel()
	var dashboard atomic.Int32
	b := setup(t, api.Config{Hosts: []string{"Herald.Internal", "herald_api"}, UI: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		dashboard.Add(1)
		_, _ = io.WriteString(w, "dashboard")
	})})
	port := b.http.Listener.Addr().(*net.TCPAddr).Port
	enqueue := func(id string) string { return `{"id":"` + id + `","topic":"jobs"}` }

	t.Run("RefusedName", func(t *testing.T) {
		for i, host := range []string{"evil.example:8080", "evil.example", "EVIL.example:8080", "127.0.0.1.evil.example",
			"localhost.evil.example:8080", "sub.herald.internal", "herald.internal.evil.example"} {
			id := fmt.Sprintf("rebound-%d", i)
			status, _, out := b.sendFor(t, host, "", "POST", "/v1/notifications", enqueue(id))
			require.Equal(t, http.StatusForbidden, status, "%s: %s", host, out)
			var e apiError
			require.NoError(t, json.Unmarshal([]byte(out), &e), out)
			require.Equal(t, api.CodeHostNotAllowed, e.Error.Code)
			name, _, _ := strings.Cut(strings.ToLower(host), ":")
			require.Contains(t, e.Error.Message, `"`+name+`"`, "the message names the host")
			require.Contains(t, e.Error.Message, "api.tokens")
			require.Contains(t, e.Error.Message, "api.hosts")
			_, err := b.store.Get(t.Context(), id)
			require.ErrorIs(t, err, notify.ErrNotFound, "%s: nothing is stored", host)
		}
		// Reading, and acting on what is stored, are refused alike.
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "secret", "topic": "jobs"})
		for _, rt := range []struct{ method, path string }{
			{"GET", "/v1/notifications/secret"}, {"GET", "/v1/stats"}, {"DELETE", "/v1/dead?topic=jobs"},
			{"POST", "/v1/topics/jobs/pause"}, {"POST", "/v1/topics/jobs/reserve?wait=0s"},
		} {
			status, _, out := b.sendFor(t, "evil.example:8080", "", rt.method, rt.path, "")
			require.Equal(t, http.StatusForbidden, status, "%s %s: %s", rt.method, rt.path, out)
			require.Contains(t, out, `"code":"host_not_allowed"`)
		}
		paused, err := b.store.IsPaused(t.Context(), store.PauseTopic, "jobs")
		require.NoError(t, err)
		require.False(t, paused)
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/secret", nil)
		require.Equal(t, notify.StateScheduled, rec.State, "not reserved")

		before := dashboard.Load()
		for _, path := range []string{"/ui/", "/ui/dead", "/ui"} {
			status, ctype, out := b.sendFor(t, "evil.example:8080", "", "GET", path, "")
			require.Equal(t, http.StatusForbidden, status, "%s: %s", path, out)
			require.True(t, strings.HasPrefix(ctype, "text/plain"), ctype)
			require.Contains(t, out, `host "evil.example"`)
			require.Contains(t, out, "api.hosts")
		}
		status, _, _ := b.sendFor(t, "evil.example:8080", "", "POST", "/ui/dead/purge", "topic=jobs")
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, before, dashboard.Load(), "the dashboard never ran")
	})

	t.Run("AnsweredName", func(t *testing.T) {
		for i, host := range []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("[::1]:%d", port), "[::1]",
			fmt.Sprintf("localhost:%d", port), "LocalHost", "localhost.", "10.1.2.3:8080",
			"herald.internal:8080", "HERALD.internal.", "herald_api:8080"} {
			id := fmt.Sprintf("local-%d", i)
			status, _, out := b.sendFor(t, host, "", "POST", "/v1/notifications", enqueue(id))
			require.Equal(t, http.StatusCreated, status, "%s: %s", host, out)
			_, err := b.store.Get(t.Context(), id)
			require.NoError(t, err, host)
			status, _, out = b.sendFor(t, host, "", "GET", "/ui/", "")
			require.Equal(t, http.StatusOK, status, "%s: %s", host, out)
			require.Equal(t, "dashboard", out)
		}
	})

	t.Run("ProbesAnswerAnyName", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			status, _, out := b.sendFor(t, "evil.example:8080", "", "GET", path, "")
			require.Equal(t, http.StatusOK, status, "%s: %s", path, out)
		}
	})
}

// TestHostsAnyName: "*" answers every name without tokens, for a proxy
// in front that checks it.
func TestHostsAnyName(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Hosts: []string{api.AnyHost}})
	status, _, out := b.sendFor(t, "herald.example.com", "", "POST", "/v1/notifications", `{"id":"proxied","topic":"jobs"}`)
	require.Equal(t, http.StatusCreated, status, out)
}

// TestHostsWithTokens: with tokens the token is the guard, whatever the
// name: a rebinding page does not have one.
func TestHostsWithTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Tokens: []string{"s3cret"}, UI: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "the dashboard's sign-in")
	})})
	for _, tt := range []struct {
		name, auth, path string
		want             int
	}{
		{"RightToken", "Bearer s3cret", "/v1/stats", http.StatusOK},
		{"NoToken", "", "/v1/stats", http.StatusUnauthorized},
		{"DashboardAsksItsOwn", "", "/ui/", http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, _, out := b.sendFor(t, "evil.example:8080", tt.auth, "GET", tt.path, "")
			require.Equal(t, tt.want, status, out)
		})
	}
}

// sendFor sends a request naming host (the connection is to 127.0.0.1
// whatever the name) with auth as its Authorization, when set, and returns
// the answer's status, content type and body.
func (b *testBundle) sendFor(t *testing.T, host, auth, method, path, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, b.http.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Host = host
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := b.http.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header.Get("Content-Type"), string(out)
}

func TestValidateHost(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"herald.internal", true},
		{"herald", true},
		{"herald-api_1.svc.cluster.local.", true},
		{"*", true},
		{"", false},
		{"herald.internal:8080", false},
		{"http://herald.internal", false},
		{"herald.internal/ui", false},
		{"*.herald.internal", false},
		{"[::1]", false},
		{"herald..internal", false},
		{" herald", false},
		{strings.Repeat("a", 64), false},
	} {
		err := api.ValidateHost(tt.name)
		if tt.ok {
			require.NoError(t, err, tt.name)
			continue
		}
		require.ErrorContains(t, err, fmt.Sprintf("not %q", tt.name))
	}
}
