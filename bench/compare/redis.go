package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server of the comparison's own, on a free loopback port
// (never 6379), without persistence, so that every scenario of every system
// starts from an empty Redis whose counters it alone moves.
type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	// rdb is the comparison's own connection, for INFO and SLOWLOG; the
	// systems under test open theirs.
	rdb *redis.Client
}

// startServer starts a redis-server and waits until it answers PING.
func startServer() (*server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server not found on PATH: install Redis 6.2+ (apt-get install redis-server)")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "herald-compare")
	if err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	// A comparison stopped by a signal runs no deferred stop: the server
	// goes with it rather than outliving it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: s.addr})
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if s.rdb.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		if time.Now().After(end) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING in 10s", s.addr)
		}
	}
}

// freePort asks the kernel for a free loopback port, refusing 6379.
func freePort() (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 6379 {
			return port, nil
		}
	}
}

func (s *server) stop() {
	_ = s.rdb.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

// cost is what a redis-server has done and holds so far.
type cost struct {
	// calls counts commands, those run inside scripts included, but not
	// the comparison's own INFO, SLOWLOG and CONFIG.
	calls int64
	// cpu is the server's user and system CPU time.
	cpu time.Duration
	// memory is used_memory in bytes.
	memory int64
}

func (s *server) cost() (cost, error) {
	info, err := s.rdb.Info(context.Background(), "commandstats", "cpu", "memory").Result()
	if err != nil {
		return cost{}, err
	}
	var c cost
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, stats, _ := strings.Cut(rest, ":")
			if name == "info" || name == "ping" || strings.HasPrefix(name, "slowlog") || strings.HasPrefix(name, "config") {
				continue
			}
			v, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			c.calls += n
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			switch k {
			case "used_cpu_sys", "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				c.cpu += time.Duration(f * float64(time.Second))
			case "used_memory":
				c.memory, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return c, nil
}

func (c cost) sub(o cost) cost {
	return cost{calls: c.calls - o.calls, cpu: c.cpu - o.cpu, memory: c.memory - o.memory}
}

// watchSlowCalls makes the server log every call of threshold or longer,
// starting now.
func (s *server) watchSlowCalls(threshold time.Duration) error {
	ctx := context.Background()
	if err := s.rdb.ConfigSet(ctx, "slowlog-log-slower-than", strconv.FormatInt(threshold.Microseconds(), 10)).Err(); err != nil {
		return err
	}
	if err := s.rdb.ConfigSet(ctx, "slowlog-max-len", "1024").Err(); err != nil {
		return err
	}
	if err := s.rdb.ConfigSet(ctx, "latency-monitor-threshold", "1").Err(); err != nil {
		return err
	}
	if err := s.rdb.Do(ctx, "LATENCY", "RESET").Err(); err != nil {
		return err
	}
	return s.rdb.Do(ctx, "SLOWLOG", "RESET").Err()
}

// longestCalls reads the slow log: the longest call it holds, and the
// longest that was not a script. On a machine shared with other work, the
// latter shows how much of a call's time is the server being descheduled:
// a plain HSET or ZADD of a few dozen fields takes microseconds. Both are
// zero when no call reached the threshold. LATENCY LATEST's "command"
// event (at least 1ms) is taken too, in case the slow log overflowed.
func (s *server) longestCalls() (longest, plain time.Duration, err error) {
	ctx := context.Background()
	logs, err := s.rdb.SlowLogGet(ctx, 1024).Result()
	if err != nil {
		return 0, 0, err
	}
	for _, l := range logs {
		longest = max(longest, l.Duration)
		if len(l.Args) > 0 && !strings.HasPrefix(strings.ToLower(l.Args[0]), "eval") {
			plain = max(plain, l.Duration)
		}
	}
	latest, err := s.rdb.Do(ctx, "LATENCY", "LATEST").Slice()
	if err != nil {
		return 0, 0, err
	}
	for _, e := range latest {
		if row, ok := e.([]any); ok && len(row) >= 4 && row[0] == "command" {
			if ms, ok := row[3].(int64); ok {
				longest = max(longest, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	return longest, plain, nil
}
