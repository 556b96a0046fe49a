// Package redislog sends go-redis's own messages to a slog.Logger, each
// logged at most once every RepeatEvery: go-redis repeats a failed dial on
// every retry while Redis is down, several times a second, on a logger of
// its own that is process-wide. The herald command and the root package's
// RouteRedisLogs use it.
package redislog

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RepeatEvery is how often a message go-redis keeps repeating is logged
// again.
const RepeatEvery = 30 * time.Second

// Route sends go-redis's own messages to log as warnings, each logged at
// most once every RepeatEvery with how many repeats went unlogged. The
// setting is process-wide.
func Route(log *slog.Logger) {
	redis.SetLogger(newLogger(log, time.Now))
}

func newLogger(log *slog.Logger, now func() time.Time) *logger {
	return &logger{log: log, nowFunc: now, last: map[string]logged{}}
}

// logger is Route's go-redis logger.
type logger struct {
	log     *slog.Logger
	nowFunc func() time.Time

	mu sync.Mutex
	// last holds, by format, when a message was last logged and how many
	// times it came since.
	last map[string]logged
}

type logged struct {
	at       time.Time
	unlogged int
}

// Printf implements go-redis's logging interface. Messages are told apart
// by their format, since their arguments (a connection's number, an
// attempt count) vary between repeats of one message.
func (l *logger) Printf(ctx context.Context, format string, v ...any) {
	now := l.nowFunc()
	l.mu.Lock()
	prev, seen := l.last[format]
	if seen && now.Sub(prev.at) < RepeatEvery {
		prev.unlogged++
		l.last[format] = prev
		l.mu.Unlock()
		return
	}
	l.last[format] = logged{at: now}
	l.mu.Unlock()
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	if prev.unlogged > 0 {
		l.log.WarnContext(ctx, "redis: "+msg, "repeats_unlogged", prev.unlogged)
		return
	}
	l.log.WarnContext(ctx, "redis: "+msg)
}
