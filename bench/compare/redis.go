package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/internal/redistest"
)

// server is a redis-server of the comparison's own, on a free loopback port
// (never 6379), without persistence, so that every scenario of every system
// starts from an empty Redis whose counters it alone moves. The tests'
// helper starts it, so that it goes with a comparison stopped by a signal
// and its start is not slowed by go-redis's dial retries.
type server struct {
	*redistest.Server
	dir string
	// rdb is the comparison's own connection, for INFO and SLOWLOG; the
	// systems under test open theirs.
	rdb *redis.Client
}

// startServer starts a redis-server and waits until it answers PING.
func startServer() (*server, error) {
	dir, err := os.MkdirTemp("", "herald-compare")
	if err != nil {
		return nil, err
	}
	rs, err := redistest.StartDir(dir, redistest.Options{Args: []string{"--loglevel", "warning"}})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &server{Server: rs, dir: dir, rdb: redis.NewClient(&redis.Options{Addr: rs.Addr})}, nil
}

func (s *server) stop() {
	_ = s.rdb.Close()
	s.Stop()
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
