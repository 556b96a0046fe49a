package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redisconf"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
)

// serving is herald serve running in the background.
type serving struct {
	url        string
	out, logs  *heraldtest.Buffer
	cancel     context.CancelFunc
	done       chan error
	stopOnce   sync.Once
	stoppedErr error
	// token, when set, is the bearer token every call sends.
	token string
}

var apiLineRe = regexp.MustCompile(`API on (http://\S+) `)

// startServe runs herald serve with config and args until the test ends or
// stop is called, and waits until its API listens.
func startServe(t *testing.T, config string, args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{out: &heraldtest.Buffer{}, logs: &heraldtest.Buffer{}, cancel: cancel, done: make(chan error, 1)}
	c := newApp(Deps{Out: s.out, Err: s.logs})
	go func() { s.done <- execute(ctx, c, append([]string{"--config", config, "serve"}, args...)) }()
	t.Cleanup(func() { _ = s.stop() })
	waitFor(t, 10*time.Second, "the API to listen", func() bool {
		select {
		case err := <-s.done:
			s.done <- err
			return true
		default:
		}
		return apiLineRe.MatchString(s.out.String())
	})
	m := apiLineRe.FindStringSubmatch(s.out.String())
	if m == nil {
		require.FailNow(t, "serve ended", "error %v, logs:\n%s", s.stop(), s.logs.String())
	}
	s.url = m[1]
	return s
}

// stop ends serve as SIGINT would and returns its error.
func (s *serving) stop() error {
	s.stopOnce.Do(func() {
		s.cancel()
		s.stoppedErr = <-s.done
	})
	return s.stoppedErr
}

// call makes an HTTP request to the API and decodes its JSON answer into
// out, when out is not nil.
func (s *serving) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	status, b := s.send(t, method, path, body)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), "%s %s: %s", method, path, b)
	}
	return status
}

// send makes an HTTP request to the API and returns its status and body.
func (s *serving) send(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, b
}

func TestServe(t *testing.T) {
	t.Parallel()

	t.Run("DeliversWhatIsEnqueuedOverHTTP", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var got []http.Header
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, r.Header.Clone())
			mu.Unlock()
			_, _ = io.WriteString(w, "ok")
		}))
		t.Cleanup(rcv.Close)
		e := newEnv(t, "")
		s := startServe(t, e.config)

		status := s.call(t, http.MethodPost, "/v1/notifications",
			fmt.Sprintf(`{"id": "srv-1", "topic": "merchant-notify", "target": %q, "payload": {"paid": true}}`, rcv.URL), nil)
		require.Equal(t, http.StatusCreated, status)
		waitFor(t, 10*time.Second, "the delivery", func() bool {
			var n notify.Notification
			s.call(t, http.MethodGet, "/v1/notifications/srv-1", "", &n)
			return n.State == notify.StateSucceeded
		})
		mu.Lock()
		require.Len(t, got, 1)
		require.Equal(t, "srv-1", got[0].Get("webhook-id"))
		mu.Unlock()

		var stats api.Stats
		require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/v1/stats", "", &stats))
		require.EqualValues(t, 1, stats.Topics["merchant-notify"].SucceededTotal)
		require.NoError(t, s.stop(), "a clean shutdown exits 0")
		require.Contains(t, s.logs.String(), "api.tokens is empty")
	})

	t.Run("ShortTokenIsWarnedOf", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		e.config = writeConfig(t, strings.Replace(readFile(t, e.config), `api: {listen: "127.0.0.1:0"}`,
			`api: {listen: "127.0.0.1:0", tokens: ["a-long-random-token-0123456789abcdef", "changeme"]}`, 1))
		s := startServe(t, e.config)
		require.NoError(t, s.stop())
		logs := s.logs.String()
		require.Contains(t, logs, "short bearer token can be guessed")
		require.Contains(t, logs, "token=api.tokens[1] length=8")
		require.NotContains(t, logs, "api.tokens[0]")
		require.NotContains(t, logs, "changeme", "the token itself is never logged")
	})

	t.Run("CredentialHeadersStillSent", func(t *testing.T) {
		t.Parallel()
		got := make(chan http.Header, 1)
		rcv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
		t.Cleanup(rcv.Close)
		s := startServe(t, newEnv(t, "").config)
		var n notify.Notification
		require.Equal(t, http.StatusCreated, s.call(t, http.MethodPost, "/v1/notifications", fmt.Sprintf(`{"id": "cred-1",
			"topic": "merchant-notify", "target": %q, "headers": {"Authorization": "Bearer s3cr3t"}}`, rcv.URL), &n))
		require.Equal(t, "[redacted]", n.Headers["Authorization"], "the answer hides it")
		select {
		case h := <-got:
			require.Equal(t, "Bearer s3cr3t", h.Get("Authorization"), "the receiver gets it")
		case <-time.After(10 * time.Second):
			require.FailNow(t, "not delivered")
		}
		require.NotContains(t, s.logs.String(), "s3cr3t")
	})

	t.Run("DeadRetention", func(t *testing.T) {
		t.Parallel()
		refused := make(chan struct{}, 1)
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadRequest) // permanent: dead at once
			refused <- struct{}{}
		}))
		t.Cleanup(rcv.Close)
		e := newEnv(t, fmt.Sprintf("redis: {addrs: [%q]}\ndead_retention: 300ms", server.Addr))
		s := startServe(t, e.config)
		require.NoError(t, e.run(t, "enqueue", "--topic", "merchant-notify", "--id", "dies", "--target", rcv.URL).err)
		select {
		case <-refused:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "not attempted")
		}
		waitFor(t, 10*time.Second, "the dead letter to be swept", func() bool {
			return s.call(t, http.MethodGet, "/v1/notifications/dies", "", nil) == http.StatusNotFound
		})
	})

	t.Run("RoleAPIOnly", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		s := startServe(t, e.config, "--role", "api")
		require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/readyz", "", nil))
		require.NotContains(t, s.logs.String(), "dispatcher started")
		require.NoError(t, s.stop())
	})

	t.Run("RoleDispatcherOnly", func(t *testing.T) {
		t.Parallel()
		delivered := make(chan string, 1)
		rcv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			delivered <- r.Header.Get("webhook-id")
		}))
		t.Cleanup(rcv.Close)
		e := newEnv(t, "")
		ctx, cancel := context.WithCancel(context.Background())
		out, done := &heraldtest.Buffer{}, make(chan error, 1)
		go func() {
			done <- execute(ctx, newApp(Deps{Out: out, Err: io.Discard}), []string{"--config", e.config, "serve", "--role", "dispatcher"})
		}()
		waitFor(t, 10*time.Second, "the dispatcher", func() bool { return strings.Contains(out.String(), "dispatcher running") })
		metricsURL := regexp.MustCompile(`http://\S+/metrics`).FindString(out.String())

		require.NoError(t, e.run(t, "enqueue", "--topic", "merchant-notify", "--id", "disp-1", "--target", rcv.URL).err)
		select {
		case id := <-delivered:
			require.Equal(t, "disp-1", id)
		case <-time.After(10 * time.Second):
			require.FailNow(t, "not delivered")
		}
		waitFor(t, 10*time.Second, "the attempt's metrics", func() bool {
			res, err := http.Get(metricsURL)
			require.NoError(t, err)
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			return strings.Contains(string(b), `herald_attempts_total{channel="webhook",outcome="success",topic="merchant-notify"} 1`) &&
				strings.Contains(string(b), "\nherald_redis_memory_used_bytes ")
		})
		res, err := http.Get(strings.TrimSuffix(metricsURL, "/metrics") + "/readyz")
		require.NoError(t, err)
		var ready struct {
			Details struct {
				Memory struct {
					UsedBytes int64 `json:"used_bytes"`
				} `json:"memory"`
			} `json:"details"`
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&ready))
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Positive(t, ready.Details.Memory.UsedBytes, "how full Redis is, as the API's /readyz says")
		help := e.run(t, "serve", "--help")
		require.NoError(t, help.err)
		require.Contains(t, strings.Join(strings.Fields(help.out), " "),
			"A dispatcher-only process serves /metrics, /healthz and /readyz on api.listen", "as it does")
		cancel()
		require.NoError(t, <-done)
		require.NotContains(t, out.String(), "API on")
	})

	t.Run("BadRole", func(t *testing.T) {
		t.Parallel()
		r := newEnv(t, "").run(t, "serve", "--role", "everything")
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "--role must be api, dispatcher or all")
	})

	t.Run("PortTaken", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		r := newEnv(t, "").run(t, "serve", "--listen", l.Addr().String())
		require.Equal(t, 1, r.code())
		require.ErrorContains(t, r.err, "api.listen")
	})
}

// TestEmbedded runs serve with no Redis address: the API works on the
// embedded Redis, the other commands reach it at the address serve logs,
// and it ends with serve. TestTour goes through the rest of what the
// README does with it.
func TestEmbedded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "redis: {addrs: []}")
	s := startServe(t, e.config)
	require.Contains(t, s.logs.String(), "NOTHING SURVIVES EXIT")
	require.Contains(t, s.out.String(), "EMBEDDED REDIS", "said on stdout too, where log.level cannot silence it")
	require.Contains(t, s.out.String(), "nothing survives exit")
	m := regexp.MustCompile(`HERALD_REDIS_ADDRS=(127\.0\.0\.1:\d+)`).FindStringSubmatch(s.out.String())
	require.NotNil(t, m, s.out.String())

	require.Equal(t, http.StatusCreated, s.call(t, http.MethodPost, "/v1/notifications",
		`{"id": "job-1", "topic": "jobs", "payload": {"invoice": 42}, "delay": "1h"}`, nil))

	other := newEnv(t, fmt.Sprintf("redis: {addrs: [%q]}", m[1]))
	r := run(t, []string{"--config", other.config, "status", "job-1"})
	require.ErrorIs(t, r.err, notify.ErrNotFound, "another namespace sees nothing")
	cfg := writeConfig(t, strings.Replace(readFile(t, other.config), other.namespace, e.namespace, 1))
	r = run(t, []string{"--config", cfg, "status", "job-1"})
	require.NoError(t, r.err)
	require.Regexp(t, `state\s+scheduled`, r.out)

	require.NoError(t, s.stop())
	r = run(t, []string{"--config", cfg, "status", "job-1"})
	require.Equal(t, 1, r.code(), "the embedded Redis ended with serve")
}

// probeURL is the address serve prints while it waits for Redis.
var probeURL = regexp.MustCompile(`(http://\S+) serves /healthz`)

// TestServeWaitsForRedis starts serve on an address where Redis is not up
// yet: serve keeps retrying, answers /healthz at once and /readyz 503,
// rereads the policies on SIGHUP, then starts normally once a redis-server
// listens there.
func TestServeWaitsForRedis(t *testing.T) {
	t.Parallel()
	port, err := redistest.FreePort()
	require.NoError(t, err)
	e := newEnv(t, fmt.Sprintf("redis: {addrs: [\"127.0.0.1:%d\"]}", port))
	// At info level, to see the reload.
	e.config = writeConfig(t, strings.Replace(readFile(t, e.config), "log: {level: warn}", "log: {level: info}", 1))
	ctx, cancel := context.WithCancel(context.Background())
	out, logs, done := &heraldtest.Buffer{}, &heraldtest.Buffer{}, make(chan error, 1)
	go func() {
		done <- execute(ctx, newApp(Deps{Out: out, Err: logs}), []string{"--config", e.config, "serve"})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 10*time.Second, "serve to listen while Redis is down", func() bool {
		select {
		case err := <-done:
			done <- err
			require.FailNow(t, "serve ended while Redis was down", "error %v; logs:\n%s", err, logs.String())
		default:
		}
		return probeURL.MatchString(out.String())
	})
	s := &serving{url: probeURL.FindStringSubmatch(out.String())[1]}
	require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/healthz", "", nil))
	require.Equal(t, http.StatusServiceUnavailable, s.call(t, http.MethodGet, "/readyz", "", nil))
	require.Equal(t, http.StatusServiceUnavailable, s.call(t, http.MethodPost, "/v1/notifications", `{"topic":"jobs"}`, nil))
	waitFor(t, 10*time.Second, "a retry to be logged", func() bool { return strings.Contains(logs.String(), "retrying") })

	// Caught here too, so that a serve that does not catch SIGHUP fails
	// this test instead of ending the test binary.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	waitFor(t, 10*time.Second, "SIGHUP to reload the policies", func() bool {
		return regexp.MustCompile(`reloaded the policies file" .*reason=hangup`).MatchString(logs.String())
	})

	redistest.Start(t, redistest.Options{Port: port})
	waitFor(t, 20*time.Second, "/readyz to answer 200", func() bool {
		return s.call(t, http.MethodGet, "/readyz", "", nil) == http.StatusOK
	})
	require.Equal(t, http.StatusCreated, s.call(t, http.MethodPost, "/v1/notifications",
		`{"id": "late-1", "topic": "jobs", "payload": {}, "delay": "1h"}`, nil))
	cancel()
	require.NoError(t, <-done)
	done <- nil
}

// TestServeLogsEachRedisRetry: while nothing listens at redis.addrs, each
// retry's line says how long the failed attempt took, as well as the wait
// before the next, since go-redis's own retries make an attempt take
// seconds; the waits double; the shutdown that ends an attempt is not
// logged as one more retry.
func TestServeLogsEachRedisRetry(t *testing.T) {
	t.Parallel()
	port, err := redistest.FreePort()
	require.NoError(t, err)
	e := newEnv(t, fmt.Sprintf("redis: {addrs: [\"127.0.0.1:%d\"]}", port))
	ctx, cancel := context.WithCancel(context.Background())
	logs, done := &heraldtest.Buffer{}, make(chan error, 1)
	go func() {
		done <- execute(ctx, newApp(Deps{Out: io.Discard, Err: logs}), []string{"--config", e.config, "serve"})
	}()
	retry := regexp.MustCompile(`msg="herald: Redis is not ready, retrying" error=.* attempt=(\d+) attempt_took=\S+ retry_in=(\S+)\n`)
	waitFor(t, 30*time.Second, "two retries to be logged", func() bool { return len(retry.FindAllString(logs.String(), -1)) >= 2 })
	cancel()
	require.NoError(t, <-done)

	lines := retry.FindAllStringSubmatch(logs.String(), -1)
	require.Len(t, lines, strings.Count(logs.String(), "retrying"), "every retry line says how long its attempt took:\n%s", logs.String())
	for i, m := range lines {
		require.Equal(t, strconv.Itoa(i+1), m[1])
		require.Equal(t, (redisRetryFirst << i).String(), m[2])
	}
	require.NotContains(t, logs.String(), "context canceled", "the shutdown is not a retry")
}

// TestShardsMismatch runs commands with a shards setting that contradicts
// the count recorded for the namespace: each stops at once with exit
// status 2 naming shards, serve too, instead of waiting as if Redis were
// not ready.
func TestShardsMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	_, err := e.store(t).Shards(t.Context())
	require.NoError(t, err, "records the namespace's 4 shards")
	cfg := writeConfig(t, strings.Replace(readFile(t, e.config), "shards: 4", "shards: 8", 1))

	r := run(t, []string{"--config", cfg, "stats"})
	require.Equal(t, 2, r.code(), r.err)
	requireField(t, r.err, "shards")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	logs := &heraldtest.Buffer{}
	err = execute(ctx, newApp(Deps{Out: io.Discard, Err: logs}), []string{"--config", cfg, "serve"})
	require.NoError(t, ctx.Err(), "serve ran until the deadline; logs:\n%s", logs)
	require.Equal(t, 2, ExitCode(err), err)
	requireField(t, err, "shards")
	require.NotContains(t, logs.String(), "retrying")
}

// TestServeWarnsOfRedisSettings starts serve on Redis servers that evict
// keys, keep nothing on disk, or refuse CONFIG: serve says so in its log,
// on /readyz and in two gauges; /readyz shows its version too.
func TestServeWarnsOfRedisSettings(t *testing.T) {
	t.Parallel()

	type readyz struct {
		Status  string `json:"status"`
		Details struct {
			Redis struct {
				MaxmemoryPolicy string `json:"maxmemory_policy"`
				EvictionOK      *bool  `json:"eviction_ok"`
				PersistenceOK   *bool  `json:"persistence_ok"`
				Unknown         string `json:"unknown"`
				Version         string `json:"version"`
				VersionOK       *bool  `json:"version_ok"`
			} `json:"redis"`
		} `json:"details"`
	}
	metricsOf := func(t *testing.T, s *serving) string {
		t.Helper()
		res, err := http.Get(s.url + "/metrics")
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return string(b)
	}
	serveOn := func(t *testing.T, opts redistest.Options) *serving {
		t.Helper()
		srv := redistest.Start(t, opts)
		return startServe(t, newEnv(t, fmt.Sprintf("redis: {addrs: [%q]}", srv.Addr)).config)
	}

	for _, tc := range []struct {
		name                     string
		redis                    redistest.Options
		warning, notWarned       string
		policy                   string
		evictionOK, persistentOK bool
	}{
		{name: "EvictionPolicy", redis: redistest.Options{AOF: true, Args: []string{"--maxmemory-policy", "allkeys-lru"}},
			warning: `maxmemory-policy is allkeys-lru.*noeviction`, notWarned: "persistence", policy: "allkeys-lru", persistentOK: true},
		{name: "NoPersistence", redis: redistest.Options{Args: []string{"--save", "", "--appendonly", "no"}},
			warning: `neither AOF nor RDB`, notWarned: "maxmemory-policy is", policy: "noeviction", evictionOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := serveOn(t, tc.redis)
			require.Regexp(t, `level=(WARN|ERROR) msg=".*`+tc.warning, s.logs.String())
			require.NotContains(t, s.logs.String(), tc.notWarned)
			var r readyz
			require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/readyz", "", &r))
			require.Equal(t, tc.policy, r.Details.Redis.MaxmemoryPolicy)
			require.Equal(t, tc.evictionOK, *r.Details.Redis.EvictionOK)
			require.Equal(t, tc.persistentOK, *r.Details.Redis.PersistenceOK)
			require.Regexp(t, `^\d+\.\d+\.\d+$`, r.Details.Redis.Version)
			require.True(t, *r.Details.Redis.VersionOK, "Redis %s is at least %s", r.Details.Redis.Version, redisconf.VersionMin)
			require.NotContains(t, s.logs.String(), "too old")
			m := metricsOf(t, s)
			require.Contains(t, m, fmt.Sprintf("herald_redis_eviction_policy_ok %d\n", gauge(tc.evictionOK)))
			require.Contains(t, m, fmt.Sprintf("herald_redis_persistence_ok %d\n", gauge(tc.persistentOK)))
		})
	}

	t.Run("ConfigRefused", func(t *testing.T) {
		t.Parallel()
		s := serveOn(t, redistest.Options{Args: []string{"--rename-command", "CONFIG", ""}})
		require.Equal(t, 1, strings.Count(s.logs.String(), "refused CONFIG GET"), "said once: %s", s.logs.String())
		require.Contains(t, s.logs.String(), "refused CONFIG GET")
		var r readyz
		require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/readyz", "", &r))
		require.Nil(t, r.Details.Redis.EvictionOK)
		require.NotEmpty(t, r.Details.Redis.Unknown)
	})
}

// TestTopicsStrict runs serve and enqueue with topics_strict: only the
// topics of the policies file are accepted; another is a 400 naming topic
// (exit status 2 for enqueue), and nothing is stored for it. A pull
// worker's reservation of another, a misspelt topic, is a 400 too, where it
// would wait for ever.
func TestTopicsStrict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.config = writeConfig(t, readFile(t, e.config)+"topics_strict: true\n")
	s := startServe(t, e.config)
	var answer struct {
		Error struct{ Code, Field string } `json:"error"`
	}
	require.Equal(t, http.StatusBadRequest, s.call(t, http.MethodPost, "/v1/notifications",
		`{"id": "flood-1", "topic": "made-up-topic", "payload": {}}`, &answer))
	require.Equal(t, "topic", answer.Error.Field)
	require.Equal(t, http.StatusNotFound, s.call(t, http.MethodGet, "/v1/notifications/flood-1", "", nil))
	require.Equal(t, http.StatusCreated, s.call(t, http.MethodPost, "/v1/notifications",
		`{"id": "known-1", "topic": "jobs", "payload": {}, "delay": "1h"}`, nil))
	answer.Error.Field = ""
	require.Equal(t, http.StatusBadRequest, s.call(t, http.MethodPost, "/v1/topics/job/reserve?wait=20s", "", &answer))
	require.Equal(t, "topic", answer.Error.Field)
	require.Equal(t, http.StatusOK, s.call(t, http.MethodPost, "/v1/topics/jobs/reserve", "", nil))

	r := e.run(t, "enqueue", "--topic", "another-made-up-one", "--payload", "{}")
	require.Equal(t, 2, r.code(), r.out)
	requireField(t, r.err, "topic")
}

// TestServeMetricsKeepPolicyTopics runs serve with metrics.max_topics 2
// once callers have used three topics the policies file does not name: the
// file's topic jobs keeps series of its own, in the process that saw the
// others first and in one started afterwards (which reads the topics from
// Redis in name order), where the first topics seen took every label and
// an alert on topic="jobs" found nothing until a restart, or for good.
func TestServeMetricsKeepPolicyTopics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.config = writeConfig(t, readFile(t, e.config)+"metrics: {max_topics: 2}\n")
	scrape := func(t *testing.T, s *serving) string {
		t.Helper()
		status, b := s.send(t, http.MethodGet, "/metrics", "")
		require.Equal(t, http.StatusOK, status)
		var series strings.Builder
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "topic=") {
				series.WriteString(line)
			}
		}
		return series.String()
	}
	s := startServe(t, e.config)
	for i, topic := range []string{"adhoc-1", "adhoc-2", "adhoc-3", "jobs"} {
		require.Equal(t, http.StatusCreated, s.call(t, http.MethodPost, "/v1/notifications",
			fmt.Sprintf(`{"id": "n%d", "topic": %q, "channel": "pull", "payload": {}, "delay": "1h"}`, i, topic), nil))
	}
	m := scrape(t, s)
	require.Contains(t, m, `herald_enqueued_total{result="created",topic="jobs"} 1`+"\n")
	require.Contains(t, m, `herald_scheduled_notifications{topic="jobs"} 1`+"\n")
	require.Contains(t, m, `herald_scheduled_notifications{topic="other"} 1`+"\n", "adhoc-3 is past max_topics")
	require.NoError(t, s.stop())

	m = scrape(t, startServe(t, e.config))
	require.Contains(t, m, `herald_scheduled_notifications{topic="jobs"} 1`+"\n")
	require.Contains(t, m, `herald_scheduled_notifications{topic="other"} 1`+"\n")
}

// gauge is a boolean as a Prometheus gauge shows it.
func gauge(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// TestServeReloadsTemplates: serve warns of a topic whose template
// templates_dir does not hold; once the template is added and SIGHUP
// arrives, the topic's notifications render with it, as a topic added to
// the policies file takes effect.
func TestServeReloadsTemplates(t *testing.T) {
	t.Parallel()
	bodies := make(chan string, 1)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case bodies <- string(b):
		default:
		}
		_, _ = io.WriteString(w, "success") // the topic's policy asks for it
	}))
	t.Cleanup(rcv.Close)
	// The demo policies' order-notify topic names order-notify.json, which
	// this folder does not hold yet.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "first.json"), []byte(`{"first": {{json .id}}}`), 0o600))
	e := newEnv(t, "")
	// At info level, to see the reload.
	config := strings.Replace(readFile(t, e.config), repoPath(t, "templates"), dir, 1)
	e.config = writeConfig(t, strings.Replace(config, "log: {level: warn}", "log: {level: info}", 1))
	s := startServe(t, e.config)
	missing := regexp.MustCompile(`does not hold.* topic=order-notify template=order-notify.json`)
	waitFor(t, 10*time.Second, "a warning of the missing template", func() bool { return missing.MatchString(s.logs.String()) })
	// A notification naming a template not loaded would die at its first
	// attempt: it is refused, naming the field.
	var answer struct {
		Error struct{ Field string } `json:"error"`
	}
	require.Equal(t, http.StatusBadRequest, s.call(t, http.MethodPost, "/v1/notifications",
		fmt.Sprintf(`{"id": "tpl-0", "topic": "jobs", "channel": "webhook", "target": %q, "template": "order-notify.json", "payload": {}}`, rcv.URL), &answer))
	require.Equal(t, "template", answer.Error.Field)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "order-notify.json"), []byte(`{"added": {{json .id}}}`), 0o600))
	// Caught here too, so that the test binary outlives a serve that does
	// not catch SIGHUP.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	// Other tests' SIGHUPs reach this serve too: wait for a reload that
	// found both templates.
	waitFor(t, 10*time.Second, "the templates to be reloaded", func() bool {
		return regexp.MustCompile(`templates reloaded" .*count=2`).MatchString(s.logs.String())
	})
	for id, req := range map[string]string{
		"tpl-1": `{"id": "tpl-1", "topic": "order-notify", "target": %q, "payload": {}}`,
		"tpl-2": `{"id": "tpl-2", "topic": "jobs", "channel": "webhook", "target": %q, "template": "order-notify.json", "payload": {}}`,
	} {
		require.Equal(t, http.StatusCreated, s.call(t, http.MethodPost, "/v1/notifications", fmt.Sprintf(req, rcv.URL), nil))
		select {
		case b := <-bodies:
			require.JSONEq(t, fmt.Sprintf(`{"added": %q}`, id), b)
		case <-time.After(10 * time.Second):
			require.FailNow(t, "not delivered", "logs:\n%s", s.logs.String())
		}
	}
	require.Len(t, missing.FindAllString(s.logs.String(), -1), 1, "no warning once the template is there")
}

// TestServeAPIHosts: without tokens, serve answers /v1 under the names in
// api.hosts and under its IP address, and refuses other names, which a
// web page pointing its own name at the address would send.
func TestServeAPIHosts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.config = writeConfig(t, strings.Replace(readFile(t, e.config), `api: {listen: "127.0.0.1:0"}`,
		`api: {listen: "127.0.0.1:0", hosts: [herald.test]}`, 1))
	s := startServe(t, e.config)
	require.Contains(t, s.logs.String(), "answer anyone who can reach "+strings.TrimPrefix(s.url, "http://")+" by IP address, localhost or a name in api.hosts")
	status := func(host string) int {
		req, err := http.NewRequest(http.MethodGet, s.url+"/v1/stats", nil)
		require.NoError(t, err)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode
	}
	port := s.url[strings.LastIndex(s.url, ":"):]
	require.Equal(t, http.StatusOK, status("herald.test"+port))
	require.Equal(t, http.StatusOK, status("127.0.0.1"+port))
	require.Equal(t, http.StatusForbidden, status("evil.example"+port))
}

// TestServeRefusesRedis starts serve on a Redis it cannot work with: a
// wrong password, or a user the ACL forbids scripts or Herald's keys.
// Retrying would not mend any of them, so serve stops at once with an
// error that says what is wrong, rather than waiting for Redis to be
// ready or starting with every enqueue failing.
func TestServeRefusesRedis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// acl is the rules of Redis's default user.
		acl      []any
		password string
		code     int
		want     []string
	}{
		{name: "WrongPassword", acl: []any{">right"}, password: "wrong", code: 2, want: []string{"WRONGPASS", "redis.password"}},
		{name: "NoPassword", acl: []any{">right"}, code: 2, want: []string{"NOAUTH", "redis.password"}},
		{name: "ScriptsForbidden", acl: []any{"-evalsha", "-eval"}, code: 1, want: []string{"NOPERM", "'eval", "may not run scripts"}},
		{name: "KeysForbidden", acl: []any{"resetkeys", "~other:*"}, code: 1, want: []string{"NOPERM", "key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.Options{})
			rdb := srv.Client(t)
			require.NoError(t, rdb.Do(t.Context(), append([]any{"ACL", "SETUSER", "default"}, tc.acl...)...).Err())
			e := newEnv(t, fmt.Sprintf("redis: {addrs: [%q], password: %q}", srv.Addr, tc.password))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			logs := &heraldtest.Buffer{}
			err := execute(ctx, newApp(Deps{Out: io.Discard, Err: logs}), []string{"--config", e.config, "serve"})
			require.NoError(t, ctx.Err(), "serve ran until the deadline; logs:\n%s", logs)
			require.Equal(t, tc.code, ExitCode(err), err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			require.NotContains(t, logs.String(), "retrying")
			require.NotContains(t, err.Error(), "right", "the password is not shown")
		})
	}
}
