// Package redisconf reads the settings of a Redis server that decide
// whether Herald runs on it and whether what Herald stores survives: its
// version (Herald needs VersionMin), maxmemory-policy (any policy but
// noeviction lets Redis drop keys, records Herald answered 201 for),
// persistence (AOF or RDB), and its memory against maxmemory (Memory). It is
// private plumbing of the herald command, which reads them when it connects
// and on every reconnect, refuses a server too old at start, warns, and
// shows them on /readyz and as gauges; its bench refuses a server that
// evicts.
// Of a Cluster it keeps each node's settings and shows the worst.
package redisconf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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
	if slices.Compare(have[:len(want)], want) < 0 {
		return &VersionError{Version: version}
	}
	return nil
}

// versionNumbers reads the numbers of major.minor[.patch...], up to the
// first part that is not one, to be compared as numbers: 6.10 is newer
// than 6.2. It fails without at least major and minor.
func versionNumbers(v string) ([]int, bool) {
	var out []int
	for part := range strings.SplitSeq(v, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			break
		}
		out = append(out, n)
	}
	return out, len(out) >= 2
}

// ParseVersion returns the redis_version field of an INFO reply, or "".
func ParseVersion(info string) string { return infoField(info, "redis_version") }

// infoField returns the field name of an INFO reply, or "".
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Settings are a server's data-safety settings, or, from Watch.Settings,
// the worst of a Cluster's nodes'.
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
	// Node names the server the settings were read from, by the address
	// it took the connection on (CLIENT INFO laddr), so that an operator
	// knows which node of a Cluster to fix; "" when CLIENT INFO was
	// refused. From Watch.Settings it names the node of the worst finding,
	// the first of a version too old, a policy other than noeviction, no
	// persistence and settings unknown, and is "" when there is none.
	Node string `json:"node,omitempty"`
}

// Read reads the settings of the server c is connected to, in one round
// trip. A server that refuses CONFIG GET gives Settings with Unknown set,
// and its version when INFO answered, and the error.
func Read(ctx context.Context, c redis.Cmdable) (Settings, error) {
	s, _, err := read(ctx, c)
	return s, err
}

// read is Read that also returns the server's redis_mode (standalone,
// cluster or sentinel), or "" when INFO was refused.
func read(ctx context.Context, c redis.Cmdable) (s Settings, mode string, err error) {
	var cmds [3]*redis.MapStringStringCmd
	var info *redis.StringCmd
	var client *redis.ClientInfoCmd
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range []string{"maxmemory-policy", "appendonly", "save"} {
			cmds[i] = p.ConfigGet(ctx, name)
		}
		info = p.Info(ctx, "server")
		client = p.ClientInfo(ctx)
		return nil
	})
	if info.Err() == nil {
		mode = infoField(info.Val(), "redis_mode")
		s.Version = ParseVersion(info.Val())
		if s.Version != "" {
			ok := CheckVersion(s.Version) == nil
			s.VersionOK = &ok
		}
	}
	if ci := client.Val(); client.Err() == nil && ci != nil {
		s.Node = ci.LAddr
	}
	configErr := cmp.Or(cmds[0].Err(), cmds[1].Err(), cmds[2].Err())
	if configErr == nil && info.Err() == nil && client.Err() == nil {
		// The pipeline did not run at all, and go-redis set no command's
		// error.
		configErr = err
	}
	if configErr != nil {
		s.Unknown = "CONFIG GET refused: " + configErr.Error()
		return s, mode, fmt.Errorf("read maxmemory-policy and persistence: %w", configErr)
	}
	s.MaxmemoryPolicy = cmds[0].Val()["maxmemory-policy"]
	s.AOF = cmds[1].Val()["appendonly"] == "yes"
	s.RDB = cmds[2].Val()["save"] != ""
	eviction, persistence := s.MaxmemoryPolicy == EvictionPolicySafe, s.AOF || s.RDB
	s.EvictionOK, s.PersistenceOK = &eviction, &persistence
	return s, mode, nil
}

// Watch reads a server's settings on every new connection (OnConnect) and
// logs what is unsafe once per change, so a Redis restarted with other
// settings is noticed on reconnect, not only at start. It is safe for
// concurrent use.
//
// Of a Cluster it keeps each node's settings, by the node's address, logs
// a node's when they change, and reports the worst (Settings): a single
// master that may evict is enough to lose notifications. A node restarted
// at the same address replaces its own entry. A node removed from the
// Cluster keeps its entry, and counts, until Herald restarts: the watch
// learns of nodes only as it connects to them, and hears nothing when a
// node goes.
//
// Connections to a Sentinel do not count: go-redis runs the hook on those
// too, and a Sentinel holds no data, refuses CONFIG and has a version of
// its own.
type Watch struct {
	// Log receives the warnings. Required.
	Log *slog.Logger

	// mu guards nodes.
	mu sync.Mutex
	// nodes holds the settings last read from each Cluster node, by
	// address. Any other server is kept under "", as is a node that
	// refused CLIENT INFO: Herald works on one such server at a time (after
	// a Sentinel failover, the new master), so its last read replaces the
	// one before, where an entry per address would keep the old master's.
	nodes map[string]Settings
}

// OnConnect reads the settings on a new connection: a go-redis OnConnect
// hook. It never fails the connection.
func (w *Watch) OnConnect(ctx context.Context, cn *redis.Conn) error {
	s, mode, err := read(ctx, cn)
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
	case mode == "sentinel":
		// The failover client's connection to one of its Sentinels.
	case mode == "cluster":
		w.report(ctx, s.Node, s, err)
	default:
		w.report(ctx, "", s, err)
	}
	return nil
}

// report records s, read with err, as the settings of node, and logs what
// is wrong with them unless the settings last read there were the same.
func (w *Watch) report(ctx context.Context, node string, s Settings, err error) {
	w.mu.Lock()
	last, seen := w.nodes[node]
	if w.nodes == nil {
		w.nodes = map[string]Settings{}
	}
	w.nodes[node] = s
	w.mu.Unlock()
	if seen && equal(last, s) {
		return
	}
	log := w.Log
	if s.Node != "" {
		log = log.With("redis_node", s.Node)
	}
	if s.VersionOK != nil && !*s.VersionOK {
		// Found on a reconnect: herald serve refuses such a server at start.
		log.ErrorContext(ctx, "herald: "+(&VersionError{Version: s.Version}).Error()+
			"; every enqueue and attempt fails until Redis is upgraded", "redis_version", s.Version)
	}
	switch {
	case err != nil:
		log.WarnContext(ctx, "herald: Redis refused CONFIG GET, so its maxmemory-policy and persistence are unknown: "+
			"make sure yourself that maxmemory-policy is noeviction and that AOF or RDB is on", "error", err)
	default:
		if !*s.EvictionOK {
			log.ErrorContext(ctx, "herald: REDIS MAY EVICT NOTIFICATIONS: its maxmemory-policy is "+s.MaxmemoryPolicy+
				", so at maxmemory it deletes keys, records Herald has accepted among them; set maxmemory-policy noeviction",
				"maxmemory_policy", s.MaxmemoryPolicy)
		}
		if !*s.PersistenceOK {
			log.WarnContext(ctx, "herald: Redis keeps nothing on disk (neither AOF nor RDB is on), so a Redis restart loses every notification; "+
				"turn on appendonly or a save schedule")
		}
	}
}

// Check returns a *VersionError when a server read, or a Cluster node, is
// older than VersionMin, and nil otherwise: a readiness check, since on
// such a server every enqueue and attempt fails.
func (w *Watch) Check() error {
	s, _ := w.Settings()
	if s.VersionOK != nil && !*s.VersionOK {
		return &VersionError{Version: s.Version}
	}
	return nil
}

// Settings returns the settings last read, and false before any was. Of a
// Cluster they are the worst of its nodes': eviction is OK only if every
// node's is, persistence likewise, either is unknown (nil) when no node's
// is known to be unsafe but some node's is unknown, and the version is the
// lowest. Each value comes with those it goes with: the policy with
// EvictionOK, AOF and RDB with PersistenceOK.
func (w *Watch) Settings() (Settings, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.nodes) == 0 {
		return Settings{}, false
	}
	nodes := make([]Settings, 0, len(w.nodes))
	for _, node := range slices.Sorted(maps.Keys(w.nodes)) {
		nodes = append(nodes, w.nodes[node])
	}
	return worst(nodes), true
}

// worst merges nodes' settings as Watch.Settings describes; of nodes
// equally bad, the first counts.
func worst(nodes []Settings) Settings {
	mostUnsafe := func(ok func(Settings) *bool) Settings {
		return slices.MaxFunc(nodes, func(a, b Settings) int { return cmp.Compare(unsafety(ok(a)), unsafety(ok(b))) })
	}
	eviction := mostUnsafe(func(s Settings) *bool { return s.EvictionOK })
	persistence := mostUnsafe(func(s Settings) *bool { return s.PersistenceOK })
	version := slices.MinFunc(nodes, olderFirst)
	w := Settings{
		MaxmemoryPolicy: eviction.MaxmemoryPolicy, EvictionOK: eviction.EvictionOK,
		AOF: persistence.AOF, RDB: persistence.RDB, PersistenceOK: persistence.PersistenceOK,
		Version: version.Version, VersionOK: version.VersionOK,
	}
	unknownAt := slices.IndexFunc(nodes, func(s Settings) bool { return s.Unknown != "" })
	if unknownAt >= 0 {
		w.Unknown = nodes[unknownAt].Unknown
	}
	switch {
	case unsafety(w.VersionOK) == verdictUnsafe:
		w.Node = version.Node
	case unsafety(w.EvictionOK) == verdictUnsafe:
		w.Node = eviction.Node
	case unsafety(w.PersistenceOK) == verdictUnsafe:
		w.Node = persistence.Node
	case unknownAt >= 0:
		w.Node = nodes[unknownAt].Node
	}
	return w
}

// The unsafety of a setting's verdict: unknown is worse than safe, as it
// may hide an unsafe one, and better than unsafe, which is certain.
const (
	verdictSafe = iota
	verdictUnknown
	verdictUnsafe
)

func unsafety(ok *bool) int {
	switch {
	case ok == nil:
		return verdictUnknown
	case *ok:
		return verdictSafe
	}
	return verdictUnsafe
}

// olderFirst orders settings by version, oldest first, and those whose
// version is unknown or unreadable last: CheckVersion lets those through.
func olderFirst(a, b Settings) int {
	av, aok := versionNumbers(a.Version)
	bv, bok := versionNumbers(b.Version)
	switch {
	case aok && bok:
		return slices.Compare(av, bv)
	case aok:
		return -1
	case bok:
		return 1
	}
	return 0
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
