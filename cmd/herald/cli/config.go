package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/sms"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// Defaults of Config that no package below the CLI owns. The others are
// store.NamespaceDefault, store.ShardsDefault, store.RetentionDefault,
// schedule.ConcurrencyDefault, schedule.BatchDefault,
// notify.MaxPayloadDefault, httpsend.TimeoutDefault and sms.ProviderDefault.
const (
	// ConfigFileDefault is read when --config is not given; unlike a file
	// named with --config, it may be missing.
	ConfigFileDefault = "configs/herald.yaml"
	// RedisAddrDefault is the Redis server used when the config names none.
	RedisAddrDefault = "127.0.0.1:6379"
	// ListenDefault is the API's address: loopback only, until an operator
	// decides otherwise.
	ListenDefault = "127.0.0.1:8080"
	// TemplatesDirDefault and PoliciesFileDefault are relative to the
	// working directory, as are the paths a config file gives.
	TemplatesDirDefault = "templates"
	PoliciesFileDefault = "configs/policies.yaml"
)

// Redis deployment modes.
const (
	RedisModeStandalone = "standalone"
	RedisModeSentinel   = "sentinel"
	RedisModeCluster    = "cluster"
)

// Config is Herald's configuration: the keys of configs/herald.yaml, which
// HERALD_* environment variables and flags override (see LoadConfig). The
// packages below the CLI never see it: commands copy what each needs into
// that package's own Config.
type Config struct {
	Redis RedisConfig `koanf:"redis"`
	// Namespace prefixes every Redis key, so several Herald deployments can
	// share one Redis. Default store.NamespaceDefault ("herald").
	Namespace string `koanf:"namespace"`
	// Shards is how many partitions, each under one Redis Cluster hash tag,
	// the notifications are spread over. Changing it strands what is stored:
	// pick it once. Default store.ShardsDefault (16).
	Shards int `koanf:"shards"`
	// Retention is how long finished records are kept. Default
	// store.RetentionDefault (168h).
	Retention time.Duration `koanf:"retention"`
	// Dispatcher sizes the dispatcher.
	Dispatcher DispatcherConfig `koanf:"dispatcher"`
	// API configures the HTTP API.
	API APIConfig `koanf:"api"`
	// Senders configures the webhook and SMS senders.
	Senders SendersConfig `koanf:"senders"`
	// TemplatesDir holds the templates notifications name. Default
	// TemplatesDirDefault.
	TemplatesDir string `koanf:"templates_dir"`
	// PoliciesFile holds the policies and topics, reloaded on change and on
	// SIGHUP. Default PoliciesFileDefault.
	PoliciesFile string `koanf:"policies_file"`
	// Log chooses the log level and format.
	Log LogConfig `koanf:"log"`
}

// RedisConfig says where Redis is.
type RedisConfig struct {
	// Addrs lists host:port addresses: one server, the Sentinels, or some
	// Cluster nodes. Default [RedisAddrDefault]. An empty list runs on an
	// embedded in-process Redis, for trying Herald out: nothing survives
	// exit.
	Addrs []string `koanf:"addrs"`
	// Mode is standalone, sentinel or cluster. Default standalone.
	Mode string `koanf:"mode"`
	// MasterName is the Sentinel master's name; required in sentinel mode.
	MasterName string `koanf:"master_name"`
	// Password authenticates to Redis (and to the Sentinels).
	Password Secret `koanf:"password"`
	// DB selects a database; standalone and sentinel only. Default 0.
	DB int `koanf:"db"`
	// TLS connects over TLS, verifying the server's certificate.
	TLS bool `koanf:"tls"`
}

// DispatcherConfig sizes the dispatcher; see schedule.Config.
type DispatcherConfig struct {
	// Concurrency is the most attempts running at once. Default
	// schedule.ConcurrencyDefault (64).
	Concurrency int `koanf:"concurrency"`
	// Batch is the most notifications one reservation moves per shard.
	// Default schedule.BatchDefault (100).
	Batch int `koanf:"batch"`
}

// APIConfig configures the HTTP API.
type APIConfig struct {
	// Listen is the host:port the API listens on. Default ListenDefault.
	Listen string `koanf:"listen"`
	// Tokens are the bearer tokens /v1 accepts. Empty: no authentication,
	// which the server warns about at start.
	Tokens []Secret `koanf:"tokens"`
	// MaxBody is the largest request body, in bytes; larger ones get 413.
	// Default notify.MaxPayloadDefault (262144).
	MaxBody int `koanf:"max_body"`
}

// SendersConfig configures the senders.
type SendersConfig struct {
	Webhook WebhookConfig `koanf:"webhook"`
	SMS     SMSConfig     `koanf:"sms"`
}

// WebhookConfig configures the webhook sender; see webhook.Config.
type WebhookConfig struct {
	// Secret signs each webhook (Standard Webhooks): "whsec_<base64>" or a
	// raw key. Empty: unsigned.
	Secret Secret `koanf:"secret"`
	// Timeout caps every attempt of every sender: a policy's shorter
	// timeout applies, a longer one is cut to this. Default
	// httpsend.TimeoutDefault (10s).
	Timeout time.Duration `koanf:"timeout"`
	// AllowNetworks lists CIDRs the SSRF guard lets through although they
	// are internal, such as 127.0.0.0/8 for a receiver on the same machine.
	AllowNetworks []string `koanf:"allow_networks"`
}

// SMSConfig configures the SMS sender; see sms.Config.
type SMSConfig struct {
	// Provider is http (a JSON POST to URL) or twilio. Default http.
	Provider string `koanf:"provider"`
	// URL is the http provider's endpoint, or the Twilio API's base URL
	// (empty: Twilio's own).
	URL string `koanf:"url"`
	// AccountSID and AuthToken are Twilio's credentials; required for
	// twilio.
	AccountSID string `koanf:"account_sid"`
	AuthToken  Secret `koanf:"auth_token"`
	// From is the sending number or sender id; required for twilio.
	From string `koanf:"from"`
}

// LogConfig chooses the log handler.
type LogConfig struct {
	// Level is debug, info, warn or error. Default info.
	Level string `koanf:"level"`
	// Format is text or json. Default text.
	Format string `koanf:"format"`
}

// ConfigDefault returns the configuration used where neither the file, the
// environment nor a flag sets a key. Each call returns fresh slices.
func ConfigDefault() Config {
	return Config{
		Redis:        RedisConfig{Addrs: []string{RedisAddrDefault}, Mode: RedisModeStandalone},
		Namespace:    store.NamespaceDefault,
		Shards:       store.ShardsDefault,
		Retention:    store.RetentionDefault,
		Dispatcher:   DispatcherConfig{Concurrency: schedule.ConcurrencyDefault, Batch: schedule.BatchDefault},
		API:          APIConfig{Listen: ListenDefault, Tokens: []Secret{}, MaxBody: notify.MaxPayloadDefault},
		Senders:      SendersConfig{Webhook: WebhookConfig{Timeout: httpsend.TimeoutDefault, AllowNetworks: []string{}}, SMS: SMSConfig{Provider: sms.ProviderDefault}},
		TemplatesDir: TemplatesDirDefault,
		PoliciesFile: PoliciesFileDefault,
		Log:          LogConfig{Level: "info", Format: "text"},
	}
}

// namespaceRe keeps namespaces to characters that need no quoting in
// redis-cli and cannot open a hash tag.
var namespaceRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// Validate checks c and returns a *notify.FieldError naming the first bad
// key by its path, as "redis.master_name".
func (c *Config) Validate() error {
	r := &c.Redis
	switch {
	case !slices.Contains([]string{RedisModeStandalone, RedisModeSentinel, RedisModeCluster}, r.Mode):
		return notify.Errorf("redis.mode", "must be standalone, sentinel or cluster, not %q", r.Mode)
	case r.Mode != RedisModeStandalone && len(r.Addrs) == 0:
		return notify.Errorf("redis.addrs", "must list at least one address in %s mode (empty runs an embedded Redis, standalone only)", r.Mode)
	case r.Mode == RedisModeSentinel && r.MasterName == "":
		return notify.Errorf("redis.master_name", "is required in sentinel mode")
	case r.DB < 0:
		return notify.Errorf("redis.db", "must not be negative")
	case r.Mode == RedisModeCluster && r.DB != 0:
		return notify.Errorf("redis.db", "must be 0 in cluster mode")
	}
	for i, a := range r.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return notify.Errorf(fmt.Sprintf("redis.addrs[%d]", i), "must be host:port, not %q", a)
		}
	}
	if r.Mode == RedisModeStandalone && len(r.Addrs) > 1 {
		return notify.Errorf("redis.addrs", "lists %d addresses, but standalone mode takes one: set redis.mode to sentinel or cluster for more", len(r.Addrs))
	}
	switch {
	case !namespaceRe.MatchString(c.Namespace):
		return notify.Errorf("namespace", "must match [A-Za-z0-9._:-]{1,64}")
	case c.Shards < 1 || c.Shards > store.MaxShards:
		return notify.Errorf("shards", "must be between 1 and %d", store.MaxShards)
	case c.Retention <= 0:
		return notify.Errorf("retention", "must be positive")
	case c.Dispatcher.Concurrency < 1:
		return notify.Errorf("dispatcher.concurrency", "must be at least 1")
	case c.Dispatcher.Batch < 1:
		return notify.Errorf("dispatcher.batch", "must be at least 1")
	case c.API.MaxBody < 1:
		return notify.Errorf("api.max_body", "must be at least 1 byte")
	case c.Senders.Webhook.Timeout <= 0:
		return notify.Errorf("senders.webhook.timeout", "must be positive")
	case c.TemplatesDir == "":
		return notify.Errorf("templates_dir", "is required")
	case c.PoliciesFile == "":
		return notify.Errorf("policies_file", "is required")
	}
	if _, port, err := net.SplitHostPort(c.API.Listen); err != nil || port == "" {
		return notify.Errorf("api.listen", "must be host:port, such as 127.0.0.1:8080, not %q", c.API.Listen)
	}
	for i, tok := range c.API.Tokens {
		if tok == "" {
			return notify.Errorf(fmt.Sprintf("api.tokens[%d]", i), "must not be empty")
		}
	}
	if _, err := webhook.ParseSecret(string(c.Senders.Webhook.Secret)); err != nil {
		return notify.Errorf("senders.webhook.secret", "must be whsec_ followed by the key in base64, or a raw key")
	}
	for i, cidr := range c.Senders.Webhook.AllowNetworks {
		if _, err := httpsend.ParsePrefixes([]string{cidr}); err != nil {
			return notify.Errorf(fmt.Sprintf("senders.webhook.allow_networks[%d]", i), "must be a CIDR such as 127.0.0.0/8, not %q", cidr)
		}
	}
	if err := c.Senders.SMS.validate(); err != nil {
		return err
	}
	return c.Log.validate()
}

func (s *SMSConfig) validate() error {
	switch s.Provider {
	case sms.ProviderHTTP:
	case sms.ProviderTwilio:
		switch {
		case s.AccountSID == "":
			return notify.Errorf("senders.sms.account_sid", "is required for twilio")
		case s.AuthToken == "":
			return notify.Errorf("senders.sms.auth_token", "is required for twilio")
		case s.From == "":
			return notify.Errorf("senders.sms.from", "is required for twilio")
		}
	default:
		return notify.Errorf("senders.sms.provider", "must be http or twilio, not %q", s.Provider)
	}
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return notify.Errorf("senders.sms.url", "must be an http or https URL")
		}
	}
	return nil
}

func (l *LogConfig) validate() error {
	if _, err := parseLevel(l.Level); err != nil {
		return notify.Errorf("log.level", "must be debug, info, warn or error, not %q", l.Level)
	}
	if l.Format != "text" && l.Format != "json" {
		return notify.Errorf("log.format", "must be text or json, not %q", l.Format)
	}
	return nil
}

// parseLevel reads a log level name.
func parseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q", s)
}

// Secret is a configuration value that must not be shown: a password, a
// token, a signing key. Printing it with fmt under any verb, alone or
// inside a struct, logging it with slog or encoding it as JSON or text
// shows "[redacted]" (or "" when it is empty, so an operator can still see
// that it is unset). Convert it with string(s) where the value is needed.
type Secret string

const redacted = "[redacted]"

func (s Secret) shown() string {
	if s == "" {
		return ""
	}
	return redacted
}

// String implements fmt.Stringer.
func (s Secret) String() string { return s.shown() }

// Format implements fmt.Formatter. Without it, a verb that does not suit
// a string (%d) would print the value of a Secret inside a struct.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "%q", s.shown())
		return
	}
	_, _ = io.WriteString(f, s.shown())
}

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.shown()) }

// MarshalText implements encoding.TextMarshaler, which JSON, YAML and
// koanf's printers use.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.shown()), nil }
