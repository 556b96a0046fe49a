package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
)

// runMainEnv, set, makes the test binary run herald's main instead of the
// tests: signals reach a process as a whole, so they are tested on a
// process of its own. (A HERALD_ name would be read as configuration.)
const runMainEnv = "HERALDTEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) != "" {
		main() // it exits
	}
	redistest.VerifyMain(m)
}

// hangPolicies has one webhook topic whose attempts may run for minutes.
const hangPolicies = `policies:
  hang:
    backoff: [0s, 1m]
    ttr: 10m
    timeout: 5m
topics:
  hang:
    channel: webhook
    policy: hang
`

// TestSecondInterruptExitsAtOnce: on SIGINT, herald serve shuts down
// gracefully, waiting up to its shutdown timeout (10s) for an attempt
// whose receiver does not answer, and says that a second Ctrl-C exits at
// once; a SIGHUP meanwhile does not end it; the second SIGINT then ends it
// at once, with the status a shell gives a process SIGINT ended (130). It does so too when SIGINT was
// ignored as it started, as a script's background job's is.
func TestSecondInterruptExitsAtOnce(t *testing.T) {
	t.Parallel()
	for name, ignored := range map[string]bool{"Default": false, "IgnoredAtStart": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			secondInterruptExitsAtOnce(t, ignored)
		})
	}
}

func secondInterruptExitsAtOnce(t *testing.T, ignored bool) {
	redis := redistest.Start(t, redistest.Options{})
	hung, release := make(chan struct{}, 1), make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case hung <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(rcv.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handler

	serve := startServe(t, redis, ignored)
	cmd, exited := serve.cmd, serve.exited
	res, err := http.Post(serve.url+"/v1/notifications", "application/json",
		strings.NewReader(fmt.Sprintf(`{"id": "hang-1", "topic": "hang", "target": %q, "payload": {}}`, rcv.URL)))
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusCreated, res.StatusCode)
	select {
	case <-hung:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt never reached the receiver")
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.Eventually(t, func() bool { return strings.Contains(serve.output(serve.stderr), "press Ctrl-C again to exit at once") },
		10*time.Second, 10*time.Millisecond, "no word of the second Ctrl-C")
	// SIGHUP rereads the policies during the shutdown too: its default
	// action would end the process and cut the attempt short.
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	select {
	case <-exited:
		t.Fatal("serve did not wait for the running attempt (a SIGHUP during the shutdown ended it)")
	case <-time.After(500 * time.Millisecond): // of the 10s it waits
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	second := time.Now()
	select {
	case <-exited:
	case <-time.After(3 * time.Second):
		t.Fatal("the second SIGINT did not end serve within 3s")
	}
	t.Logf("exited %s after the second SIGINT", time.Since(second).Round(time.Millisecond))
	require.Equal(t, 128+int(syscall.SIGINT), cmd.ProcessState.ExitCode(), "ended by the signal, not by a finished shutdown: %v", cmd.ProcessState)
}

// TestRedisOutageLogsFewLines: while Redis is down, go-redis's own
// messages (a failed dial on every retry of every connection) reach serve's
// log as warnings, each a few times at most, not several times a second.
func TestRedisOutageLogsFewLines(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t, redistest.Options{})
	serve := startServe(t, redis, false)
	redis.Kill()
	time.Sleep(4 * time.Second) // the outage
	require.NoError(t, redis.Restart())
	// Which of the dispatcher's calls met the outage (reserve, or the read
	// of what is paused, which holds reserves back while it fails) depends
	// on where its loops were: any of them saying it recovered will do.
	recovered := regexp.MustCompile(`msg="schedule: [^"]* recovered"`)
	require.Eventually(t, func() bool { return recovered.MatchString(serve.output(serve.stderr)) },
		20*time.Second, 10*time.Millisecond, "the dispatcher never said Redis was back")

	var fromRedis []string
	for line := range strings.Lines(serve.output(serve.stderr)) {
		if strings.Contains(line, "connection pool") {
			fromRedis = append(fromRedis, line)
		}
	}
	t.Logf("go-redis's lines:\n%s", strings.Join(fromRedis, ""))
	require.NotEmpty(t, fromRedis, "go-redis said nothing of the outage")
	require.LessOrEqual(t, len(fromRedis), 3, "go-redis's messages repeated")
	for _, line := range fromRedis {
		require.Contains(t, line, `level=WARN msg="redis: `, "not in serve's log")
	}
}

// TestOpenAPIWarnsOfItsAddress: an API without tokens warns that anyone who
// can reach it is answered, naming the address it listens on, not the
// configured one (port 0 picks a free port).
func TestOpenAPIWarnsOfItsAddress(t *testing.T) {
	t.Parallel()
	serve := startServe(t, redistest.Start(t, redistest.Options{}), false)
	require.Contains(t, serve.output(serve.stderr), "answer anyone who can reach "+strings.TrimPrefix(serve.url, "http://")+" by IP address")
}

// TestShutdownLogIsJSON: with log.format json, what serve says as it shuts
// down is a JSON log line too, where it was plain text in the stream.
func TestShutdownLogIsJSON(t *testing.T) {
	t.Parallel()
	serve := startServeWith(t, redistest.Start(t, redistest.Options{}), false, "json", "")
	require.NoError(t, serve.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-serve.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not shut down within 20s")
	}
	out := serve.output(serve.stderr)
	require.Contains(t, out, "press Ctrl-C again to exit at once")
	for line := range strings.Lines(out) {
		require.True(t, json.Valid([]byte(line)), "not a JSON log line: %s", line)
	}
}

// TestTraceExportErrorsInServeLog runs serve with log.format json against
// an OTLP collector that refuses every export: the failures are in serve's
// log as JSON warnings, where the OpenTelemetry SDK wrote each with the
// standard library's log package, a line a JSON log pipeline cannot parse
// and that log.level does not govern, every 30s for as long as a collector
// is down.
func TestTraceExportErrorsInServeLog(t *testing.T) {
	t.Parallel()
	exports := make(chan struct{}, 100)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case exports <- struct{}{}:
		default:
		}
		http.Error(w, "refused", http.StatusBadRequest)
	}))
	t.Cleanup(collector.Close)
	serve := startServeWith(t, redistest.Start(t, redistest.Options{}), false, "json", fmt.Sprintf("otel: {endpoint: %q}\n", collector.URL))
	res, err := http.Post(serve.url+"/v1/notifications", "application/json",
		strings.NewReader(`{"id": "traced-1", "topic": "hang", "target": "http://127.0.0.1:9/", "delay": "1h", "payload": {}}`))
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusCreated, res.StatusCode)
	select {
	case <-exports: // the enqueue's span, within the batch timeout (5s)
	case <-time.After(30 * time.Second):
		t.Fatal("no export reached the collector within 30s")
	}
	require.Eventually(t, func() bool { return strings.Contains(serve.output(serve.stderr), "400") }, 10*time.Second, 10*time.Millisecond,
		"the refused export is not in the log")
	for line := range strings.Lines(serve.output(serve.stderr)) {
		var entry struct{ Level, Msg, Error string }
		require.NoError(t, json.Unmarshal([]byte(line), &entry), "not a JSON log line: %s", line)
		if strings.Contains(entry.Error, "400") {
			require.Equal(t, "WARN", entry.Level, line)
			require.True(t, strings.HasPrefix(entry.Msg, "tracing: "), line)
		}
	}
}

// served is a herald serve process started by startServe.
type served struct {
	cmd *exec.Cmd
	// exited is closed once the process has exited.
	exited         chan struct{}
	stdout, stderr *os.File
	// output returns what the process has written to f so far.
	output func(f *os.File) string
	// url is the API's.
	url string
}

// startServe runs herald serve on redis with hangPolicies, in a process of
// its own, and waits for its API; the process is killed when the test ends.
// ignoreSIGINT starts it with SIGINT ignored, as a shell starts a script's
// background job.
func startServe(t *testing.T, redis *redistest.Server, ignoreSIGINT bool) *served {
	t.Helper()
	return startServeWith(t, redis, ignoreSIGINT, "text", "")
}

// startServeWith is startServe with the log in format and the YAML of
// extra added to the configuration.
func startServeWith(t *testing.T, redis *redistest.Server, ignoreSIGINT bool, format, extra string) *served {
	t.Helper()
	dir := t.TempDir()
	templates, err := filepath.Abs("../../templates")
	require.NoError(t, err)
	policies := filepath.Join(dir, "policies.yaml")
	require.NoError(t, os.WriteFile(policies, []byte(hangPolicies), 0o600))
	config := filepath.Join(dir, "herald.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `redis: {addrs: [%q]}
namespace: %s
shards: 4
api: {listen: "127.0.0.1:0"}
senders:
  webhook: {allow_networks: ["127.0.0.0/8"], timeout: 5m}
policies_file: %s
templates_dir: %s
log: {level: info, format: %s}
%s`, redis.Addr, redistest.Namespace(t), policies, templates, format, extra), 0o600))

	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	require.NoError(t, err)
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	require.NoError(t, err)
	output := func(f *os.File) string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
	cmd := exec.Command(os.Args[0], "--config", config, "serve")
	if ignoreSIGINT {
		// An ignored signal stays ignored across exec.
		cmd = exec.Command("sh", "-c", `trap "" INT; exec "$0" "$@"`, os.Args[0], "--config", config, "serve")
	}
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("herald output:\n%s%s", output(stdout), output(stderr))
		}
		_ = stdout.Close()
		_ = stderr.Close()
	})

	apiLine := regexp.MustCompile(`API on (http://\S+) `)
	require.Eventually(t, func() bool { return apiLine.MatchString(output(stdout)) }, 20*time.Second, 10*time.Millisecond,
		"the API never listened")
	url := apiLine.FindStringSubmatch(output(stdout))[1]
	return &served{cmd: cmd, exited: exited, stdout: stdout, stderr: stderr, output: output, url: url}
}

// TestInterruptedDemo: Ctrl-C (SIGINT) during herald demo ends it with a
// summary of what happened so far and an error that says it was
// interrupted, not that a context was cancelled.
func TestInterruptedDemo(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	config := filepath.Join(dir, "herald.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `redis: {addrs: []}
api: {listen: "127.0.0.1:0"}
senders:
  webhook: {allow_networks: ["127.0.0.0/8"]}
policies_file: %s
templates_dir: %s
log: {level: warn}
`, filepath.Join(root, "configs", "demo-policies.yaml"), filepath.Join(root, "templates")), 0o600))
	var stdout, stderr heraldtest.Buffer
	cmd := exec.Command(os.Args[0], "--config", config, "demo")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "enqueued demo-invoice-42") },
		20*time.Second, 10*time.Millisecond, "the demo never enqueued: %s", stderr.String())

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the demo did not stop within 10s of SIGINT")
	}
	require.Equal(t, 1, cmd.ProcessState.ExitCode())
	require.Contains(t, stdout.String(), "Summary after ")
	require.Contains(t, stderr.String(), "herald: demo: stopped before the end: interrupt signal received\n")
}
