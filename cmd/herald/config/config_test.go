package config

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func TestConfigKeys(t *testing.T) {
	t.Parallel()

	keys := configKeys()
	require.Len(t, keys.byEnv, len(keys.lists), "two keys share an environment variable")
	for env, key := range map[string]string{
		"HERALD_REDIS_ADDRS":                    "redis.addrs",
		"HERALD_REDIS_MASTER_NAME":              "redis.master_name",
		"HERALD_API_MAX_BODY":                   "api.max_body",
		"HERALD_SENDERS_WEBHOOK_ALLOW_NETWORKS": "senders.webhook.allow_networks",
		"HERALD_SENDERS_SMS_AUTH_TOKEN":         "senders.sms.auth_token",
		"HERALD_POLICIES_FILE":                  "policies_file",
		"HERALD_LOG_LEVEL":                      "log.level",
		"HERALD_OTEL_ENDPOINT":                  "otel.endpoint",
		"HERALD_REDIS_WAIT_REPLICAS":            "redis.wait_replicas",
	} {
		require.Equal(t, key, keys.byEnv[env], env)
	}
	require.Len(t, keys.byEnv, 31, "the keys of DESIGN.md, topics_strict and metrics.max_topics")

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
