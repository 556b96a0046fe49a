// Package redisconf reads the settings of a Redis server that decide
// whether what Herald stores survives: maxmemory-policy (any policy but
// noeviction lets Redis drop keys, records Herald answered 201 for) and
// persistence (AOF or RDB). It is private plumbing of the herald command,
// which reads them when it connects and on every reconnect, warns, and
// shows them on /readyz and as gauges.
package redisconf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"
)

// EvictionPolicySafe is the only maxmemory-policy under which Redis never
// drops Herald's keys: at maxmemory, writes fail instead.
const EvictionPolicySafe = "noeviction"

// Settings are a server's data-safety settings.
type Settings struct {
	// MaxmemoryPolicy is the server's maxmemory-policy.
	MaxmemoryPolicy string `json:"maxmemory_policy,omitempty"`
	// AOF is appendonly; RDB is a non-empty save schedule.
	AOF bool `json:"aof"`
	RDB bool `json:"rdb"`
	// EvictionOK and PersistenceOK are nil when the settings are unknown.
	EvictionOK    *bool `json:"eviction_ok,omitempty"`
	PersistenceOK *bool `json:"persistence_ok,omitempty"`
	// Unknown says why the settings could not be read (CONFIG refused, as
	// managed Redis services do), and is empty when they were.
	Unknown string `json:"unknown,omitempty"`
}

// Read reads the settings of the server c is connected to, in one round
// trip. A server that refuses CONFIG GET gives Settings with Unknown set
// and the error.
func Read(ctx context.Context, c redis.Cmdable) (Settings, error) {
	var cmds [3]*redis.MapStringStringCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range []string{"maxmemory-policy", "appendonly", "save"} {
			cmds[i] = p.ConfigGet(ctx, name)
		}
		return nil
	})
	if err != nil {
		return Settings{Unknown: "CONFIG GET refused: " + err.Error()}, fmt.Errorf("read maxmemory-policy and persistence: %w", err)
	}
	s := Settings{
		MaxmemoryPolicy: cmds[0].Val()["maxmemory-policy"],
		AOF:             cmds[1].Val()["appendonly"] == "yes",
		RDB:             cmds[2].Val()["save"] != "",
	}
	eviction, persistence := s.MaxmemoryPolicy == EvictionPolicySafe, s.AOF || s.RDB
	s.EvictionOK, s.PersistenceOK = &eviction, &persistence
	return s, nil
}

// Watch reads a server's settings on every new connection (OnConnect) and
// logs what is unsafe once per change, so a Redis restarted with other
// settings is noticed on reconnect, not only at start. It is safe for
// concurrent use.
type Watch struct {
	// Log receives the warnings. Required.
	Log *slog.Logger

	// mu guards last and seen.
	mu   sync.Mutex
	last Settings
	seen bool
}

// OnConnect reads the settings on a new connection: a go-redis OnConnect
// hook. It never fails the connection.
func (w *Watch) OnConnect(ctx context.Context, cn *redis.Conn) error {
	s, err := Read(ctx, cn)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	w.mu.Lock()
	changed := !w.seen || !equal(w.last, s)
	w.last, w.seen = s, true
	w.mu.Unlock()
	if !changed {
		return nil
	}
	switch {
	case err != nil:
		w.Log.WarnContext(ctx, "herald: Redis refused CONFIG GET, so its maxmemory-policy and persistence are unknown: "+
			"make sure yourself that maxmemory-policy is noeviction and that AOF or RDB is on", "error", err)
	default:
		if !*s.EvictionOK {
			w.Log.ErrorContext(ctx, "herald: REDIS MAY EVICT NOTIFICATIONS: its maxmemory-policy is "+s.MaxmemoryPolicy+
				", so at maxmemory it deletes keys, records Herald has accepted among them; set maxmemory-policy noeviction",
				"maxmemory_policy", s.MaxmemoryPolicy)
		}
		if !*s.PersistenceOK {
			w.Log.WarnContext(ctx, "herald: Redis keeps nothing on disk (neither AOF nor RDB is on), so a Redis restart loses every notification; "+
				"turn on appendonly or a save schedule")
		}
	}
	return nil
}

// Settings returns the settings last read, and false before any was.
func (w *Watch) Settings() (Settings, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.seen
}

func equal(a, b Settings) bool {
	return a.MaxmemoryPolicy == b.MaxmemoryPolicy && a.AOF == b.AOF && a.RDB == b.RDB && a.Unknown == b.Unknown
}
