package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
)

// heraldBin is the herald program, built once for the package's tests.
var heraldBin string

func TestMain(m *testing.M) {
	redistest.ClearConfigEnv()
	dir, err := os.MkdirTemp("", "herald-chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	heraldBin = filepath.Join(dir, "herald")
	if out, err := exec.Command("go", "build", "-o", heraldBin, "github.com/heraldhq/herald/cmd/herald").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: go build herald: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		code = redistest.CheckLeaks()
	}
	os.Exit(code)
}

// policies has one webhook topic, chaos, on a five-attempt array of
// milliseconds: with a receiver failing 30% of the time, about one
// notification in 400 ends dead. The ttr is short so that what a killed
// dispatcher held comes back within seconds, and long enough that a
// dispatcher slowed by a busy machine records its outcomes in time.
const policies = `policies:
  chaos:
    backoff: [0s, 50ms, 100ms, 200ms, 400ms]
    ttr: 3s
    timeout: 1s
topics:
  chaos:
    channel: webhook
    policy: chaos
`

// attemptsPerPolicy is the length of the chaos policy's array, and
// policyTimeout its timeout.
const (
	attemptsPerPolicy = 5
	policyTimeout     = time.Second
)

// writeConfig writes a herald configuration on redisYAML (the redis
// section, in YAML flow style) and returns its path.
func writeConfig(t *testing.T, redisYAML string) string {
	t.Helper()
	dir := t.TempDir()
	templates, err := filepath.Abs("../../templates")
	require.NoError(t, err)
	policiesFile := filepath.Join(dir, "policies.yaml")
	require.NoError(t, os.WriteFile(policiesFile, []byte(policies), 0o600))
	config := filepath.Join(dir, "herald.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `redis: %s
namespace: chaos
shards: 8
dispatcher: {concurrency: 32}
senders:
  webhook: {allow_networks: ["127.0.0.0/8"], timeout: 1s}
policies_file: %s
templates_dir: %s
log: {level: warn}
`, redisYAML, policiesFile, templates), 0o600))
	return config
}

// deployment is an API and three dispatchers as herald processes on one
// Redis, and the receiver their webhooks go to, which fails 30% of
// requests after up to 20ms.
type deployment struct {
	api         *proc
	dispatchers []*proc
	rcv         *receiver
	client      *apiClient
}

// startDeployment starts a deployment on rds.
func startDeployment(t *testing.T, rds *redistest.Server) *deployment {
	t.Helper()
	config := writeConfig(t, fmt.Sprintf("{addrs: [%q]}", rds.Addr))
	d := &deployment{rcv: startReceiver(t, 0.3, 20*time.Millisecond), api: startHerald(t, "api", config, "api")}
	for i := range 3 {
		d.dispatchers = append(d.dispatchers, startHerald(t, fmt.Sprintf("dispatcher-%d", i), config, "dispatcher"))
	}
	d.client = newAPIClient(d.api.url)
	return d
}

// proc is one herald serve process, which the test may kill and start
// again on the same port.
type proc struct {
	name   string
	args   []string
	listen string
	logs   *os.File

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startHerald starts `herald --config config serve --role role` on a free
// loopback port, waits until it answers /healthz, and ends it when the test
// does.
func startHerald(t *testing.T, name, config, role string) *proc {
	t.Helper()
	logs, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	require.NoError(t, err)
	listen, err := redistest.FreeAddr()
	require.NoError(t, err)
	p := &proc{name: name, listen: listen, logs: logs}
	p.args = []string{"--config", config, "serve", "--role", role, "--listen", p.listen}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			_, _ = logs.Seek(0, io.SeekStart)
			b, _ := io.ReadAll(logs)
			t.Logf("%s logs:\n%s", name, lastBytes(b, 4000))
		}
		_ = logs.Close()
	})
	require.NoError(t, p.start())
	return p
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// url is the base URL of the process's HTTP server.
func (p *proc) url() string { return "http://" + p.listen }

// start starts the process and waits until it answers /healthz.
func (p *proc) start() error {
	cmd := exec.Command(heraldBin, p.args...)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	// The process dies with the test binary, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("%s exited at start", p.name)
		default:
		}
		res, err := http.Get(p.url() + "/healthz")
		if err == nil {
			_ = res.Body.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer /healthz within 20s", p.name)
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *proc) kill() { p.end(syscall.SIGKILL) }

// stop ends the process with SIGTERM, letting it shut down gracefully,
// and SIGKILL after 15s.
func (p *proc) stop() { p.end(syscall.SIGTERM) }

func (p *proc) end(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// delivery is one request the receiver answered.
type delivery struct {
	attempt    int
	status     int
	start, end time.Time
}

// receiver is a loopback webhook receiver that fails a share of requests
// with 500 after a random latency, and records every request by
// webhook-id, counting any that arrives while another of the same id is
// still being answered.
type receiver struct {
	srv      *httptest.Server
	failRate float64
	latency  time.Duration

	mu       sync.Mutex
	inflight map[string][]int // the attempts being answered, by id
	overlaps []overlap
	got      map[string][]delivery
	first    map[string]time.Time // first 2xx answer per id
}

// overlap is a request that arrived while others of the same id were
// still being answered: the attempts of those, and its own.
type overlap struct {
	id      string
	earlier []int
	later   delivery
}

func startReceiver(t *testing.T, failRate float64, latency time.Duration) *receiver {
	t.Helper()
	rc := &receiver{failRate: failRate, latency: latency,
		inflight: map[string][]int{}, got: map[string][]delivery{}, first: map[string]time.Time{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("webhook-id")
	attempt, _ := strconv.Atoi(r.Header.Get("Herald-Attempt"))
	d := delivery{attempt: attempt, status: http.StatusOK, start: time.Now()}
	rc.mu.Lock()
	if earlier := rc.inflight[id]; len(earlier) > 0 {
		rc.overlaps = append(rc.overlaps, overlap{id: id, earlier: slices.Clone(earlier), later: d})
	}
	rc.inflight[id] = append(rc.inflight[id], attempt)
	rc.mu.Unlock()
	if rc.latency > 0 {
		select {
		case <-time.After(rand.N(rc.latency)):
		case <-r.Context().Done():
		}
	}
	if rand.Float64() < rc.failRate {
		d.status = http.StatusInternalServerError
	}
	w.WriteHeader(d.status)
	d.end = time.Now()
	rc.mu.Lock()
	i := slices.Index(rc.inflight[id], attempt)
	rc.inflight[id] = slices.Delete(rc.inflight[id], i, i+1)
	rc.got[id] = append(rc.got[id], d)
	if _, ok := rc.first[id]; !ok && d.status == http.StatusOK {
		rc.first[id] = d.end
	}
	rc.mu.Unlock()
}

// delivered returns when id was first answered 2xx, if it was.
func (rc *receiver) delivered(id string) (time.Time, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	at, ok := rc.first[id]
	return at, ok
}

// apiClient calls a herald API.
type apiClient struct {
	base func() string
	http *http.Client
}

func newAPIClient(base func() string) *apiClient {
	return &apiClient{base: base, http: &http.Client{Timeout: 5 * time.Second}}
}

// enqueue posts one chaos notification to target and returns the status,
// or an error when the API could not be reached.
func (a *apiClient) enqueue(ctx context.Context, id, target string, n int) (int, error) {
	body := fmt.Sprintf(`{"id": %q, "topic": "chaos", "target": %q, "payload": {"n": %d}}`, id, target, n)
	return a.do(ctx, http.MethodPost, "/v1/notifications", body, nil)
}

// get reads a notification's record; 404 leaves n untouched.
func (a *apiClient) get(ctx context.Context, id string, n *notify.Notification) (int, error) {
	return a.do(ctx, http.MethodGet, "/v1/notifications/"+id, "", n)
}

// pending returns how many chaos notifications are not finished.
func (a *apiClient) pending(ctx context.Context) (int64, error) {
	var stats struct {
		Topics map[string]struct {
			Scheduled, Waiting, Reserved int64
		} `json:"topics"`
	}
	status, err := a.do(ctx, http.MethodGet, "/v1/stats", "", &stats)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("stats: %d", status)
	}
	s := stats.Topics["chaos"]
	return s.Scheduled + s.Waiting + s.Reserved, err
}

func (a *apiClient) do(ctx context.Context, method, path, body string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base()+path, bytes.NewBufferString(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := a.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	if out != nil && res.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			return 0, fmt.Errorf("%s %s: %w: %s", method, path, err, b)
		}
	}
	return res.StatusCode, nil
}

// acked reports whether an enqueue's status acknowledges it: 201 new, or
// 200 for the same id and content already stored.
func acked(status int) bool { return status == http.StatusCreated || status == http.StatusOK }

// sleepCtx sleeps for d or until ctx ends, and reports whether ctx is
// still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
