package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// shared is the package's redis-server, started by the first test that
// needs one (fuzz workers never do); tests isolate by namespace, and tests
// that break their server start their own.
var shared struct {
	once sync.Once
	srv  *redistest.Server
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	redistest.ClearConfigEnv()
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
		_ = os.RemoveAll(shared.dir)
	}
	if code == 0 {
		code = redistest.CheckLeaks()
	}
	os.Exit(code)
}

func sharedServer(tb testing.TB) *redistest.Server {
	tb.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "herald-api-redis")
		if shared.err == nil {
			shared.srv, shared.err = redistest.StartDir(shared.dir, redistest.Options{})
		}
	})
	require.NoError(tb, shared.err)
	return shared.srv
}

// testPolicies has a fast policy for pull work and topics that use it.
func testPolicies(tb testing.TB) *policy.Set {
	tb.Helper()
	set, err := policy.NewSet(map[string]policy.Policy{
		"fast": {Backoff: []notify.Duration{0, notify.Duration(50 * time.Millisecond), notify.Duration(50 * time.Millisecond)},
			TTR: notify.Duration(30 * time.Second)},
		"once":    {Backoff: []notify.Duration{0}},
		"patient": {Backoff: []notify.Duration{0, 0, 0}, HonorRetryAfter: true},
	}, map[string]policy.Topic{
		"jobs":   {Channel: notify.ChannelPull, Policy: "fast"},
		"single": {Channel: notify.ChannelPull, Policy: "once"},
		"orders": {Channel: notify.ChannelWebhook, Target: "https://merchant.test/notify"},
	})
	require.NoError(tb, err)
	return set
}

type testBundle struct {
	api      *api.Server
	http     *httptest.Server
	store    *store.Store
	metrics  *metrics.Metrics
	policies *policy.Set
	token    string
}

// setup serves an API over a fresh namespace of the shared server. Fields
// set in cfg are kept.
func setup(t testing.TB, cfg api.Config) *testBundle {
	t.Helper()
	return setupOn(t, sharedServer(t).Client(t), cfg)
}

func setupOn(t testing.TB, rdb redis.UniversalClient, cfg api.Config) *testBundle {
	t.Helper()
	return setupIn(t, rdb, redistest.Namespace(t), cfg)
}

// setupIn is setupOn in namespace ns: a second API process of a deployment
// when ns is another bundle's.
func setupIn(t testing.TB, rdb redis.UniversalClient, ns string, cfg api.Config) *testBundle {
	t.Helper()
	st, err := store.New(&store.Config{Client: rdb, Namespace: ns, Shards: 4, Logger: testLogger(t)})
	require.NoError(t, err)
	b := &testBundle{store: st, policies: testPolicies(t), metrics: metrics.New(&metrics.Config{Store: st})}
	cfg.Store = st
	cfg.PoliciesFunc = func() *policy.Set { return b.policies }
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = b.metrics.Handler()
		cfg.Observer = b.metrics
	}
	if len(cfg.Tokens) > 0 {
		b.token = cfg.Tokens[0]
	}
	b.api, err = api.New(&cfg)
	require.NoError(t, err)
	b.http = httptest.NewServer(b.api)
	t.Cleanup(func() {
		b.http.Close()
		_ = b.api.Close()
	})
	return b
}

// testLogger routes logs to t.Log.
func testLogger(tb testing.TB) *slog.Logger { return countingLogger(tb, nil) }

// countingLogger is testLogger that also counts its lines in lines, when
// that is not nil.
func countingLogger(tb testing.TB, lines *atomic.Int64) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{tb: tb, lines: lines}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// recordingLogger is testLogger that also keeps its lines in lines.
func recordingLogger(tb testing.TB, lines *logLines) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{tb: tb, kept: lines}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// logLines are the lines a recordingLogger wrote; safe for concurrent use.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

// all returns a copy of the lines so far.
func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

type tWriter struct {
	tb    testing.TB
	lines *atomic.Int64
	kept  *logLines
}

func (w tWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(p))
	if w.lines != nil {
		w.lines.Add(1)
	}
	if w.kept != nil {
		w.kept.add(string(p))
	}
	return len(p), nil
}

// do sends a request with the bundle's token and returns the status and
// body. body is sent as is when it is a string or []byte, as JSON otherwise.
func (b *testBundle) do(t testing.TB, method, path string, body any) (int, []byte) {
	t.Helper()
	status, out, err := b.call(method, path, body)
	require.NoError(t, err)
	return status, out
}

// call is do for goroutines, which must not stop the test themselves.
func (b *testBundle) call(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.http.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	resp, err := b.http.Client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// expect is must for goroutines: it returns an error instead of stopping
// the test.
func expect[T any](b *testBundle, want int, method, path string, body any) (T, error) {
	var v T
	status, out, err := b.call(method, path, body)
	if err != nil {
		return v, err
	}
	if status != want {
		return v, fmt.Errorf("%s %s: status %d, want %d: %s", method, path, status, want, out)
	}
	if len(out) > 0 {
		err = json.Unmarshal(out, &v)
	}
	return v, err
}

// must sends a request, requires status, and decodes the body into T.
func must[T any](t testing.TB, b *testBundle, want int, method, path string, body any) T {
	t.Helper()
	status, out := b.do(t, method, path, body)
	require.Equal(t, want, status, "%s %s: %s", method, path, out)
	var v T
	if len(out) > 0 {
		require.NoError(t, json.Unmarshal(out, &v), "%s", out)
	}
	return v
}

// apiError is the error body as a client reads it.
type apiError struct {
	Error api.Error `json:"error"`
}

// requireError sends a request and requires an error answer with status,
// code and field.
func (b *testBundle) requireError(t testing.TB, want int, code, field, method, path string, body any) api.Error {
	t.Helper()
	e := must[apiError](t, b, want, method, path, body)
	require.Equal(t, code, e.Error.Code, "%+v", e.Error)
	require.Equal(t, field, e.Error.Field, "%+v", e.Error)
	require.NotEmpty(t, e.Error.Message)
	return e.Error
}

type reserved struct {
	Notifications []notify.Notification `json:"notifications"`
}

// enqueueJobs enqueues count pull notifications job0..job{count-1} of topic
// jobs, due now, through the batch route.
func (b *testBundle) enqueueJobs(t testing.TB, count int) {
	t.Helper()
	for start := 0; start < count; start += store.MaxBatch {
		var items []map[string]any
		for i := start; i < min(count, start+store.MaxBatch); i++ {
			items = append(items, map[string]any{"id": fmt.Sprintf("job%d", i), "topic": "jobs", "payload": map[string]int{"n": i}})
		}
		res := must[batchResults](t, b, http.StatusOK, "POST", "/v1/notifications/batch", map[string]any{"notifications": items})
		for _, r := range res.Results {
			require.Equal(t, http.StatusCreated, r.Status, "%+v", r)
		}
	}
}

type statsBody struct {
	Topics map[string]store.TopicStats `json:"topics"`
	Totals store.TopicStats            `json:"totals"`
}

type batchResults struct {
	Results []struct {
		ID     string     `json:"id"`
		Status int        `json:"status"`
		Error  *api.Error `json:"error"`
	} `json:"results"`
}
