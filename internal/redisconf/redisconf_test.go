package redisconf

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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

// TestRead reads a real server's settings, its version among them, in one
// round trip, and its version even when CONFIG is refused.
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

	w.report(ctx, tooOld, nil)
	w.report(ctx, tooOld, nil)
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR"), logs.String())
	require.Contains(t, logs.String(), "Redis 6.0.16 is too old: Herald needs Redis 6.2 or newer")
	require.Contains(t, logs.String(), "redis_version=6.0.16")
	got, _ := w.Settings()
	require.False(t, *got.VersionOK)
	var ve *VersionError
	require.ErrorAs(t, w.Check(), &ve, "not ready")
	require.Equal(t, "6.0.16", ve.Version)

	w.report(ctx, fine, nil)
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR"), logs.String())
	require.NoError(t, w.Check())
	w.report(ctx, tooOld, errors.New("CONFIG GET refused"))
	require.Equal(t, 2, strings.Count(logs.String(), "too old"), "said again on a server that changed back, CONFIG refused or not: %s", logs.String())
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
