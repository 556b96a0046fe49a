package cli

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/cmd/herald/config"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// TestEmbeddedStore runs every store transition on the embedded Redis, so
// that a miniredis lacking something the scripts use (cjson, ZRANGE
// WITHSCORES, ZRANGEBYSCORE LIMIT, PUBLISH inside a script, HINCRBY,
// EVALSHA after SCRIPT LOAD) fails here rather than in herald serve.
func TestEmbeddedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs strings.Builder
	rc, err := openRedis(ctx, &config.RedisConfig{Mode: config.RedisModeStandalone}, slog.New(slog.NewTextHandler(&logs, nil)), true, "test", nil)
	require.NoError(t, err)
	t.Cleanup(rc.close)
	require.NotNil(t, rc.embedded)
	require.Contains(t, logs.String(), "NOTHING SURVIVES EXIT")

	now := time.Now().Truncate(time.Millisecond) // due times are whole milliseconds
	st, err := store.New(&store.Config{Client: rc.client, Namespace: "embedded", Shards: 2, Retention: time.Minute,
		TimeNowFunc: func() time.Time { return now }})
	require.NoError(t, err)
	set, err := policy.NewSet(nil, nil)
	require.NoError(t, err)
	resolve := func(id string, backoff ...notify.Duration) *notify.Notification {
		n, err := set.Resolve(&notify.Request{ID: id, Topic: "jobs", Channel: notify.ChannelPull,
			Payload: json.RawMessage(`{"n":1}`), Backoff: backoff}, now, 0)
		require.NoError(t, err)
		return n
	}

	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := st.Subscribe(subCtx, func(string, string) {})
	<-sub.Ready
	// The subscription learns how far it has heard (a PING on its
	// connection), which a dispatcher needs to start what waited.
	require.True(t, sub.Heard(ctx, sub.Mark(), 5*time.Second), "the subscription never heard its PING answered")

	// Enqueue, idempotently, and a wake-up published from inside the script.
	for _, id := range []string{"a", "b", "c"} {
		_, status, err := st.Enqueue(ctx, resolve(id, 0, 0), false)
		require.NoError(t, err)
		require.Equal(t, store.Created, status)
	}
	_, status, err := st.Enqueue(ctx, resolve("a", 0, 0), false)
	require.NoError(t, err)
	require.Equal(t, store.Existing, status)
	select {
	case w := <-sub.Wakes:
		require.Equal(t, store.PullQueue("jobs"), w.Queue)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no wake-up from the enqueue script")
	}
	heads, err := st.Heads(ctx, store.PullQueue("jobs"))
	require.NoError(t, err)
	require.Len(t, heads, 2)

	// Reserve in batches (ZRANGEBYSCORE LIMIT), then retry, ack and kill.
	got, _, err := st.Reserve(ctx, store.PullQueue("jobs"), []int{0, 1}, 20)
	require.NoError(t, err)
	require.Len(t, got, 3)
	finish := map[string]notify.Action{"a": notify.ActionRetry, "b": notify.ActionAck, "c": notify.ActionDead}
	var items []store.Finish
	for _, n := range got {
		items = append(items, store.Finish{Notification: n, Action: finish[n.ID], NextAt: now,
			Attempt: notify.Attempt{Attempt: 0, StartedAt: now, FinishedAt: now, Outcome: notify.OutcomeRetry}})
	}
	errs, err := st.Finish(ctx, items)
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil, nil}, errs)

	stats, err := st.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, store.TopicStats{Scheduled: 1, Dead: 1, SucceededTotal: 1, FailedAttemptsTotal: 2}, stats["jobs"])

	// Dead letters: list, replay, purge.
	dead, _, err := st.ListDead(ctx, "jobs", 10, "")
	require.NoError(t, err)
	require.Len(t, dead, 1)
	matched, replayed, err := st.Replay(ctx, store.DeadFilter{Topic: "jobs"}, store.DeadOptions{Reset: true})
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 1}, [2]int{matched, replayed})
	c, err := st.Get(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, notify.StateScheduled, c.State)
	require.Len(t, c.History, 1)

	// Cancel, an expired reservation, retention.
	cancelled, err := st.Cancel(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, notify.StateCancelled, cancelled.State)
	_, err = st.Cancel(ctx, "b")
	require.ErrorIs(t, err, notify.ErrFinished)
	got, _, err = st.Reserve(ctx, store.PullQueue("jobs"), []int{0, 1}, 20)
	require.NoError(t, err)
	require.Len(t, got, 1)
	now = now.Add(time.Hour)
	expired, err := st.Expired(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	swept, _, err := st.Sweep(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 2, swept, "b succeeded and c was cancelled an hour ago")

	_, purged, err := st.Purge(ctx, store.DeadFilter{IDs: []string{"a"}}, store.DeadOptions{})
	require.NoError(t, err)
	require.Zero(t, purged, "a is reserved, not dead")

	// A script the embedded Redis has forgotten is loaded again (EVALSHA, NOSCRIPT, SCRIPT LOAD).
	require.NoError(t, rc.client.ScriptFlush(ctx).Err())
	_, status, err = st.Enqueue(ctx, resolve("d", 0), false)
	require.NoError(t, err)
	require.Equal(t, store.Created, status)
}

func TestOpenRedis(t *testing.T) {
	t.Parallel()

	t.Run("Clients", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			cfg  config.RedisConfig
			want redis.UniversalClient
		}{
			{config.RedisConfig{Mode: config.RedisModeStandalone, Addrs: []string{"a:1"}, TLS: true}, &redis.Client{}},
			{config.RedisConfig{Mode: config.RedisModeSentinel, Addrs: []string{"a:1", "b:2"}, MasterName: "m"}, &redis.Client{}},
			{config.RedisConfig{Mode: config.RedisModeCluster, Addrs: []string{"a:1", "b:2"}, Password: "p"}, &redis.ClusterClient{}},
		} {
			c := tc.cfg.NewClient(nil)
			require.IsType(t, tc.want, c, tc.cfg.Mode)
			_ = c.Close()
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		_, err := openRedis(context.Background(), &config.RedisConfig{Mode: config.RedisModeStandalone, Addrs: []string{"127.0.0.1:1"}},
			slog.New(slog.NewTextHandler(io.Discard, nil)), false, "test", nil)
		require.ErrorContains(t, err, "redis 127.0.0.1:1 (standalone)")
		require.Equal(t, 1, ExitCode(err))
	})
}

// TestRedisCluster runs the operator's commands against a Redis Cluster.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	addrs := make([]string, len(cluster.Nodes))
	for i, n := range cluster.Nodes {
		addrs[i] = fmt.Sprintf("%q", n.Addr)
	}
	e := newEnv(t, fmt.Sprintf("redis: {mode: cluster, addrs: [%s]}", strings.Join(addrs, ", ")))

	for i := range 8 { // enough ids to reach every node's shards
		r := e.run(t, "enqueue", "--topic", "jobs", "--id", fmt.Sprintf("cj-%d", i), "--delay", "1h")
		require.NoError(t, r.err)
	}
	r := e.run(t, "status", "cj-3")
	require.NoError(t, r.err)
	require.Regexp(t, `state\s+scheduled`, r.out)
	r = e.run(t, "stats")
	require.NoError(t, r.err)
	require.Regexp(t, `(?m)^jobs\s+8\s+0\s+0\s+0\s+0\s+0\s*$`, r.out)
	require.NoError(t, e.run(t, "cancel", "cj-5").err)
}

// TestRedisSentinel runs commands against a master found through a
// Sentinel.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, redistest.Options{})
	sentinel := startSentinel(t, "herald-master", master.Addr)

	e := newEnv(t, fmt.Sprintf("redis: {mode: sentinel, master_name: herald-master, addrs: [%q]}", sentinel))
	r := e.run(t, "enqueue", "--topic", "jobs", "--id", "sj-1", "--delay", "1h")
	require.NoError(t, r.err)
	r = e.run(t, "status", "sj-1")
	require.NoError(t, r.err)
	require.Regexp(t, `state\s+scheduled`, r.out)
	keys, err := master.Client(t).Keys(context.Background(), e.namespace+":*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys, "stored on the master")

	e = newEnv(t, fmt.Sprintf("redis: {mode: sentinel, master_name: nobody, addrs: [%q]}", sentinel))
	r = e.run(t, "stats")
	require.Equal(t, 1, r.code())
	require.ErrorContains(t, r.err, "(sentinel)")
}

// TestRedisTLSMismatch connects with redis.tls set otherwise than the
// server's port takes, or to a server whose certificate this machine does
// not trust: the error says what to change, rather than "EOF" or a
// deadline.
func TestRedisTLSMismatch(t *testing.T) {
	t.Parallel()
	certFile, keyFile := testCertificate(t)
	tlsPort, err := redistest.FreePort()
	require.NoError(t, err)
	srv := redistest.Start(t, redistest.Options{Args: []string{"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", certFile, "--tls-auth-clients", "no"}})
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))

	for _, tc := range []struct {
		name string
		addr string
		tls  bool
		want string
		// wait, when set, bounds the check: shorter than pingTimeout, for
		// a handshake that is never answered.
		wait time.Duration
	}{
		{name: "PlainToTLSPort", addr: tlsAddr, want: "if it takes TLS on that port, set redis.tls"},
		{name: "TLSToPlainPort", addr: srv.Addr, tls: true, want: "if it does not take TLS on that port, set redis.tls to false", wait: 2 * time.Second},
		// go-redis dials 5 times, 100ms apart, each a full handshake: 1.3-1.7s
		// under -race, past 2s on a loaded machine.
		{name: "UnknownAuthority", addr: tlsAddr, tls: true, want: "SSL_CERT_FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := t.Context(), context.CancelFunc(func() {})
			if tc.wait > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.wait)
			}
			defer cancel()
			_, err := openRedis(ctx, &config.RedisConfig{Mode: config.RedisModeStandalone, Addrs: []string{tc.addr}, TLS: tc.tls},
				slog.New(slog.NewTextHandler(io.Discard, nil)), false, "test", nil)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, 1, ExitCode(err))
		})
	}
}

// testCertificate writes httptest's certificate for 127.0.0.1, which no
// system trusts, and its key, and returns their files.
func testCertificate(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	defer ts.Close()
	cert := ts.TLS.Certificates[0]
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600))
	return certFile, keyFile
}

// TestRedisACLUser runs commands as a Redis ACL user of their own, as a
// company's shared Redis hands each application, with the default user
// turned off.
func TestRedisACLUser(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	require.NoError(t, rdb.Do(t.Context(), "ACL", "SETUSER", "herald", "on", ">s3cret", "~*", "&*", "+@all").Err())
	require.NoError(t, rdb.Do(t.Context(), "ACL", "SETUSER", "default", "off").Err())

	e := newEnv(t, fmt.Sprintf("redis: {addrs: [%q], username: herald, password: s3cret}", srv.Addr))
	r := e.run(t, "enqueue", "--topic", "jobs", "--id", "acl-1", "--delay", "1h")
	require.NoError(t, r.err)
	r = e.run(t, "status", "acl-1")
	require.NoError(t, r.err)
	require.Regexp(t, `state\s+scheduled`, r.out)

	e = newEnv(t, fmt.Sprintf("redis: {addrs: [%q], password: s3cret}", srv.Addr))
	r = e.run(t, "stats")
	require.Equal(t, 2, r.code(), r.err)
	require.ErrorContains(t, r.err, "redis.username")
	require.NotContains(t, r.err.Error(), "s3cret")
}

// startSentinel runs a Redis Sentinel on a free loopback port, watching the
// master at addr, until the test ends, and returns its address.
func startSentinel(t *testing.T, name, addr string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	sentinelAddr, err := redistest.FreeAddr()
	require.NoError(t, err)
	_, sentinelPort, _ := net.SplitHostPort(sentinelAddr)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, "port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n",
		sentinelPort, dir, name, host, port), 0o600))
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinelAddr})
	t.Cleanup(func() { _ = c.Close() })
	waitFor(t, 10*time.Second, "the sentinel", func() bool {
		got, err := c.GetMasterAddrByName(context.Background(), name).Result()
		return err == nil && len(got) == 2 && !errors.Is(err, redis.Nil)
	})
	return sentinelAddr
}
