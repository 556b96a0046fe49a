package config

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
)

func TestConfigKeys(t *testing.T) {
	t.Parallel()

	keys := configKeys()
	require.Len(t, keys.byEnv, len(keys.lists), "two keys share an environment variable")
	for env, key := range map[string]string{
		"HERALD_REDIS_ADDRS":                    "redis.addrs",
		"HERALD_REDIS_MASTER_NAME":              "redis.master_name",
		"HERALD_API_MAX_BODY":                   "api.max_body",
		"HERALD_API_HOSTS":                      "api.hosts",
		"HERALD_SENDERS_WEBHOOK_ALLOW_NETWORKS": "senders.webhook.allow_networks",
		"HERALD_SENDERS_SMS_AUTH_TOKEN":         "senders.sms.auth_token",
		"HERALD_POLICIES_FILE":                  "policies_file",
		"HERALD_LOG_LEVEL":                      "log.level",
		"HERALD_OTEL_ENDPOINT":                  "otel.endpoint",
		"HERALD_REDIS_WAIT_REPLICAS":            "redis.wait_replicas",
		"HERALD_DEAD_RETENTION":                 "dead_retention",
	} {
		require.Equal(t, key, keys.byEnv[env], env)
	}
	require.Len(t, keys.byEnv, 34, "the keys of DESIGN.md, topics_strict, metrics.max_topics, api.hosts, redis.username and dead_retention")

	require.Panics(t, func() { BindFlag(pflag.NewFlagSet("x", pflag.ContinueOnError), "x", "redis.adress") })
}

func TestLogConfigNewLogger(t *testing.T) {
	t.Parallel()

	t.Run("LevelAndFormat", func(t *testing.T) {
		t.Parallel()

		var buf bytes.Buffer
		log := (&LogConfig{Level: "warn", Format: "json"}).NewLogger(&buf, false)
		log.Info("hidden")
		log.Warn("shown")
		require.Equal(t, 1, strings.Count(buf.String(), "\n"))
		require.Contains(t, buf.String(), `"msg":"shown"`)
	})

	t.Run("DebugWins", func(t *testing.T) {
		t.Parallel()

		var buf bytes.Buffer
		(&LogConfig{Level: "error", Format: "text"}).NewLogger(&buf, true).Debug("shown")
		require.Contains(t, buf.String(), "level=DEBUG msg=shown")
	})
}

func TestAPIHosts(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name  string
		hosts []string
		field string // "": valid
	}{
		{"Default", nil, ""},
		{"Names", []string{"herald.internal", "herald", "herald-api.svc.cluster.local."}, ""},
		{"AnyName", []string{"*"}, ""},
		{"Port", []string{"herald.internal", "herald.internal:8080"}, "api.hosts[1]"},
		{"Scheme", []string{"http://herald.internal"}, "api.hosts[0]"},
		{"Path", []string{"herald.internal/ui"}, "api.hosts[0]"},
		{"Empty", []string{""}, "api.hosts[0]"},
		{"Wildcard", []string{"*.internal"}, "api.hosts[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			cfg := Default()
			if tt.hosts != nil {
				cfg.API.Hosts = tt.hosts
			}
			err := cfg.Validate()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field, "%v", err)
			require.Contains(t, fe.Message, "host name")
		})
	}
}

// TestAPIHostsFromEnv sets HERALD_API_HOSTS, so it does not run in
// parallel.
func TestAPIHostsFromEnv(t *testing.T) {
	load := func() (*Config, error) {
		return Load(&Source{File: filepath.Join(t.TempDir(), "none.yaml"), Flags: pflag.NewFlagSet("x", pflag.ContinueOnError)})
	}
	t.Setenv("HERALD_API_HOSTS", "herald.internal, herald-api")
	cfg, err := load()
	require.NoError(t, err)
	require.Equal(t, []string{"herald.internal", "herald-api"}, cfg.API.Hosts)

	t.Setenv("HERALD_API_HOSTS", "herald.internal,herald-api:8080")
	_, err = load()
	var fe *notify.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "api.hosts[1]", fe.Field)
}

// TestClusterNodeRefusingFailsFast: a call meeting a Cluster node that
// refuses connections (a master just killed, before its replica takes
// over) fails at once, not after go-redis's five dials of it: a
// reservation or finish that spans shards waits for its slowest node, so
// one dead master would hold up the healthy masters' notifications too.
func TestClusterNodeRefusingFailsFast(t *testing.T) {
	t.Parallel()
	port, err := redistest.FreePort()
	require.NoError(t, err)
	c := &RedisConfig{Mode: RedisModeCluster, Addrs: []string{fmt.Sprintf("127.0.0.1:%d", port)}}
	rdb := c.NewClient(nil)
	t.Cleanup(func() { _ = rdb.Close() })
	start := time.Now()
	require.Error(t, rdb.Ping(context.Background()).Err())
	// Five dials sleep 100ms between each, 400ms in all however fast the
	// machine, so a bound below that fails whenever the dials are five. One
	// refused dial took at most 50ms in 200 runs under -race on a loaded
	// 2-core machine; 350ms leaves room for a scheduling stall on top.
	require.Less(t, time.Since(start), 350*time.Millisecond)
}

// loadFile runs Load on a config file holding yaml, with no flags.
func loadFile(t *testing.T, yaml string) (*Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return Load(&Source{File: path, FileRequired: true, Flags: pflag.NewFlagSet("x", pflag.ContinueOnError)})
}

// TestDeadRetention: dead_retention is a positive duration, or -1 (the
// default) to keep dead notifications until replayed or purged; anything
// else stops Herald naming the key.
func TestDeadRetention(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		yaml string
		want time.Duration // when valid
		bad  bool
	}{
		{name: "Default", yaml: "", want: -1},
		{name: "Keep", yaml: "dead_retention: -1\n", want: -1},
		{name: "KeepQuoted", yaml: "dead_retention: \"-1\"\n", want: -1},
		{name: "Duration", yaml: "dead_retention: 2160h\n", want: 90 * 24 * time.Hour},
		{name: "Seconds", yaml: "dead_retention: 3600\n", want: time.Hour},
		{name: "WithRetentionForever", yaml: "retention: -1\ndead_retention: 720h\n", want: 720 * time.Hour},
		{name: "Zero", yaml: "dead_retention: 0\n", bad: true},
		{name: "Negative", yaml: "dead_retention: -2h\n", bad: true},
		{name: "MinusTwo", yaml: "dead_retention: -2\n", bad: true},
		{name: "NotADuration", yaml: "dead_retention: forever\n", bad: true},
		{name: "List", yaml: "dead_retention: [1h]\n", bad: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadFile(t, tt.yaml)
			if tt.bad {
				var fe *notify.FieldError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, "dead_retention", fe.Field, "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, cfg.DeadRetention)
		})
	}
}

// TestDeadRetentionFromEnv sets HERALD_DEAD_RETENTION, so it does not run
// in parallel.
func TestDeadRetentionFromEnv(t *testing.T) {
	t.Setenv("HERALD_DEAD_RETENTION", "-1")
	cfg, err := loadFile(t, "dead_retention: 24h\n")
	require.NoError(t, err)
	require.Equal(t, RetentionForever, cfg.DeadRetention, "the environment overrides the file")

	t.Setenv("HERALD_DEAD_RETENTION", "90d")
	_, err = loadFile(t, "")
	var fe *notify.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "dead_retention", fe.Field)
	require.Contains(t, fe.Message, "HERALD_DEAD_RETENTION", "says what set it")
}
