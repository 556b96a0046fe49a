package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/cmd/herald/config"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/sms"
)

// writeConfig writes a config file into a temporary directory.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
}

// requireField asserts that err is a *notify.FieldError for field.
func requireField(t *testing.T, err error, field string) *notify.FieldError {
	t.Helper()
	var fe *notify.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field, "error: %v", err)
	return fe
}

// load runs config.Load on a file with the root's flags parsed from args.
func load(t *testing.T, path string, args ...string) (*config.Config, error) {
	t.Helper()
	c := newApp(Deps{Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	fs := c.rootCommand().PersistentFlags()
	require.NoError(t, fs.Parse(args))
	return config.Load(&config.Source{File: path, FileRequired: true, Flags: fs})
}

// These tests set HERALD_* variables, so neither they nor their subtests
// run in parallel.
func TestConfigEnvironment(t *testing.T) {
	const fileYAML = `
redis:
  addrs: ["file:6379"]
namespace: from-file
api:
  listen: "file:1"
log:
  level: warn
`

	t.Run("FileEnvFlagPrecedence", func(t *testing.T) {
		path := writeConfig(t, fileYAML)

		cfg, err := load(t, path)
		require.NoError(t, err)
		require.Equal(t, "file:1", cfg.API.Listen)
		require.Equal(t, "warn", cfg.Log.Level)

		t.Setenv("HERALD_API_LISTEN", "env:2")
		t.Setenv("HERALD_REDIS_ADDRS", "a:1, b:2")
		t.Setenv("HERALD_REDIS_MODE", "cluster")
		t.Setenv("HERALD_LOG_LEVEL", "error")
		cfg, err = load(t, path)
		require.NoError(t, err)
		require.Equal(t, "env:2", cfg.API.Listen, "env over file")
		require.Equal(t, []string{"a:1", "b:2"}, cfg.Redis.Addrs, "lists split on commas")
		require.Equal(t, "error", cfg.Log.Level)
		require.Equal(t, "from-file", cfg.Namespace, "file keys the env leaves alone stay")
		require.Zero(t, cfg.Shards, "defaults where nobody says: the namespace's shard count")

		cfg, err = load(t, path, "--log-level", "debug")
		require.NoError(t, err)
		require.Equal(t, "debug", cfg.Log.Level, "flag over env")
		require.Equal(t, "env:2", cfg.API.Listen)
	})

	t.Run("UnderscoresInKeys", func(t *testing.T) {
		path := writeConfig(t, "")
		t.Setenv("HERALD_REDIS_MODE", "sentinel")
		t.Setenv("HERALD_REDIS_MASTER_NAME", "mymaster")
		t.Setenv("HERALD_API_MAX_BODY", "1048576")
		t.Setenv("HERALD_API_TOKENS", "t1,t2")
		t.Setenv("HERALD_SENDERS_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8,::1/128")
		t.Setenv("HERALD_SENDERS_WEBHOOK_TIMEOUT", "30")
		t.Setenv("HERALD_SENDERS_SMS_ACCOUNT_SID", "AC123")
		t.Setenv("HERALD_TEMPLATES_DIR", "/srv/templates")
		t.Setenv("HERALD_REDIS_TLS", "true")
		t.Setenv("HERALD_RETENTION", "24h")
		t.Setenv("HERALD_REDIS_WAIT_REPLICAS", "1")
		t.Setenv("HERALD_REDIS_WAIT_TIMEOUT", "250ms")
		t.Setenv("HERALD_OTEL_ENDPOINT", "otel-collector:4318")

		cfg, err := load(t, path)
		require.NoError(t, err)
		require.Equal(t, "sentinel", cfg.Redis.Mode)
		require.Equal(t, "mymaster", cfg.Redis.MasterName)
		require.Equal(t, 1048576, cfg.API.MaxBody)
		require.Equal(t, []config.Secret{"t1", "t2"}, cfg.API.Tokens)
		require.Equal(t, []string{"127.0.0.0/8", "::1/128"}, cfg.Senders.Webhook.AllowNetworks)
		require.Equal(t, 30*time.Second, cfg.Senders.Webhook.Timeout)
		require.Equal(t, "AC123", cfg.Senders.SMS.AccountSID)
		require.Equal(t, "/srv/templates", cfg.TemplatesDir)
		require.True(t, cfg.Redis.TLS)
		require.Equal(t, 24*time.Hour, cfg.Retention)
		require.Equal(t, 1, cfg.Redis.WaitReplicas)
		require.Equal(t, 250*time.Millisecond, cfg.Redis.WaitTimeout)
		require.Equal(t, "otel-collector:4318", cfg.Otel.Endpoint)
	})

	t.Run("RetentionForeverFromEnv", func(t *testing.T) {
		t.Setenv("HERALD_RETENTION", "-1")
		cfg, err := load(t, writeConfig(t, ""))
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), cfg.Retention)
	})

	t.Run("EmptyListFromEnv", func(t *testing.T) {
		// "[]" as the file and the README write it.
		for _, value := range []string{"", "[]", " [] "} {
			t.Setenv("HERALD_REDIS_ADDRS", value)
			cfg, err := load(t, writeConfig(t, fileYAML))
			require.NoError(t, err, "HERALD_REDIS_ADDRS=%q", value)
			require.Empty(t, cfg.Redis.Addrs, "HERALD_REDIS_ADDRS=%q: the embedded Redis", value)
		}
	})

	t.Run("UnknownVariable", func(t *testing.T) {
		t.Setenv("HERALD_REDIS_ADDR", "a:1")
		_, err := load(t, writeConfig(t, ""))
		requireField(t, err, "HERALD_REDIS_ADDR")
	})

	t.Run("BadValuesFromEnv", func(t *testing.T) {
		for _, tt := range []struct{ env, value, field string }{
			{"HERALD_SHARDS", "many", "shards"},
			{"HERALD_RETENTION", "-1h", "retention"},
			{"HERALD_RETENTION", "0", "retention"},
			{"HERALD_REDIS_TLS", "maybe", "redis.tls"},
			{"HERALD_DISPATCHER_CONCURRENCY", "0", "dispatcher.concurrency"},
			{"HERALD_REDIS_ADDRS", "a:1,b", "redis.addrs[1]"},
			{"HERALD_OTEL_ENDPOINT", "otel-collector", "otel.endpoint"},
			{"HERALD_OTEL_ENDPOINT", "grpc://otel-collector:4317", "otel.endpoint"},
			{"HERALD_OTEL_ENDPOINT", "http://", "otel.endpoint"},
			{"HERALD_OTEL_ENDPOINT", "otel-collector:http", "otel.endpoint"},
			{"HERALD_OTEL_ENDPOINT", "otel-collector:0", "otel.endpoint"},
			{"HERALD_OTEL_ENDPOINT", "otel-collector:65536", "otel.endpoint"},
		} {
			t.Run(tt.env, func(t *testing.T) {
				t.Setenv(tt.env, tt.value)
				_, err := load(t, writeConfig(t, "shards: 4\nretention: 24h\n"))
				requireField(t, err, tt.field)
				// The file says otherwise: the operator is told where to look.
				require.ErrorContains(t, err, "(set by "+tt.env+")")
			})
		}
	})

	t.Run("BadValuesHideCredentials", func(t *testing.T) {
		// hint is what the message tells the operator to do instead.
		for _, tt := range []struct{ name, env, value, field, secret, hint string }{
			{"RedisURL", "HERALD_REDIS_ADDRS", "redis://:UrlRedisPass@cache.internal:6379", "redis.addrs[0]", "UrlRedisPass", "redis.password"},
			// Each splits as host:port, and go-redis would quote it, password
			// and all, in every dial error.
			{"RedisPasswordAt", "HERALD_REDIS_ADDRS", "hunter2@127.0.0.1:1", "redis.addrs[0]", "hunter2", "redis.password"},
			{"RedisUserPasswordAt", "HERALD_REDIS_ADDRS", "default:hunter2@127.0.0.1:6390", "redis.addrs[0]", "hunter2", "redis.username and redis.password"},
			{"RedisSecondAddr", "HERALD_REDIS_ADDRS", "10.0.0.5:26379,hunter2@10.0.0.6:26379", "redis.addrs[1]", "hunter2", "redis.password"},
			// The port would be "6379?password=hunter2".
			{"RedisQuery", "HERALD_REDIS_ADDRS", "cache.internal:6379?password=hunter2", "redis.addrs[0]", "hunter2", "port from 1 to 65535"},
			{"OtelQuery", "HERALD_OTEL_ENDPOINT", "collector?api_key=OtelKeySecret", "otel.endpoint", "OtelKeySecret", ""},
			// The port would be "hunter2@collector".
			{"OtelUserPassword", "HERALD_OTEL_ENDPOINT", "tok:hunter2@collector", "otel.endpoint", "hunter2", "OTEL_EXPORTER_OTLP_HEADERS"},
			{"OtelUserAt", "HERALD_OTEL_ENDPOINT", "hunter2@collector:4318", "otel.endpoint", "hunter2", "OTEL_EXPORTER_OTLP_HEADERS"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Setenv(tt.env, tt.value)
				_, err := load(t, writeConfig(t, ""))
				fe := requireField(t, err, tt.field)
				require.NotContains(t, err.Error(), tt.secret)
				require.Contains(t, fe.Message, "xxxxx", "the value is shown, with its credentials hidden")
				require.Contains(t, fe.Message, tt.hint)
			})
		}
	})

	t.Run("BadValueFromFlag", func(t *testing.T) {
		t.Setenv("HERALD_LOG_LEVEL", "info")
		_, err := load(t, writeConfig(t, "log: {level: warn}\n"), "--log-level", "loud")
		requireField(t, err, "log.level")
		require.ErrorContains(t, err, "(set by --log-level)")
	})

	t.Run("ThroughTheRootCommand", func(t *testing.T) {
		t.Setenv("HERALD_LOG_FORMAT", "json")
		r := run(t, []string{"--config", writeConfig(t, fileYAML), "--log-level", "info", "probe"}, probeCommand)
		require.NoError(t, r.err)
		require.Equal(t, "json", r.base.Config.Log.Format)
		require.Contains(t, r.logs, `"msg":"probe: info line"`)
		require.NotContains(t, r.logs, "probe: debug line")
	})
}

func TestConfigFile(t *testing.T) {
	t.Parallel()

	t.Run("ShippedFiles", func(t *testing.T) {
		t.Parallel()

		cfg, err := load(t, "../../../configs/herald.yaml")
		require.NoError(t, err)
		def := config.Default()
		require.Equal(t, &def, cfg, "configs/herald.yaml shows the defaults")

		cfg, err = load(t, "../../../configs/demo.yaml")
		require.NoError(t, err)
		require.Empty(t, cfg.Redis.Addrs)
		require.NotEmpty(t, cfg.Senders.Webhook.Secret)
	})

	t.Run("MissingDefaultFileIsFine", func(t *testing.T) {
		t.Parallel()

		// Tests run in this package's directory, where there is no
		// configs/herald.yaml.
		r := run(t, []string{"probe"}, probeCommand)
		require.NoError(t, r.err)
		def := config.Default()
		require.Equal(t, &def, r.base.Config)
	})

	t.Run("MissingNamedFileIsAnError", func(t *testing.T) {
		t.Parallel()

		path := filepath.Join(t.TempDir(), "nope.yaml")
		r := run(t, []string{"--config", path, "probe"}, probeCommand)
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, path)
		require.ErrorIs(t, r.err, os.ErrNotExist)
	})

	t.Run("UnknownKey", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"--config", writeConfig(t, "redis:\n  adress: x:1\n"), "probe"}, probeCommand)
		require.Equal(t, 2, r.code())
		fe := requireField(t, r.err, "redis.adress")
		require.Equal(t, "unknown key", fe.Message)
	})

	t.Run("BadValues", func(t *testing.T) {
		t.Parallel()

		for yaml, field := range map[string]string{
			"shards: many\n":                               "shards",
			"retention: soon\n":                            "retention",
			"redis: {db: [1]}\n":                           "redis.db",
			"redis: {addrs: [a:1, {x: 1}]}\n":              "redis.addrs[1]",
			"senders: {webhook: {timeout: -5}}\n":          "senders.webhook.timeout",
			"api: {max_body: 1.5e99}\n":                    "api.max_body",
			"log: {level: [debug]}\n":                      "log.level",
			"senders: {webhook: {allow_networks: 5}}\n":    "senders.webhook.allow_networks[0]",
			"senders: {sms: {provider: carrier-pigeon}}\n": "senders.sms.provider",
		} {
			_, err := load(t, writeConfig(t, yaml))
			requireField(t, err, field)
		}
	})

	t.Run("config.RetentionForever", func(t *testing.T) {
		t.Parallel()

		cfg, err := load(t, writeConfig(t, "retention: -1\n"))
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), cfg.Retention, "-1 keeps finished records, as store.Config allows")
		_, err = load(t, writeConfig(t, "retention: -2h\n"))
		requireField(t, err, "retention")
	})

	t.Run("SecretsOfTheWrongTypeAreNotShown", func(t *testing.T) {
		t.Parallel()

		for yaml, field := range map[string]string{
			"redis: {password: [R3disPassw0rd, x]}\n":            "redis.password",
			"redis: {password: {a: R3disPassw0rd}}\n":            "redis.password",
			"api: {tokens: [{t: R3disPassw0rd}]}\n":              "api.tokens[0]",
			"api: {tokens: {t: R3disPassw0rd}}\n":                "api.tokens[0]",
			"senders: {webhook: {secret: {k: R3disPassw0rd}}}\n": "senders.webhook.secret",
			"senders: {sms: {auth_token: [R3disPassw0rd, x]}}\n": "senders.sms.auth_token",
			"senders: {webhook: [R3disPassw0rd]}\n":              "senders.webhook",
			"redis: R3disPassw0rd\n":                             "redis",
		} {
			r := run(t, []string{"--config", writeConfig(t, yaml), "probe"}, probeCommand)
			require.Equal(t, 2, r.code(), yaml)
			requireField(t, r.err, field)
			require.NotContains(t, r.err.Error()+r.out+r.logs, "R3disPassw0rd", yaml)
		}
	})

	t.Run("BadYAML", func(t *testing.T) {
		t.Parallel()

		path := writeConfig(t, "redis: [unclosed\n")
		r := run(t, []string{"--config", path, "probe"}, probeCommand)
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, path)
	})

	t.Run("DebugFlagWins", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"--config", writeConfig(t, "log: {level: error}\n"), "--debug", "probe"}, probeCommand)
		require.NoError(t, r.err)
		require.Contains(t, r.logs, "probe: debug line")
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		modify func(*config.Config)
		field  string
	}{
		{"RedisMode", func(c *config.Config) { c.Redis.Mode = "replica" }, "redis.mode"},
		{"SentinelNeedsMaster", func(c *config.Config) { c.Redis.Mode = config.RedisModeSentinel }, "redis.master_name"},
		{"ClusterNeedsAddrs", func(c *config.Config) { c.Redis.Mode, c.Redis.Addrs = config.RedisModeCluster, nil }, "redis.addrs"},
		{"ClusterDB", func(c *config.Config) { c.Redis.Mode, c.Redis.DB = config.RedisModeCluster, 2 }, "redis.db"},
		{"NegativeDB", func(c *config.Config) { c.Redis.DB = -1 }, "redis.db"},
		{"NegativeWaitReplicas", func(c *config.Config) { c.Redis.WaitReplicas = -1 }, "redis.wait_replicas"},
		{"WaitTimeout", func(c *config.Config) { c.Redis.WaitTimeout = 0 }, "redis.wait_timeout"},
		{"EmbeddedWaitReplicas", func(c *config.Config) { c.Redis.Addrs, c.Redis.WaitReplicas = []string{}, 1 }, "redis.wait_replicas"},
		{"WaitTimeoutUnderAMillisecond", func(c *config.Config) { c.Redis.WaitTimeout = 500 * time.Microsecond }, "redis.wait_timeout"},
		{"RedisAddr", func(c *config.Config) { c.Redis.Addrs = []string{"a:1", "nohost"} }, "redis.addrs[1]"},
		{"StandaloneTakesOneAddr", func(c *config.Config) { c.Redis.Addrs = []string{"a:1", "b:2"} }, "redis.addrs"},
		{"Namespace", func(c *config.Config) { c.Namespace = "{herald}" }, "namespace"},
		{"ShardsNegative", func(c *config.Config) { c.Shards = -1 }, "shards"},
		{"ShardsTooMany", func(c *config.Config) { c.Shards = 5000 }, "shards"},
		{"Retention", func(c *config.Config) { c.Retention = 0 }, "retention"},
		{"Batch", func(c *config.Config) { c.Dispatcher.Batch = 0 }, "dispatcher.batch"},
		{"Listen", func(c *config.Config) { c.API.Listen = "8080" }, "api.listen"},
		{"EmptyToken", func(c *config.Config) { c.API.Tokens = []config.Secret{"a", ""} }, "api.tokens[1]"},
		{"MaxBody", func(c *config.Config) { c.API.MaxBody = 0 }, "api.max_body"},
		{"WebhookSecret", func(c *config.Config) { c.Senders.Webhook.Secret = "whsec_not base64!" }, "senders.webhook.secret"},
		{"AllowNetworks", func(c *config.Config) { c.Senders.Webhook.AllowNetworks = []string{"10.0.0.0/8", "internal"} }, "senders.webhook.allow_networks[1]"},
		{"TwilioNeedsSID", func(c *config.Config) { c.Senders.SMS.Provider = sms.ProviderTwilio }, "senders.sms.account_sid"},
		{"TwilioNeedsToken", func(c *config.Config) {
			c.Senders.SMS.Provider, c.Senders.SMS.AccountSID = sms.ProviderTwilio, "AC1"
		}, "senders.sms.auth_token"},
		{"TwilioNeedsFrom", func(c *config.Config) {
			c.Senders.SMS.Provider, c.Senders.SMS.AccountSID, c.Senders.SMS.AuthToken = sms.ProviderTwilio, "AC1", "tok"
		}, "senders.sms.from"},
		{"SMSURL", func(c *config.Config) { c.Senders.SMS.URL = "ftp://sms" }, "senders.sms.url"},
		{"SMSURLPort", func(c *config.Config) { c.Senders.SMS.URL = "https://sms.example:80800/send" }, "senders.sms.url"},
		{"TemplatesDir", func(c *config.Config) { c.TemplatesDir = "" }, "templates_dir"},
		{"PoliciesFile", func(c *config.Config) { c.PoliciesFile = "" }, "policies_file"},
		{"LogFormat", func(c *config.Config) { c.Log.Format = "xml" }, "log.format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			cfg := config.Default()
			require.NoError(t, cfg.Validate())
			tt.modify(&cfg)
			requireField(t, cfg.Validate(), tt.field)
		})
	}

	t.Run("WebhookEd25519Secret", func(t *testing.T) {
		t.Parallel()

		// An ed25519 key where an hmac secret goes is refused saying so,
		// not as if it were a malformed whsec_ secret.
		cfg := config.Default()
		cfg.Senders.Webhook.Secret = "whsk_c2VjcmV0"
		err := cfg.Validate()
		requireField(t, err, "senders.webhook.secret")
		require.ErrorContains(t, err, "ed25519")
	})

	t.Run("EmbeddedRedis", func(t *testing.T) {
		t.Parallel()

		cfg := config.Default()
		cfg.Redis.Addrs = []string{}
		require.NoError(t, cfg.Validate())
	})
}

func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()

	const (
		password  = "redis-pass-3141"
		token     = "api-token-2718"
		secret    = "whsec_c2lnbmluZy1rZXktMTYxOA=="
		authToken = "twilio-token-1414"
	)
	cfg := config.Default()
	cfg.Redis.Password = password
	cfg.API.Tokens = []config.Secret{token}
	cfg.Senders.Webhook.Secret = secret
	cfg.Senders.SMS.Provider, cfg.Senders.SMS.AccountSID, cfg.Senders.SMS.AuthToken = sms.ProviderTwilio, "AC1", authToken
	cfg.Senders.SMS.From = "+14155550100"
	require.NoError(t, cfg.Validate())

	var shown strings.Builder
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		fmt.Fprintf(&shown, verb+"\n", cfg)
		fmt.Fprintf(&shown, verb+"\n", &cfg)
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	shown.Write(b)
	slog.New(slog.NewTextHandler(&shown, nil)).Info("config", "config", cfg, "ptr", &cfg, "password", cfg.Redis.Password)
	slog.New(slog.NewJSONHandler(&shown, nil)).Info("config", "config", cfg, "password", cfg.Redis.Password)
	shown.WriteString(cfg.Redis.Password.String()) // a caller asking for its String

	require.Contains(t, shown.String(), "[redacted]")
	for _, s := range []string{password, token, secret, authToken} {
		require.NotContains(t, shown.String(), s)
	}

	// A bad secret's error does not quote it.
	cfg.Senders.Webhook.Secret = "whsec_!!" + password
	require.NotContains(t, cfg.Validate().Error(), password)
}
