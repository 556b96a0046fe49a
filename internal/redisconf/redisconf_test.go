package redisconf

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
)

func TestMain(m *testing.M) { redistest.VerifyMain(m) }

// TestCheckVersion decides, from redis_version, whether Herald runs on a
// server. Only a 7.0 redis-server is at hand to test with, so the older
// versions are told apart here.
func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		tooOld  bool
	}{
		{version: "6.0.16", tooOld: true},
		{version: "6.1.99", tooOld: true},
		{version: "5.0.7", tooOld: true},
		{version: "4.0.14", tooOld: true},
		{version: "6.2.0"},
		{version: "6.2"},
		{version: "6.2.14"},
		{version: "6.10.0"},
		{version: "7.0.15"},
		{version: "7.4.2"},
		{version: "10.0.0"},
		{version: "255.255.255"}, // a development build
		// Not a version Herald can read: unknown, not refused.
		{version: ""},
		{version: "unstable"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			err := CheckVersion(tc.version)
			if !tc.tooOld {
				require.NoError(t, err)
				return
			}
			var ve *VersionError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.version, ve.Version)
			require.Equal(t, "Redis "+tc.version+" is too old: Herald needs Redis 6.2 or newer (its scripts call ZMSCORE and LPOP with a count)", err.Error())
		})
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, info, want string
	}{
		{name: "Redis", info: "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n", want: "7.0.15"},
		{name: "LastLine", info: "# Server\r\nredis_version:6.0.16", want: "6.0.16"},
		{name: "NewlinesOnly", info: "# Server\nredis_version:6.2.6\nredis_mode:standalone\n", want: "6.2.6"},
		{name: "NotPrefixOfAnother", info: "# Server\r\nxredis_version:1.0.0\r\nredis_version:7.2.4\r\n", want: "7.2.4"},
		{name: "Missing", info: "# Server\r\nredis_mode:standalone\r\n", want: ""},
		{name: "Empty", info: "", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, ParseVersion(tc.info))
		})
	}
}

// TestRead reads a real server's settings, its version and the node among
// them, in one round trip, and its version even when CONFIG is refused.
func TestRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Settings", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.Options{AOF: true})
		rdb := srv.Client(t)
		s, err := Read(ctx, rdb)
		require.NoError(t, err)
		want := ParseVersion(rdb.Info(ctx, "server").Val())
		require.NotEmpty(t, want)
		require.Equal(t, want, s.Version)
		require.True(t, *s.VersionOK)
		require.True(t, *s.EvictionOK)
		require.True(t, *s.PersistenceOK)
		require.Equal(t, srv.Addr, s.Node)
	})

	// A managed Redis may refuse CLIENT INFO: the settings are read all
	// the same, only the node is not named.
	t.Run("ClientInfoRefused", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.Options{AOF: true, Args: []string{"--rename-command", "CLIENT", ""}})
		s, err := Read(ctx, srv.Client(t))
		require.NoError(t, err)
		require.Empty(t, s.Unknown)
		require.True(t, *s.EvictionOK)
		require.True(t, *s.PersistenceOK)
		require.Empty(t, s.Node)
	})

	t.Run("ConfigRefused", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.Options{Args: []string{"--rename-command", "CONFIG", ""}})
		s, err := Read(ctx, srv.Client(t))
		require.Error(t, err)
		require.NotEmpty(t, s.Unknown)
		require.Nil(t, s.EvictionOK)
		require.NotEmpty(t, s.Version, "INFO answered although CONFIG did not")
		require.True(t, *s.VersionOK)
	})
}

// TestWatchLogsOldVersion gives the watch what a connection to Redis 6.0
// would read: it logs an error naming the version and what Herald needs,
// once however many connections read it, and again when the server
// changes, and Check fails (so /readyz does) until a newer one is read.
func TestWatchLogsOldVersion(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	w := &Watch{Log: slog.New(slog.NewTextHandler(&logs, nil))}
	require.NoError(t, w.Check(), "nothing read yet")
	ctx := context.Background()
	old, ok := false, true
	safe := Settings{MaxmemoryPolicy: EvictionPolicySafe, AOF: true, EvictionOK: &ok, PersistenceOK: &ok}
	tooOld := safe
	tooOld.Version, tooOld.VersionOK = "6.0.16", &old
	fine := safe
	fine.Version, fine.VersionOK = "7.0.15", &ok

	w.report(ctx, "", tooOld, nil)
	w.report(ctx, "", tooOld, nil)
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR"), logs.String())
	require.Contains(t, logs.String(), "Redis 6.0.16 is too old: Herald needs Redis 6.2 or newer")
	require.Contains(t, logs.String(), "redis_version=6.0.16")
	got, _ := w.Settings()
	require.False(t, *got.VersionOK)
	var ve *VersionError
	require.ErrorAs(t, w.Check(), &ve, "not ready")
	require.Equal(t, "6.0.16", ve.Version)

	w.report(ctx, "", fine, nil)
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR"), logs.String())
	require.NoError(t, w.Check())
	w.report(ctx, "", tooOld, errors.New("CONFIG GET refused"))
	require.Equal(t, 2, strings.Count(logs.String(), "too old"), "said again on a server that changed back, CONFIG refused or not: %s", logs.String())
}

// TestWatchIgnoresSentinels connects through Sentinel to a master with
// AOF on and noeviction: go-redis runs the hook on its connections to the
// Sentinels too, which refuse CONFIG. Nothing is logged, and the master's
// settings stay shown after a connection to a Sentinel.
func TestWatchIgnoresSentinels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t, redistest.Options{AOF: true})
	sentinels := redistest.StartSentinels(t, master, 1, 0, redistest.SentinelOptions{MasterName: "herald-master"})
	var logs heraldtest.Buffer
	w := &Watch{Log: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))}

	failover := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "herald-master", SentinelAddrs: sentinels.Addrs(), OnConnect: w.OnConnect,
	})
	t.Cleanup(func() { _ = failover.Close() })
	require.NoError(t, failover.Ping(ctx).Err())
	// A Sentinel reconnected to after the master, as go-redis does when a
	// Sentinel restarts.
	sentinel := redis.NewClient(&redis.Options{Addr: sentinels.Nodes[0].Addr, OnConnect: w.OnConnect})
	t.Cleanup(func() { _ = sentinel.Close() })
	require.NoError(t, sentinel.Ping(ctx).Err())

	require.Empty(t, logs.String())
	s, ok := w.Settings()
	require.True(t, ok)
	require.Empty(t, s.Unknown)
	require.Equal(t, EvictionPolicySafe, s.MaxmemoryPolicy)
	require.True(t, *s.EvictionOK)
	require.True(t, s.AOF)
	require.True(t, *s.PersistenceOK)
	require.True(t, *s.VersionOK)
	require.NoError(t, w.Check())
}

// TestWatchClusterShowsWorstNode runs a Cluster of 3 masters: one evicts,
// another keeps nothing on disk. Each is logged once, naming the node,
// however the connections come and go; the settings shown are the worst
// of any node until that node is fixed, and a node reconnected to after
// its fix replaces its own.
func TestWatchClusterShowsWorstNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	evicting, volatile, good := cl.Nodes[0], cl.Nodes[1], cl.Nodes[2]
	configSet := func(node *redistest.Server, kv ...string) {
		t.Helper()
		c := node.Client(t)
		for i := 0; i < len(kv); i += 2 {
			require.NoError(t, c.ConfigSet(ctx, kv[i], kv[i+1]).Err())
		}
	}
	configSet(evicting, "maxmemory-policy", "allkeys-lru", "save", "3600 1")
	configSet(good, "save", "3600 1")
	var logs heraldtest.Buffer
	w := &Watch{Log: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))}
	cc := cl.Client(t, func(o *redis.ClusterOptions) { o.OnConnect = w.OnConnect })
	// reconnect makes a new connection to node, as the cluster client
	// does when its connection drops.
	reconnect := func(node *redistest.Server) {
		t.Helper()
		c := redis.NewClient(&redis.Options{Addr: node.Addr, OnConnect: w.OnConnect})
		defer c.Close()
		require.NoError(t, c.Ping(ctx).Err())
	}
	logged := func(what string, node *redistest.Server) int {
		return len(regexp.MustCompile(regexp.QuoteMeta(what)+`.* redis_node=`+regexp.QuoteMeta(node.Addr)+`\b`).FindAllString(logs.String(), -1))
	}

	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	reconnect(good)
	reconnect(volatile)
	reconnect(good)
	require.Equal(t, 1, logged("REDIS MAY EVICT NOTIFICATIONS: its maxmemory-policy is allkeys-lru", evicting), logs.String())
	require.Equal(t, 1, logged("keeps nothing on disk", volatile), logs.String())
	require.Equal(t, 2, strings.Count(logs.String(), "level="), "nothing else: %s", logs.String())
	s, _ := w.Settings()
	require.Equal(t, "allkeys-lru", s.MaxmemoryPolicy)
	require.False(t, *s.EvictionOK)
	require.False(t, *s.PersistenceOK)
	require.Equal(t, evicting.Addr, s.Node)
	require.NoError(t, w.Check())

	configSet(evicting, "maxmemory-policy", "noeviction")
	reconnect(evicting)
	s, _ = w.Settings()
	require.True(t, *s.EvictionOK)
	require.False(t, *s.PersistenceOK, "the other node still keeps nothing")
	require.Equal(t, volatile.Addr, s.Node)

	// Not appendonly: a Redis that turns it on writes its first AOF in the
	// background and ignores SIGTERM until done, which holds up the test's
	// end.
	configSet(volatile, "save", "3600 1")
	reconnect(volatile)
	s, _ = w.Settings()
	require.Equal(t, EvictionPolicySafe, s.MaxmemoryPolicy)
	require.True(t, *s.EvictionOK)
	require.True(t, *s.PersistenceOK)
	require.Empty(t, s.Node)
	require.Equal(t, 1, logged("REDIS MAY EVICT", evicting), "fixed, not logged again: %s", logs.String())
}

// TestWatchWorstOfNodes merges what the nodes of a Cluster read: a verdict
// known unsafe on one node wins, then unknown, and the version shown is
// the oldest. Only a 7.0 redis-server is at hand, so the nodes' readings
// are given.
func TestWatchWorstOfNodes(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	node := func(addr, version, policy string, persistent bool) Settings {
		s := Settings{Node: addr, Version: version, MaxmemoryPolicy: policy, AOF: persistent}
		versionOK := CheckVersion(version) == nil
		s.VersionOK = &versionOK
		s.EvictionOK, s.PersistenceOK = &no, &no
		if policy == EvictionPolicySafe {
			s.EvictionOK = &yes
		}
		if persistent {
			s.PersistenceOK = &yes
		}
		return s
	}
	refused := func(addr, version string) Settings {
		s := node(addr, version, "", false)
		s.EvictionOK, s.PersistenceOK, s.Unknown = nil, nil, "CONFIG GET refused: ERR unknown command"
		return s
	}
	for _, tc := range []struct {
		name  string
		nodes []Settings
		want  Settings
	}{
		{
			name:  "AllSafe",
			nodes: []Settings{node("a:1", "7.0.15", "noeviction", true), node("b:1", "7.2.4", "noeviction", true)},
			want:  Settings{MaxmemoryPolicy: "noeviction", AOF: true, EvictionOK: &yes, PersistenceOK: &yes, Version: "7.0.15", VersionOK: &yes},
		},
		{
			name:  "OldestVersion",
			nodes: []Settings{node("a:1", "7.0.15", "noeviction", true), node("b:1", "6.0.16", "noeviction", true), node("c:1", "7.0.11", "noeviction", true)},
			want:  Settings{MaxmemoryPolicy: "noeviction", AOF: true, EvictionOK: &yes, PersistenceOK: &yes, Version: "6.0.16", VersionOK: &no, Node: "b:1"},
		},
		{
			name:  "OldestPatch",
			nodes: []Settings{node("a:1", "7.0.15", "noeviction", true), node("b:1", "7.0.11", "noeviction", true), node("c:1", "", "noeviction", true)},
			want:  Settings{MaxmemoryPolicy: "noeviction", AOF: true, EvictionOK: &yes, PersistenceOK: &yes, Version: "7.0.11", VersionOK: &yes},
		},
		{
			name:  "UnknownOnOne",
			nodes: []Settings{node("a:1", "7.0.15", "noeviction", true), refused("b:1", "7.0.15")},
			want:  Settings{EvictionOK: nil, PersistenceOK: nil, Unknown: "CONFIG GET refused: ERR unknown command", Version: "7.0.15", VersionOK: &yes, Node: "b:1"},
		},
		{
			name:  "UnsafeOverUnknown",
			nodes: []Settings{refused("a:1", "7.0.15"), node("b:1", "7.0.15", "allkeys-lru", true)},
			want: Settings{MaxmemoryPolicy: "allkeys-lru", EvictionOK: &no, PersistenceOK: nil,
				Unknown: "CONFIG GET refused: ERR unknown command", Version: "7.0.15", VersionOK: &yes, Node: "b:1"},
		},
		{
			name:  "EachFromItsNode",
			nodes: []Settings{node("a:1", "7.0.15", "volatile-lru", true), node("b:1", "7.0.15", "noeviction", false)},
			want:  Settings{MaxmemoryPolicy: "volatile-lru", EvictionOK: &no, PersistenceOK: &no, Version: "7.0.15", VersionOK: &yes, Node: "a:1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &Watch{Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
			for _, s := range tc.nodes {
				var err error
				if s.Unknown != "" {
					err = errors.New(s.Unknown)
				}
				w.report(context.Background(), s.Node, s, err)
			}
			got, ok := w.Settings()
			require.True(t, ok)
			require.Equal(t, tc.want, got)
			if *tc.want.VersionOK {
				require.NoError(t, w.Check())
			} else {
				require.ErrorContains(t, w.Check(), "Redis "+tc.want.Version+" is too old")
			}
		})
	}
}

// TestMemoryCountsAsRedisDoes stalls a replica so that the master's
// replication buffer grows, and sets maxmemory between what Redis counts
// against it and its whole used_memory: Redis still takes writes, so
// Memory must not say it is at its limit.
func TestMemoryCountsAsRedisDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplica(t, master)
	replica.Pause()
	t.Cleanup(replica.Resume)
	rdb := master.Client(t)
	value := strings.Repeat("x", 1<<20)
	for i := range 32 {
		require.NoError(t, rdb.Set(ctx, "value:"+strconv.Itoa(i), value, 0).Err())
	}
	info := rdb.InfoMap(ctx, "memory").Val()["Memory"]
	raw, err := strconv.ParseInt(info["used_memory"], 10, 64)
	require.NoError(t, err)
	buffers, err := strconv.ParseInt(info["mem_not_counted_for_evict"], 10, 64)
	require.NoError(t, err)
	require.Greater(t, buffers, int64(8<<20), "the stalled replica's buffer")
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(raw-buffers/2, 10)).Err())

	require.NoError(t, rdb.Set(ctx, "one-more", "x", 0).Err(), "Redis takes writes")
	used, limit, err := Memory(ctx, rdb)
	require.NoError(t, err)
	require.Equal(t, raw-buffers/2, limit)
	require.Less(t, used, limit)
}
