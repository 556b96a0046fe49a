// Package redisconf reads the settings of a Redis server that decide
// whether Herald runs on it and whether what Herald stores survives: its
// version (Herald needs VersionMin), maxmemory-policy (any policy but
// noeviction lets Redis drop keys, records Herald answered 201 for),
// persistence (AOF or RDB), and its memory against maxmemory (Memory). It is private plumbing of the herald command,
// which reads them when it connects and on every reconnect, refuses a
// server too old at start, warns, and shows them on /readyz and as gauges.
package redisconf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// EvictionPolicySafe is the only maxmemory-policy under which Redis never
// drops Herald's keys: at maxmemory, writes fail instead.
const EvictionPolicySafe = "noeviction"

// VersionMin is the oldest Redis Herald runs on: its scripts call ZMSCORE
// and LPOP with a count, both new in 6.2, and on an older server every one
// of them fails.
const VersionMin = "6.2"

// VersionError says that a server is older than VersionMin.
type VersionError struct {
	// Version is the server's redis_version.
	Version string
}

// Error implements error.
func (e *VersionError) Error() string {
	return "Redis " + e.Version + " is too old: Herald needs Redis " + VersionMin +
		" or newer (its scripts call ZMSCORE and LPOP with a count)"
}

// CheckVersion returns a *VersionError when version, a redis_version such
// as 7.0.15, is older than VersionMin. A version it cannot read, such as
// "" when INFO was refused, is not refused: Herald cannot tell.
func CheckVersion(version string) error {
	have, ok := versionNumbers(version)
	if !ok {
		return nil
	}
	want, _ := versionNumbers(VersionMin)
	for i := range want {
		if have[i] != want[i] {
			if have[i] < want[i] {
				return &VersionError{Version: version}
			}
			return nil
		}
	}
	return nil
}

// versionNumbers reads major.minor[.patch...] as major and minor, compared
// as numbers: 6.10 is newer than 6.2.
func versionNumbers(v string) ([2]int, bool) {
	var out [2]int
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return out, false
	}
	for i := range out {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// ParseVersion returns the redis_version field of an INFO reply, or "".
func ParseVersion(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

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
	// Version is the server's redis_version, read with INFO server, and
	// VersionOK whether it is at least VersionMin; "" and nil when INFO was
	// refused.
	Version   string `json:"version,omitempty"`
	VersionOK *bool  `json:"version_ok,omitempty"`
}

// Read reads the settings of the server c is connected to, in one round
// trip. A server that refuses CONFIG GET gives Settings with Unknown set,
// and its version when INFO answered, and the error.
func Read(ctx context.Context, c redis.Cmdable) (Settings, error) {
	var cmds [3]*redis.MapStringStringCmd
	var info *redis.StringCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range []string{"maxmemory-policy", "appendonly", "save"} {
			cmds[i] = p.ConfigGet(ctx, name)
		}
		info = p.Info(ctx, "server")
		return nil
	})
	var s Settings
	if info.Err() == nil {
		s.Version = ParseVersion(info.Val())
		if s.Version != "" {
			ok := CheckVersion(s.Version) == nil
			s.VersionOK = &ok
		}
	}
	// err is the first command's error, in the order sent, or the
	// pipeline's when it could not run and go-redis set none: CONFIG's
	// unless INFO's alone.
	if err != nil && err != info.Err() {
		s.Unknown = "CONFIG GET refused: " + err.Error()
		return s, fmt.Errorf("read maxmemory-policy and persistence: %w", err)
	}
	s.MaxmemoryPolicy = cmds[0].Val()["maxmemory-policy"]
	s.AOF = cmds[1].Val()["appendonly"] == "yes"
	s.RDB = cmds[2].Val()["save"] != ""
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
	w.report(ctx, s, err)
	return nil
}

// report records s, read with err, and logs what is wrong with it unless
// the settings last read were the same.
func (w *Watch) report(ctx context.Context, s Settings, err error) {
	w.mu.Lock()
	changed := !w.seen || !equal(w.last, s)
	w.last, w.seen = s, true
	w.mu.Unlock()
	if !changed {
		return
	}
	if s.VersionOK != nil && !*s.VersionOK {
		// Found on a reconnect: herald serve refuses such a server at start.
		w.Log.ErrorContext(ctx, "herald: "+(&VersionError{Version: s.Version}).Error()+
			"; every enqueue and attempt fails until Redis is upgraded", "redis_version", s.Version)
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
}

// Check returns a *VersionError when the server last read is older than
// VersionMin, and nil otherwise: a readiness check, since on such a server
// every enqueue and attempt fails.
func (w *Watch) Check() error {
	s, _ := w.Settings()
	if s.VersionOK != nil && !*s.VersionOK {
		return &VersionError{Version: s.Version}
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
	return a.MaxmemoryPolicy == b.MaxmemoryPolicy && a.AOF == b.AOF && a.RDB == b.RDB && a.Unknown == b.Unknown &&
		a.Version == b.Version
}

// Memory returns what the server c is connected to counts against its
// maxmemory, and that maxmemory (0: no limit), from INFO memory: at
// maxmemory Redis refuses the writes that would grow it. Redis leaves the
// replicas' share of its replication buffer and the AOF buffer out of that
// count, so used is used_memory less mem_not_counted_for_evict: with a
// stalled replica used_memory can pass maxmemory while writes still go
// through.
func Memory(ctx context.Context, c redis.Cmdable) (used, limit int64, err error) {
	info, err := c.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("INFO memory: %w", err)
	}
	for field, v := range map[string]*int64{"used_memory": &used, "maxmemory": &limit} {
		if *v, err = strconv.ParseInt(info["Memory"][field], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("INFO memory %s: %w", field, err)
		}
	}
	// Absent from servers that speak Redis's protocol but keep no such
	// buffers apart; used_memory is then all there is.
	if v, ok := info["Memory"]["mem_not_counted_for_evict"]; ok {
		buffers, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("INFO memory mem_not_counted_for_evict: %w", err)
		}
		used -= buffers
	}
	return used, limit, nil
}
