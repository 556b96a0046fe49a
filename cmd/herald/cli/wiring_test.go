package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redisconf"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/metrics"
)

// infoCalls returns how many INFO commands c's server has run since its
// statistics were reset.
func infoCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	stats, err := c.InfoMap(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var calls int
	if v := stats["Commandstats"]["cmdstat_info"]; v != "" {
		_, err = fmt.Sscanf(v, "calls=%d", &calls)
		require.NoError(t, err)
	}
	return calls
}

// TestRedisMemoryReadsBriefly: the memory behind /readyz and the gauges is
// Redis's used_memory and maxmemory, read at most once per
// memoryCacheFor however often probes and scrapes ask, and a change of
// maxmemory shows within that.
func TestRedisMemoryReadsBriefly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.Start(t, redistest.Options{}).Client(t)
	m := &redisMemory{client: c}
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	start := time.Now()
	for range 50 {
		got, err := m.read(ctx)
		require.NoError(t, err)
		require.Positive(t, got.Used)
		require.Zero(t, got.Max)
	}
	// The INFO commandstats of infoCalls counts once it has run.
	require.LessOrEqual(t, infoCalls(t, c), 1+int(time.Since(start)/memoryCacheFor))

	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1000000000").Err())
	require.Eventually(t, func() bool {
		got, err := m.read(ctx)
		return err == nil && got.Max == 1000000000
	}, 10*time.Second, 50*time.Millisecond)
}

// TestRedisMemoryOfTheFullestMaster: on a Cluster the memory shown is the
// master's closest to its maxmemory, named by its address, since
// enqueues to its slots are refused first; a master with no limit is
// never the fullest while another has one.
func TestRedisMemoryOfTheFullestMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	nodes := make([]*redis.Client, len(cl.Nodes))
	for i, n := range cl.Nodes {
		nodes[i] = n.Client(t)
	}
	used, _, err := redisconf.Memory(ctx, nodes[1])
	require.NoError(t, err)
	// nodes[1] is half full, nodes[2] has ten times its use as limit.
	require.NoError(t, nodes[1].ConfigSet(ctx, "maxmemory", strconv.FormatInt(2*used, 10)).Err())
	require.NoError(t, nodes[2].ConfigSet(ctx, "maxmemory", strconv.FormatInt(10*used, 10)).Err())
	got, err := readRedisMemory(ctx, cl.Client(t))
	require.NoError(t, err)
	require.Equal(t, cl.Nodes[1].Addr, got.Addr)
	require.Equal(t, 2*used, got.Max)
	require.InDelta(t, 0.5, float64(got.Used)/float64(got.Max), 0.1)

	// A resharding moves slot 100 to another master, splitting a range:
	// a master of several ranges is still read, and the fullest found.
	cl.MoveSlot(t, 100, 100, 0)
	got, err = readRedisMemory(ctx, cl.Client(t))
	require.NoError(t, err)
	require.Equal(t, cl.Nodes[1].Addr, got.Addr)

	// The masters are found by keys hashed here, as Redis hashes them.
	for _, slot := range []int{0, 1, 5460, 5461, 12345, 16383} {
		key := keyInSlots(slot, slot)
		got, err := nodes[0].ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err)
		require.EqualValues(t, slot, got, "key %q", key)
	}
}

// TestRedisMemoryIgnoresHungReplicas: with every replica of a Cluster hung
// (its host stopped), reading the masters' memory answers at once, each
// time, where a read that first asked a node picked at random for the slot
// map waited out a hung one's read timeout half the time.
func TestRedisMemoryIgnoresHungReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartClusterReplicas(t, 3, 1)
	c := cl.Client(t)
	_, err := readRedisMemory(ctx, c)
	require.NoError(t, err, "the client learns every node, replicas too")
	cl.PauseReplicas(t)
	for i := range 8 {
		start := time.Now()
		got, err := readRedisMemory(ctx, c)
		require.NoError(t, err, "read %d", i)
		require.Positive(t, got.Used)
		require.Contains(t, []string{cl.Nodes[0].Addr, cl.Nodes[1].Addr, cl.Nodes[2].Addr}, got.Addr)
		// A hung node holds a call for the client's read timeout (2s).
		require.Less(t, time.Since(start), time.Second, "read %d waited on a hung replica", i)
	}
}

// TestServeWhenRedisIsFull: herald serve on a full Redis stays ready and
// says on /readyz that Redis is at maxmemory and refuses enqueues, which
// are 503; the log has the first refusal, not one warning per request.
func TestServeWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	s := startServe(t, newEnv(t, fmt.Sprintf("redis: {addrs: [%q]}", srv.Addr)).config)
	var ready struct {
		Status  string `json:"status"`
		Details struct {
			Redis  map[string]any `json:"redis"`
			Memory struct {
				UsedBytes int64  `json:"used_bytes"`
				MaxBytes  int64  `json:"max_bytes"`
				Warning   string `json:"warning"`
			} `json:"memory"`
		} `json:"details"`
	}
	require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/readyz", "", &ready))
	require.NotEmpty(t, ready.Details.Redis, "the settings stay")
	require.Positive(t, ready.Details.Memory.UsedBytes)
	require.Empty(t, ready.Details.Memory.Warning)

	redistest.Fill(t, srv.Client(t))
	for i := range 20 {
		require.Equal(t, http.StatusServiceUnavailable,
			s.call(t, http.MethodPost, "/v1/notifications", fmt.Sprintf(`{"id": "n%d", "topic": "jobs", "channel": "pull"}`, i), nil))
	}
	require.Eventually(t, func() bool {
		ready.Details.Memory.Warning = ""
		return s.call(t, http.MethodGet, "/readyz", "", &ready) == http.StatusOK && ready.Details.Memory.Warning != ""
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, "ready", ready.Status)
	require.Contains(t, ready.Details.Memory.Warning, "Redis is at maxmemory")
	require.GreaterOrEqual(t, ready.Details.Memory.UsedBytes, ready.Details.Memory.MaxBytes)
	require.Equal(t, 1, strings.Count(s.logs.String(), "out of memory and refuses writes"), "%s", s.logs.String())
	require.NotContains(t, s.logs.String(), "store call failed")
}

// TestRedisMemoryConcurrentReaders: probes and scrapes that ask at once
// share one reading: callers that find it stale while another reads wait
// for that reading rather than each send INFO, and all get the same
// figures.
func TestRedisMemoryConcurrentReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.Start(t, redistest.Options{}).Client(t)
	m := &redisMemory{client: c}
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1000000000").Err())
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for range 50 {
				if w%2 == 0 {
					got, err := m.read(ctx)
					require.NoError(t, err)
					require.Positive(t, got.Used)
					require.EqualValues(t, 1000000000, got.Max)
				} else {
					used, limit, err := m.usage(ctx)
					require.NoError(t, err)
					require.Positive(t, used)
					require.EqualValues(t, 1000000000, limit)
				}
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, infoCalls(t, c), 1+int(time.Since(start)/memoryCacheFor))
}

// TestRedisMemoryReaderLeavesAtItsDeadline: a probe that finds another
// caller's reading of Redis's memory under way, on a Redis that does not
// answer, gives up at its own deadline rather than wait for the other's:
// /readyz answers within its timeout whatever a slow scrape is doing.
func TestRedisMemoryReaderLeavesAtItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	m := &redisMemory{client: srv.Client(t)}
	srv.Pause()
	t.Cleanup(srv.Resume)
	slow := make(chan error, 1)
	go func() {
		_, err := m.read(context.Background())
		slow <- err
	}()
	require.Eventually(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.reading != nil
	}, 10*time.Second, time.Millisecond, "the first read is under way")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.read(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second, "waited for the other read")
	srv.Resume()
	select {
	case <-slow: // answered, or timed out: either way it ended
	case <-time.After(15 * time.Second):
		require.FailNow(t, "the first read never ended")
	}
	got, err := m.read(context.Background())
	require.NoError(t, err, "read again once Redis answers")
	require.Positive(t, got.Used)
}

// TestRedisMemoryWhereINFOIsRefused: a Redis user that may not run INFO,
// which Herald otherwise runs with (checkRedis gives such a server the
// benefit of the doubt), leaves the memory gauges out as unknown, and
// does not count a Redis error at every scrape: an alert on
// herald_redis_errors_total would fire for as long as Herald runs on a
// Redis that answers every store call.
func TestRedisMemoryWhereINFOIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	require.NoError(t, srv.Client(t).Do(ctx, "ACL", "SETUSER", "herald", "on", ">secret", "~*", "&*", "+@all", "-info").Err())
	opts := srv.Options()
	opts.Username, opts.Password = "herald", "secret"
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(ctx).Err())

	m := metrics.New(&metrics.Config{RedisMemoryFunc: (&redisMemory{client: c}).usage})
	for range 3 {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, err := io.ReadAll(rec.Body)
		require.NoError(t, err)
		var errorLines []string
		for line := range strings.Lines(string(body)) {
			if strings.HasPrefix(line, metrics.RedisErrorsTotal+"{") || strings.HasPrefix(line, metrics.RedisMemoryUsedBytes+" ") {
				errorLines = append(errorLines, line)
			}
		}
		require.Empty(t, errorLines, "a refused INFO is no failed store call")
	}
}

// TestReadOnlyCommandsWriteNothing: the commands that only read, pointed at
// a namespace nothing has used (the wrong Redis, a misspelt namespace),
// answer as for an empty one and create nothing there; the first write
// records the namespace as before.
func TestReadOnlyCommandsWriteNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	keys := func() []string {
		t.Helper()
		got, err := server.Client(t).Keys(context.Background(), e.namespace+":*").Result()
		require.NoError(t, err)
		return got
	}
	for _, args := range [][]string{
		{"stats"}, {"stats", "--json"}, {"dlq", "list"}, {"endpoint", "list"}, {"pauses"},
	} {
		r := e.run(t, args...)
		require.NoError(t, r.err, "%v: %s", args, r.logs)
	}
	for _, args := range [][]string{{"status", "order-1"}, {"endpoint", "get", "m"}} {
		r := e.run(t, args...)
		require.ErrorContains(t, r.err, "not found", "%v", args)
	}
	require.Empty(t, keys(), "a command that reads wrote")

	require.NoError(t, e.run(t, "enqueue", "--topic", "jobs", "--id", "job-1").err)
	require.Contains(t, keys(), e.namespace+":meta")
	r := e.run(t, "status", "job-1")
	require.NoError(t, r.err, r.logs)
	require.Contains(t, r.out, "job-1")
}

// TestReadOnlyCommandsSendNoWrite watches, with MONITOR, what the commands
// that open the store read-only send to Redis on a namespace in use: none
// may send a command that writes Herald's keys. (Scripts are left out:
// the dead listing's is read-only, and MONITOR cannot tell.)
func TestReadOnlyCommandsSendNoWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	require.NoError(t, e.run(t, "enqueue", "--topic", "jobs", "--id", "job-1").err)
	e.dead(t, "jobs", "d1")

	ctx := context.Background()
	conn, err := net.Dial("tcp", server.Addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	lines := make(chan string, 100000)
	go func() {
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// MONITOR is on once it has echoed a command of ours.
	probe := server.Client(t)
	marker := e.namespace + ":monitor-probe"
	waitFor(t, 5*time.Second, "MONITOR on", func() bool {
		probe.Exists(ctx, marker)
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, marker) {
					return true
				}
			default:
				return false
			}
		}
	})

	for _, args := range [][]string{
		{"stats"}, {"dlq", "list"}, {"endpoint", "list"}, {"pauses"}, {"status", "job-1"}, {"status", "d1"},
	} {
		r := e.run(t, args...)
		require.NoError(t, r.err, "%v: %s", args, r.logs)
	}
	end := e.namespace + ":monitor-end"
	probe.Exists(ctx, end)
	writes := map[string]bool{"SET": true, "HSET": true, "HSETNX": true, "DEL": true, "UNLINK": true, "ZADD": true, "ZREM": true,
		"HDEL": true, "HINCRBY": true, "EXPIRE": true, "PEXPIRE": true, "LPUSH": true, "RPUSH": true, "SADD": true, "SREM": true,
		"PUBLISH": true, "XADD": true}
	var written []string
	deadline := time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case l := <-lines:
			if strings.Contains(l, end) {
				done = true
				break
			}
			f := strings.Fields(l)
			// +1700000000.123456 [0 127.0.0.1:5555] "CMD" "arg" ...
			if len(f) >= 4 && strings.Contains(l, e.namespace) && writes[strings.ToUpper(strings.Trim(f[3], `"`))] {
				written = append(written, l)
			}
		case <-deadline:
			t.Fatal("MONITOR never echoed the end marker")
		}
	}
	require.Empty(t, written, "writes sent by commands that only read")
}
