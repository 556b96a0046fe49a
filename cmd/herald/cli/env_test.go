package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// server is the package's redis-server; tests isolate by namespace.
var server *redistest.Server

func TestMain(m *testing.M) { redistest.RunMain(m, &server) }

// repoPath returns the absolute path of a file of the repository, so that
// configs written by tests work from the package's directory.
func repoPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", rel))
	require.NoError(t, err)
	return p
}

// testEnv is a config file for one test: the package's server (or what
// redisYAML says), a namespace of the test's own, the demo's short
// policies, and a guard that lets loopback receivers through.
type testEnv struct {
	config    string
	namespace string
}

// newEnv writes the config file; redisYAML replaces the redis section
// when set.
func newEnv(t *testing.T, redisYAML string) *testEnv {
	t.Helper()
	if redisYAML == "" {
		redisYAML = fmt.Sprintf("redis: {addrs: [%q]}", server.Addr)
	}
	e := &testEnv{namespace: redistest.Namespace(t)}
	e.config = writeConfig(t, fmt.Sprintf(`%s
namespace: %s
shards: 4
api: {listen: "127.0.0.1:0"}
senders:
  webhook: {allow_networks: ["127.0.0.0/8"], timeout: 2s}
policies_file: %s
templates_dir: %s
log: {level: warn}
`, redisYAML, e.namespace, repoPath(t, "configs/demo-policies.yaml"), repoPath(t, "templates")))
	return e
}

// run runs herald with the env's config.
func (e *testEnv) run(t *testing.T, args ...string) *result {
	t.Helper()
	return run(t, append([]string{"--config", e.config}, args...))
}

// client returns a Go client on the env's namespace, for setting up what a
// command then reads.
func (e *testEnv) client(t *testing.T) *client.Client {
	t.Helper()
	set, err := policy.Load(repoPath(t, "configs/demo-policies.yaml"))
	require.NoError(t, err)
	cl, err := client.New(&client.Config{Store: e.store(t), PoliciesFunc: func() *policy.Set { return set }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// store returns a store on the env's namespace, for what the client does
// not do, such as recording an endpoint's failures.
func (e *testEnv) store(t *testing.T) *store.Store {
	t.Helper()
	return e.storeOn(t, server.Client(t))
}

// storeOn is store on the server c is connected to, for an env whose
// redisYAML names a server of the test's own.
func (e *testEnv) storeOn(t *testing.T, c *redis.Client) *store.Store {
	t.Helper()
	st, err := store.New(&store.Config{Client: c, Namespace: e.namespace, Shards: 4})
	require.NoError(t, err)
	return st
}

// dead makes dead pull notifications of topic with the given ids: each has
// a one-attempt array, is reserved, and fails.
func (e *testEnv) dead(t *testing.T, topic string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	cl := e.client(t)
	reqs := make([]*notify.Request, len(ids))
	for i, id := range ids {
		reqs[i] = &notify.Request{ID: id, Topic: topic, Channel: notify.ChannelPull, Payload: []byte(`{"n":1}`), Backoff: []notify.Duration{0}}
	}
	for chunk := range slices.Chunk(reqs, store.MaxBatch) {
		res, err := cl.EnqueueBatch(ctx, chunk)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
	}
	for failed := 0; failed < len(ids); {
		got, err := cl.Reserve(ctx, topic, client.MaxReserve, time.Second)
		require.NoError(t, err)
		require.NotEmpty(t, got)
		for _, n := range got {
			require.NoError(t, cl.Nack(ctx, n.ID, n.Receipt, errors.New("consumer failed")))
			failed++
		}
	}
}

// waitFor waits until cond holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readFile returns a file's contents.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
