package config

import (
	"bytes"
	"context"
	"fmt"
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
	} {
		require.Equal(t, key, keys.byEnv[env], env)
	}
	require.Len(t, keys.byEnv, 33, "the keys of DESIGN.md, topics_strict, metrics.max_topics, api.hosts and redis.username")

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
