package redislog

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
)

// TestRepeats: a message go-redis repeats is logged once, then again once
// RepeatEvery has passed, saying how many repeats went unlogged; another
// message is logged on its own.
func TestRepeats(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	l := newLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})), func() time.Time { return now })
	ctx := context.Background()
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	for i := range 50 {
		l.Printf(ctx, dial, 5, "connect: connection refused")
		if i == 10 {
			l.Printf(ctx, "redis: failed to close connection: %v", "EOF")
		}
		now = now.Add(100 * time.Millisecond)
	}
	now = now.Add(RepeatEvery)
	l.Printf(ctx, dial, 5, "connect: connection refused")
	require.Equal(t, `level=WARN msg="redis: connection pool: failed to dial after 5 attempts: connect: connection refused"
level=WARN msg="redis: failed to close connection: EOF"
level=WARN msg="redis: connection pool: failed to dial after 5 attempts: connect: connection refused" repeats_unlogged=49
`, buf.String())
}

// TestRoute: once routed, go-redis's own message about a Redis it cannot
// reach goes to the logger given, where it went to stderr in go-redis's
// format; repeated, it is logged once.
func TestRoute(t *testing.T) {
	var buf heraldtest.Buffer
	Route(slog.New(slog.NewTextHandler(&buf, nil)))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	for range 12 {
		require.Error(t, c.Ping(context.Background()).Err())
	}
	require.Equal(t, 1, strings.Count(buf.String(), "failed to dial"), buf.String())
}
