// Package redistest starts real redis-server processes for tests, each on a
// free loopback port, and stops them when the test ends. It is for tests
// and the comparison under bench/ only: production packages must not import
// it.
//
// It never touches port 6379, and a missing redis-server is a test failure
// that says how to install one, never a skip.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// MissingHint tells what to do when redis-server cannot be found.
const MissingHint = "redis-server not found on PATH: run `make test` (it installs redis-server with apt) or install Redis 6.2+ yourself"

// Options configure a server.
type Options struct {
	// AOF turns on the append-only file with fsync on every write, in the
	// server's own temporary directory, so a restart keeps the data.
	AOF bool
	// Args are extra redis-server arguments, such as "--cluster-enabled yes";
	// they override the ones Start sets ("--appendfsync everysec" after AOF).
	Args []string
	// Port is the port to listen on, for a test that points Herald at an
	// address before a server answers there. Default: a free one.
	Port int

	sentinelConf string // the configuration file of a Sentinel
}

// Server is one redis-server process owned by a test.
type Server struct {
	// Addr is host:port on loopback.
	Addr string

	opts Options
	dir  string
	port int

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd
}

var nsSeq atomic.Int64

// Start starts a server for tb and stops it in tb.Cleanup.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	dir := tb.TempDir()
	s, err := StartDir(dir, opts)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// RunMain is the TestMain of a package whose tests share one server: it
// starts the server into *srv, runs the tests, stops the server and exits
// with the tests' status. A server that does not start fails the run.
func RunMain(m *testing.M, srv **Server) {
	ClearConfigEnv()
	dir, err := os.MkdirTemp("", "herald-redis")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		os.Exit(1)
	}
	if *srv, err = StartDir(dir, Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		os.Exit(1)
	}
	code := m.Run()
	(*srv).Stop()
	_ = os.RemoveAll(dir)
	if code == 0 {
		code = CheckLeaks()
	}
	os.Exit(code)
}

// ClearConfigEnv unsets every HERALD_ variable of the environment, which
// herald reads as configuration: one a developer exported, such as
// HERALD_REDIS_ADDRS for a tour, would otherwise reach the tests and the
// herald processes they start, pointing them elsewhere. Tests that mean
// to configure through the environment set their own (t.Setenv, or a
// child's Env). Every package's TestMain calls it (through RunMain or
// VerifyMain).
func ClearConfigEnv() {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "HERALD_") {
			_ = os.Unsetenv(name)
		}
	}
}

// CheckLeaks reports goroutines the tests left running, and returns the
// exit status a TestMain should end with: 0 when there are none. Every
// package's TestMain calls it (through RunMain or VerifyMain), so a
// dispatcher or subscription that outlives its test fails the run.
func CheckLeaks() int {
	if err := goleak.Find(leakOptions...); err != nil {
		fmt.Fprintln(os.Stderr, "redistest: goroutines leaked:", err)
		return 1
	}
	return 0
}

// leakOptions ignore go-redis's redial loop: after a failed dial its pool
// probes the address once a second until the probe succeeds, even after
// the client is closed, so tests that stop Redis leave one behind for a
// while.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
}

// VerifyMain is the TestMain of a package that needs no shared server: it
// runs the tests, then fails the run on leaked goroutines.
func VerifyMain(m *testing.M) {
	ClearConfigEnv()
	code := m.Run()
	if code == 0 {
		code = CheckLeaks()
	}
	os.Exit(code)
}

// StartDir starts a server whose files live in dir. It is for TestMain,
// which has no testing.TB; the caller must call Stop.
func StartDir(dir string, opts Options) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New(MissingHint)
	}
	s := &Server{opts: opts, dir: dir}
	var lastErr error
	for range 5 { // a free port can be taken between probe and bind
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		if opts.Port != 0 {
			port = opts.Port
		}
		s.port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = s.launch(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// FreePort returns a loopback port nothing listens on now (never 6379).
//
// It picks below the kernel's ephemeral range when there is room: a port
// from that range, once probed and released, can be taken by any outgoing
// connection before the server binds it, and the tests make thousands. The
// band ends 10,000 below the range so that a cluster node's bus port (its
// port + 10,000) stays out of it too.
func FreePort() (int, error) {
	lo, hi := portBand()
	for range 100 {
		port := 0
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port == 0 {
				return 0, fmt.Errorf("find a free port: %w", err)
			}
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 6379 {
			return port, nil
		}
	}
	return 0, errors.New("no free port")
}

// FreeAddr is FreePort as a loopback host:port, for a server other than
// redis-server that a test starts.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// portBand is the range of ports FreePort draws from, [lo, hi), or an empty
// one when the ephemeral range leaves no room below it, and the kernel then
// picks.
func portBand() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, 0
	}
	ephemeral, err := strconv.Atoi(fields[0])
	if err != nil || ephemeral < 21024 {
		return 0, 0
	}
	return ephemeral - 20000, ephemeral - 10000
}

func (s *Server) launch() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	switch {
	case s.opts.sentinelConf != "":
		// A Sentinel rewrites its own configuration file as it learns the
		// replicas, the other Sentinels and failovers.
		args = append([]string{s.opts.sentinelConf, "--sentinel"}, args...)
	case s.opts.AOF:
		args = append(args, "--save", "", "--dbfilename", "dump.rdb", "--appendonly", "yes", "--appendfsync", "always")
	default:
		args = append(args, "--save", "", "--dbfilename", "dump.rdb", "--appendonly", "no")
	}
	args = append(args, s.opts.Args...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.port, lastLines(string(log), 5))
		default:
		}
		if ping(s.Addr) == nil {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("redis-server on port %d not ready within 10s", s.port)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// ping reports whether a server answers PING at addr, on one connection
// of its own. It does not use go-redis: a pool whose dial is refused, as
// when a stopping server closes its listener, retries 5 times 100 ms apart
// and logs it, which made a wait for a server to start or stop 400 ms
// longer than it is.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if reply != "+PONG\r\n" {
		// A server loading its data answers -LOADING.
		return fmt.Errorf("PING: %s", strings.TrimSpace(reply))
	}
	return nil
}

// Client returns a new client of the server, closed at tb's cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(s.Options())
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Options returns client options for the server with short timeouts, so a
// test of an outage fails fast instead of hanging.
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Addr:         s.Addr,
		DialTimeout:  time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		MaxRetries:   1,
	}
}

// Kill ends the server with SIGKILL, as a crash would.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop ends the server with SIGTERM and waits for it. A second Stop does
// nothing.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	for i := 0; i < 500 && ping(s.Addr) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	// Wait until the process is gone so that Restart can bind the port.
	for i := 0; i < 500; i++ {
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Pause freezes the server with SIGSTOP, as a machine that stops
// answering would, until Resume. Its clients' calls hang meanwhile.
func (s *Server) Pause() { s.send(syscall.SIGSTOP) }

// Resume wakes a paused server with SIGCONT.
func (s *Server) Resume() { s.send(syscall.SIGCONT) }

func (s *Server) send(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// StartReplica starts a server replicating master for tb, and waits until
// its first sync is done.
func StartReplica(tb testing.TB, master *Server) *Server {
	tb.Helper()
	// A master waits 5s by default before a diskless sync, for more
	// replicas to share it.
	if out, err := exec.Command("redis-cli", "-p", strconv.Itoa(master.port), "config", "set", "repl-diskless-sync-delay", "0").CombinedOutput(); err != nil {
		tb.Fatalf("redistest: %v: %s", err, out)
	}
	r := Start(tb, Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)}})
	// Synced once a write on the master is acknowledged by the replica, as
	// WAIT counts it: the link can be up a moment before the stream flows.
	for i := 0; ; i++ {
		// One connection: WAIT counts the writes of its own connection.
		cli := exec.Command("redis-cli", "-p", strconv.Itoa(master.port))
		cli.Stdin = strings.NewReader("INCR redistest:sync\nWAIT 1 50\n")
		out, _ := cli.Output()
		if lines := strings.Fields(string(out)); len(lines) == 2 && lines[1] == "1" {
			return r
		}
		if i == 200 {
			tb.Fatalf("redistest: replica of %s did not acknowledge a write within 12s: %s", master.Addr, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts the server again on the same port and directory (after Kill
// or Stop); with AOF the data survives.
func (s *Server) Restart() error {
	s.Stop()
	return s.launch()
}

// Namespace returns a namespace unique within the test binary, so that tests
// sharing one server never see each other's keys.
func Namespace(tb testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(tb.Name())
	return fmt.Sprintf("t%d-%s", nsSeq.Add(1), name)
}

// Cluster is a Redis Cluster, each node a Server.
type Cluster struct {
	// Nodes are the masters.
	Nodes []*Server
	// Replicas are the replicas, if the cluster was started with some.
	Replicas []*Server
}

// StartCluster starts a cluster of masters nodes (3 or more) for tb, with the
// slots spread evenly, and waits until it serves requests.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	return StartClusterReplicas(tb, masters, 0)
}

// StartClusterReplicas is StartCluster with replicas replicas of each
// master, and waits as well until each replica has synced, so that a WAIT
// counts it and a failover can promote it.
func StartClusterReplicas(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Fatalf("redistest: redis-cli not found on PATH (it comes with redis-server): %v", err)
	}
	var nodes []*Server
	args := []string{"--cluster", "create"}
	for range masters * (1 + replicas) {
		s := Start(tb, Options{Args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			// A master waits 5s by default before a diskless sync, for
			// more replicas to share it.
			"--repl-diskless-sync-delay", "0",
		}})
		nodes = append(nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: create cluster: %v: %s", err, lastLines(string(out), 5))
	}
	c := &Cluster{}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range nodes {
		for !s.clusterOK() {
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ready within 20s", s.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// redis-cli picks which nodes replicate which: ask each.
		if s.masterPort() == 0 {
			c.Nodes = append(c.Nodes, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	for _, s := range c.Nodes {
		for replicas > 0 && !s.acknowledgedBy(replicas) {
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: the replicas of cluster node %s not synced within 20s", s.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, s := range nodes {
		for !s.slotsList(replicas) {
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s does not list the replicas of every slot within 20s", s.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// slotsList reports whether the node's CLUSTER SLOTS names replicas
// replicas of every slot range: a client learns the nodes it may ask for
// the slot map from that answer, which names a replica only once the
// cluster bus has told the node of it, a while after the replica synced.
func (s *Server) slotsList(replicas int) bool {
	c := redis.NewClient(s.Options())
	defer c.Close()
	//lint:ignore SA1019 this is the answer a cluster client learns its nodes from
	slots, err := c.ClusterSlots(context.Background()).Result()
	if err != nil || len(slots) == 0 {
		return false
	}
	for _, r := range slots {
		if len(r.Nodes) != 1+replicas {
			return false
		}
	}
	return true
}

// PauseReplicas hangs every replica (SIGSTOP), as a stopped host would,
// until tb's cleanup resumes them.
func (c *Cluster) PauseReplicas(tb testing.TB) {
	tb.Helper()
	for _, r := range c.Replicas {
		r.Pause()
		tb.Cleanup(r.Resume)
	}
}

// ReplicaOf returns a replica of master, or nil when it has none.
func (c *Cluster) ReplicaOf(master *Server) *Server {
	for _, r := range c.Replicas {
		if r.masterPort() == master.port {
			return r
		}
	}
	return nil
}

// masterPort is the port of the master the server replicates, 0 for a
// master.
func (s *Server) masterPort() int {
	c := redis.NewClient(s.Options())
	defer c.Close()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(line, "master_port:"); ok {
			port, _ := strconv.Atoi(v)
			return port
		}
	}
	return 0
}

// acknowledgedBy reports whether a cluster master's replicas replicas
// acknowledge a write, as WAIT counts them: a replica's link can be up a
// while before it acknowledges the first one.
func (s *Server) acknowledgedBy(replicas int) bool {
	c := redis.NewClient(s.Options())
	defer c.Close()
	ctx := context.Background()
	conn := c.Conn()
	defer conn.Close()
	// One connection, as WAIT counts the writes of its own; and a key of
	// the master's slots, as another answers MOVED.
	for i := 0; ; i++ {
		err := conn.Incr(ctx, "redistest:sync:"+strconv.Itoa(i)).Err()
		if err == nil {
			break
		}
		if !redis.HasErrorPrefix(err, "MOVED") || i == 1000 {
			return false
		}
	}
	got, err := conn.Do(ctx, "wait", replicas, 50).Int()
	return err == nil && got >= replicas
}

func (s *Server) clusterOK() bool {
	c := redis.NewClient(s.Options())
	defer c.Close()
	info, err := c.ClusterInfo(context.Background()).Result()
	return err == nil && strings.Contains(info, "cluster_state:ok")
}

// Client returns a cluster client, closed at tb's cleanup. opts change
// its options, for a test that injects a dialer or shortens a timeout.
func (c *Cluster) Client(tb testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	tb.Helper()
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	o := &redis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
	for _, opt := range opts {
		opt(o)
	}
	cc := redis.NewClusterClient(o)
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// MoveSlot moves slot, with its keys, from its master to another master,
// as redis-cli --cluster reshard does: batch keys per MIGRATE, pause
// between batches (0: none), so that a test's calls meet the slot half
// moved, answered ASK or TRYAGAIN. It waits until every master agrees
// where the slot is, and returns the address of its new master.
func (c *Cluster) MoveSlot(tb testing.TB, slot, batch int, pause time.Duration) string {
	tb.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	clients := map[string]*redis.Client{}
	for _, node := range c.Nodes {
		cl := node.Client(tb)
		clients[node.Addr] = cl
		id, err := cl.ClusterMyID(ctx).Result()
		if err != nil {
			tb.Fatalf("redistest: cluster myid of %s: %v", node.Addr, err)
		}
		ids[node.Addr] = id
	}
	from := c.slotMaster(clients[c.Nodes[0].Addr], slot)
	if clients[from] == nil {
		tb.Fatalf("redistest: no master serves slot %d", slot)
	}
	var to string
	for _, node := range c.Nodes {
		if node.Addr != from {
			to = node.Addr
			break
		}
	}
	src, dst := clients[from], clients[to]
	do := func(cl *redis.Client, args ...any) {
		tb.Helper()
		if err := cl.Do(ctx, args...).Err(); err != nil {
			tb.Fatalf("redistest: move slot %d: %v: %v", slot, args, err)
		}
	}
	do(dst, "cluster", "setslot", slot, "importing", ids[from])
	do(src, "cluster", "setslot", slot, "migrating", ids[to])
	host, port, _ := net.SplitHostPort(to)
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, batch).Result()
		if err != nil {
			tb.Fatalf("redistest: keys in slot %d: %v", slot, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		do(src, args...)
		time.Sleep(pause)
	}
	for _, cl := range []*redis.Client{dst, src} {
		do(cl, "cluster", "setslot", slot, "node", ids[to])
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, node := range c.Nodes {
		for c.slotMaster(clients[node.Addr], slot) != to {
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: node %s did not learn within 10s that slot %d moved", node.Addr, slot)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return to
}

// slotMaster returns the address of the master of slot as the node cl
// talks to sees it, "" when it cannot tell.
func (c *Cluster) slotMaster(cl *redis.Client, slot int) string {
	shards, err := cl.ClusterShards(context.Background()).Result()
	if err != nil {
		return ""
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > int64(slot) || int64(slot) > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				}
			}
		}
	}
	return ""
}

// SentinelOptions configure the Sentinels StartSentinels starts.
type SentinelOptions struct {
	// MasterName is the name the Sentinels monitor the master under.
	MasterName string
	// Quorum is how many Sentinels must agree the master is down. Default
	// a majority.
	Quorum int
	// DownAfter is how long the master must not answer to be down.
	// Default 500ms, so that a test's failover takes a second or two.
	DownAfter time.Duration
	// FailoverTimeout bounds a failover. Default 2s.
	FailoverTimeout time.Duration
}

// Sentinels are Redis Sentinels watching one master.
type Sentinels struct {
	Nodes []*Server
	opts  SentinelOptions
}

// StartSentinels starts n Sentinels watching master for tb, and waits until
// each knows the others and replicas replicas of master, so a failover can
// start as soon as master fails.
func StartSentinels(tb testing.TB, master *Server, n, replicas int, opts SentinelOptions) *Sentinels {
	tb.Helper()
	if opts.Quorum == 0 {
		opts.Quorum = n/2 + 1
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = 500 * time.Millisecond
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = 2 * time.Second
	}
	ss := &Sentinels{opts: opts}
	for range n {
		dir := tb.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
			"sentinel down-after-milliseconds %[1]s %[4]d\nsentinel failover-timeout %[1]s %[5]d\n",
			opts.MasterName, master.port, opts.Quorum, opts.DownAfter.Milliseconds(), opts.FailoverTimeout.Milliseconds())
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s, err := StartDir(dir, Options{sentinelConf: conf})
		if err != nil {
			tb.Fatalf("redistest: sentinel: %v", err)
		}
		tb.Cleanup(s.Stop)
		ss.Nodes = append(ss.Nodes, s)
	}
	// Sentinels find each other through hello messages every 2s.
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range ss.Nodes {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second})
		for !ss.ready(c, n-1, replicas) {
			if time.Now().After(deadline) {
				_ = c.Close()
				tb.Fatalf("redistest: sentinel %s did not see %d other sentinels and %d replicas within 20s", s.Addr, n-1, replicas)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return ss
}

func (ss *Sentinels) ready(c *redis.SentinelClient, others, replicas int) bool {
	ctx := context.Background()
	peers, err := c.Sentinels(ctx, ss.opts.MasterName).Result()
	if err != nil || len(peers) < others {
		return false
	}
	got, err := c.Replicas(ctx, ss.opts.MasterName).Result()
	if err != nil {
		return false
	}
	up := 0
	for _, r := range got {
		if !strings.Contains(r["flags"], "down") && r["master-link-status"] == "ok" {
			up++
		}
	}
	return up >= replicas
}

// Addrs returns the Sentinels' addresses.
func (ss *Sentinels) Addrs() []string {
	addrs := make([]string, len(ss.Nodes))
	for i, s := range ss.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Master returns the address the first Sentinel names as the master.
func (ss *Sentinels) Master(ctx context.Context) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: ss.Nodes[0].Addr, DialTimeout: time.Second})
	defer c.Close()
	got, err := c.GetMasterAddrByName(ctx, ss.opts.MasterName).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(got[0], got[1]), nil
}

// Fill fills the server c is connected to up to its maxmemory, as writes
// that outgrew it would, for a test of a Redis that is full: it sets
// maxmemory a little above what the server uses, writes 4 KiB values
// (keys filler:0, filler:1, ...) until the server refuses one with OOM,
// then sets maxmemory 512 KiB below what it then uses, so that every write
// that may grow memory is refused, however small, while deletes still go
// through: Redis counts its clients' buffers in used_memory and frees them
// lazily, so its use falls by tens of KiB after a burst of requests, and a
// limit just below it would soon let writes through again. lift sets maxmemory to 0 (no limit) again; the fillers stay.
// Fill a server of the test's own (Start), never a shared one.
func Fill(tb testing.TB, c *redis.Client) (lift func()) {
	tb.Helper()
	ctx := context.Background()
	used := func() int64 {
		tb.Helper()
		n, err := usedMemory(ctx, c)
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		return n
	}
	setMax := func(n int64) {
		tb.Helper()
		if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(n, 10)).Err(); err != nil {
			tb.Fatalf("redistest: set maxmemory: %v", err)
		}
	}
	setMax(used() + 256<<10)
	for i := 0; ; i++ {
		err := c.Set(ctx, "filler:"+strconv.Itoa(i), strings.Repeat("x", 4096), 0).Err()
		if err == nil {
			continue
		}
		if !strings.HasPrefix(err.Error(), "OOM") {
			tb.Fatalf("redistest: fill: want an OOM refusal, got %v", err)
		}
		break
	}
	setMax(max(used()-512<<10, 1))
	return func() { tb.Helper(); setMax(0) }
}

// usedMemory returns the used_memory of the server c is connected to.
// (redisconf.Memory reads what Redis counts against maxmemory for Herald;
// redisconf's own tests start servers with this package, which therefore
// cannot import it.)
func usedMemory(ctx context.Context, c redis.Cmdable) (int64, error) {
	info, err := c.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	return strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
}
