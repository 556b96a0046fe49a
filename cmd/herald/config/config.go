// Package config is the herald command's configuration: the keys of
// configs/herald.yaml as plain structs with their defaults and validation,
// and Load, which reads them from the file, then HERALD_* environment
// variables, then the command's flags (koanf stays here, at the edge). The
// packages below the command never see it: the command copies what each
// needs into that package's own Config.
package config

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/metrics"
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
// notify.MaxPayloadDefault, httpsend.TimeoutDefault, sms.ProviderDefault and
// metrics.MaxTopicsDefault.
const (
	// FileDefault is read when --config is not given; unlike a file
	// named with --config, it may be missing.
	FileDefault = "configs/herald.yaml"
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

// RetentionForever is the retention that keeps finished records, and the
// dead_retention that keeps dead ones, as store.Config's -1 does.
const RetentionForever time.Duration = -1

// Redis deployment modes.
const (
	RedisModeStandalone = "standalone"
	RedisModeSentinel   = "sentinel"
	RedisModeCluster    = "cluster"
)

// Config is Herald's configuration: the keys of configs/herald.yaml, which
// HERALD_* environment variables and flags override (see Load). The
// packages below the CLI never see it: commands copy what each needs into
// that package's own Config.
type Config struct {
	Redis RedisConfig `koanf:"redis"`
	// Namespace prefixes every Redis key, so several Herald deployments can
	// share one Redis. Default store.NamespaceDefault ("herald").
	Namespace string `koanf:"namespace"`
	// Shards is how many partitions, each under one Redis Cluster hash tag,
	// the notifications are spread over. A namespace's count is recorded in
	// Redis when it is first used, and a process configured with another
	// fails, since changing it would strand what is stored. Default 0: the
	// recorded count; for a new namespace store.ShardsDefault (16) on a
	// Cluster and store.ShardsSingleDefault (1) on a single Redis.
	Shards int `koanf:"shards"`
	// Retention is how long succeeded and cancelled records are kept;
	// RetentionForever (-1) keeps them. Dead records go by DeadRetention.
	// Default store.RetentionDefault (168h).
	Retention time.Duration `koanf:"retention"`
	// DeadRetention is how long a dead notification stays in the
	// dead-letter set, from the time it died, before the sweep deletes it
	// with its record and history; RetentionForever (-1) keeps it until
	// replayed or purged. Default store.DeadRetentionDefault (-1), so that
	// an upgrade deletes no dead letter an operator still means to replay.
	DeadRetention time.Duration `koanf:"dead_retention"`
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
	// TopicsStrict accepts only the topics PoliciesFile names: an enqueue
	// to another is refused (400 naming topic). Default false.
	TopicsStrict bool `koanf:"topics_strict"`
	// Metrics configures /metrics.
	Metrics MetricsConfig `koanf:"metrics"`
	// Log chooses the log level and format.
	Log LogConfig `koanf:"log"`
	// Otel configures OpenTelemetry tracing.
	Otel OtelConfig `koanf:"otel"`
}

// RedisConfig says where Redis is.
type RedisConfig struct {
	// Addrs lists host:port addresses: one server, the Sentinels, or some
	// Cluster nodes. One with an '@' is refused: credentials go in Username
	// and Password, which are never printed. Default [RedisAddrDefault]. An
	// empty list runs on an embedded in-process Redis, for trying Herald
	// out: nothing survives exit.
	Addrs []string `koanf:"addrs"`
	// Mode is standalone, sentinel or cluster. Default standalone.
	Mode string `koanf:"mode"`
	// MasterName is the Sentinel master's name; required in sentinel mode.
	MasterName string `koanf:"master_name"`
	// Username is the Redis ACL user Herald authenticates as, with
	// Password, on the Redis servers (not the Sentinels). Empty: the
	// default user.
	Username string `koanf:"username"`
	// Password authenticates to Redis (and to the Sentinels).
	Password Secret `koanf:"password"`
	// DB selects a database; standalone and sentinel only. Default 0.
	DB int `koanf:"db"`
	// TLS connects over TLS, verifying the server's certificate.
	TLS bool `koanf:"tls"`
	// WaitReplicas, when above 0, makes every acknowledged write (an
	// enqueue, a cancel, a replay, an ack) wait until that many replicas
	// have it, and answer 503 when they do not within WaitTimeout. Default
	// 0: acknowledged once the master ran it. It must be 0 with the
	// embedded Redis (Addrs empty), which has no replicas.
	WaitReplicas int `koanf:"wait_replicas"`
	// WaitTimeout bounds that wait, in whole milliseconds (Redis's WAIT
	// counts no finer), so it must be at least 1ms: WAIT reads 0 as wait
	// forever. Default store.WaitTimeoutDefault (1s).
	WaitTimeout time.Duration `koanf:"wait_timeout"`
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
	// which the server warns about at start, and /v1 and /ui/ answer only
	// IP addresses, localhost and Hosts.
	Tokens []Secret `koanf:"tokens"`
	// Hosts are the host names /v1 and /ui/ answer when Tokens is empty,
	// besides IP addresses and localhost, which are always answered: a
	// request for another name may come from a web page that pointed its
	// own name at the API (DNS rebinding), and is refused with 403. "*"
	// answers every name, for a proxy in front that checks it. See
	// api.Config.Hosts.
	Hosts []string `koanf:"hosts"`
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

// MetricsConfig configures the metrics; see metrics.Config.
type MetricsConfig struct {
	// MaxTopics bounds the topics with series of their own besides those of
	// policies_file, which always have theirs; the others share the topic
	// label "other". Default metrics.MaxTopicsDefault (100).
	MaxTopics int `koanf:"max_topics"`
}

// LogConfig chooses the log handler.
type LogConfig struct {
	// Level is debug, info, warn or error. Default info.
	Level string `koanf:"level"`
	// Format is text or json. Default text.
	Format string `koanf:"format"`
}

// OtelConfig configures OpenTelemetry tracing (see the tracing package).
type OtelConfig struct {
	// Endpoint is the OTLP/HTTP collector spans are sent to: a URL such as
	// http://otel-collector:4318, or host:port for plain HTTP, with a port
	// from 1 to 65535 and no '@'. Empty, the default: no tracing, at no
	// cost.
	Endpoint string `koanf:"endpoint"`
}

// Default returns the configuration used where neither the file, the
// environment nor a flag sets a key. Each call returns fresh slices.
func Default() Config {
	return Config{
		Redis:         RedisConfig{Addrs: []string{RedisAddrDefault}, Mode: RedisModeStandalone, WaitTimeout: store.WaitTimeoutDefault},
		Namespace:     store.NamespaceDefault,
		Retention:     store.RetentionDefault,
		DeadRetention: store.DeadRetentionDefault,
		Dispatcher:    DispatcherConfig{Concurrency: schedule.ConcurrencyDefault, Batch: schedule.BatchDefault},
		API:           APIConfig{Listen: ListenDefault, Tokens: []Secret{}, Hosts: []string{}, MaxBody: notify.MaxPayloadDefault},
		Senders:       SendersConfig{Webhook: WebhookConfig{Timeout: httpsend.TimeoutDefault, AllowNetworks: []string{}}, SMS: SMSConfig{Provider: sms.ProviderDefault}},
		TemplatesDir:  TemplatesDirDefault,
		PoliciesFile:  PoliciesFileDefault,
		Metrics:       MetricsConfig{MaxTopics: metrics.MaxTopicsDefault},
		Log:           LogConfig{Level: "info", Format: "text"},
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
	case r.WaitReplicas < 0:
		return notify.Errorf("redis.wait_replicas", "must not be negative")
	case r.WaitReplicas > 0 && len(r.Addrs) == 0:
		// Every write would be stored, then answered 503 for want of replicas.
		return notify.Errorf("redis.wait_replicas", "must be 0 with the embedded Redis (redis.addrs empty), which has no replicas")
	case r.WaitTimeout < time.Millisecond:
		// Shorter would reach Redis as WAIT's 0, which waits forever.
		return notify.Errorf("redis.wait_timeout", "must be at least 1ms, not %s: Redis waits in whole milliseconds", r.WaitTimeout)
	}
	for i, a := range r.Addrs {
		field := fmt.Sprintf("redis.addrs[%d]", i)
		if strings.Contains(a, "@") {
			// go-redis would dial user:password@host as a host name and
			// quote it in every dial error, which the log then holds.
			return notify.Errorf(field, "must be host:port without a user or password, not %q: give them in redis.username and redis.password", notify.RedactedURL(a))
		}
		// A port that is not a number, as in host:6379?password=x, would
		// reach the dial errors as the '@' would.
		if _, port, err := net.SplitHostPort(a); err != nil || !validPort(port) {
			return notify.Errorf(field, "must be host:port with a port from 1 to 65535, not %q", notify.RedactedURL(a))
		}
	}
	if r.Mode == RedisModeStandalone && len(r.Addrs) > 1 {
		return notify.Errorf("redis.addrs", "lists %d addresses, but standalone mode takes one: set redis.mode to sentinel or cluster for more", len(r.Addrs))
	}
	switch {
	case !namespaceRe.MatchString(c.Namespace):
		return notify.Errorf("namespace", "must match [A-Za-z0-9._:-]{1,64}")
	case c.Shards < 0 || c.Shards > store.MaxShards:
		return notify.Errorf("shards", "must be between 1 and %d, or 0 for the namespace's recorded count", store.MaxShards)
	case c.Retention <= 0 && c.Retention != RetentionForever:
		return notify.Errorf("retention", "must be positive, or -1 to keep finished records forever")
	case c.DeadRetention <= 0 && c.DeadRetention != RetentionForever:
		return notify.Errorf("dead_retention", "must be positive, or -1 to keep dead notifications until replayed or purged")
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
	case c.Metrics.MaxTopics < 1:
		return notify.Errorf("metrics.max_topics", "must be at least 1")
	}
	if _, port, err := net.SplitHostPort(c.API.Listen); err != nil || port == "" {
		return notify.Errorf("api.listen", "must be host:port, such as 127.0.0.1:8080, not %q", c.API.Listen)
	}
	for i, tok := range c.API.Tokens {
		if tok == "" {
			return notify.Errorf(fmt.Sprintf("api.tokens[%d]", i), "must not be empty")
		}
	}
	for i, h := range c.API.Hosts {
		if err := api.ValidateHost(h); err != nil {
			return notify.Errorf(fmt.Sprintf("api.hosts[%d]", i), "%v", err)
		}
	}
	if _, err := webhook.ParseSecret(string(c.Senders.Webhook.Secret)); err != nil {
		return notify.Errorf("senders.webhook.secret", "%v", err)
	}
	for i, cidr := range c.Senders.Webhook.AllowNetworks {
		if _, err := httpsend.ParsePrefixes([]string{cidr}); err != nil {
			return notify.Errorf(fmt.Sprintf("senders.webhook.allow_networks[%d]", i), "must be a CIDR such as 127.0.0.0/8, not %q", cidr)
		}
	}
	if err := c.Senders.SMS.validate(); err != nil {
		return err
	}
	if err := c.Otel.validate(); err != nil {
		return err
	}
	return c.Log.Validate()
}

// validate refuses an endpoint the exporter would take without a word and
// then fail to send every span to, so that tracing is never off in silence.
func (o *OtelConfig) validate() error {
	if o.Endpoint == "" {
		return nil
	}
	if strings.Contains(o.Endpoint, "://") {
		if !notify.ValidHTTPURL(o.Endpoint) {
			return notify.Errorf("otel.endpoint", "must be an http or https URL such as http://otel-collector:4318, or host:port for plain HTTP")
		}
		return nil
	}
	// A port that is not a number, as in tok:secret@collector, and a host
	// with an '@' would reach the exporter's errors, which are logged.
	host, port, err := net.SplitHostPort(o.Endpoint)
	if err != nil || host == "" || strings.Contains(host, "@") || !validPort(port) {
		return notify.Errorf("otel.endpoint", "must be host:port such as otel-collector:4318, with a port from 1 to 65535 and no user or password "+
			"(give a collector's credentials in OTEL_EXPORTER_OTLP_HEADERS), or an http or https URL, not %q", notify.RedactedURL(o.Endpoint))
	}
	return nil
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
	if s.URL != "" && !notify.ValidHTTPURL(s.URL) {
		return notify.Errorf("senders.sms.url", "must be an http or https URL, with a port from 1 to 65535 where it names one")
	}
	return nil
}

// Validate checks the log section alone, as commands without the
// configuration check --log-level.
func (l *LogConfig) Validate() error {
	if _, err := ParseLevel(l.Level); err != nil {
		return notify.Errorf("log.level", "must be debug, info, warn or error, not %q", l.Level)
	}
	if l.Format != "text" && l.Format != "json" {
		return notify.Errorf("log.format", "must be text or json, not %q", l.Format)
	}
	return nil
}

// NewLogger returns a logger writing to w at the level and in the format
// of a validated l; debug makes it log at debug level, whatever l says.
func (l *LogConfig) NewLogger(w io.Writer, debug bool) *slog.Logger {
	level, _ := ParseLevel(l.Level) // validated
	if debug {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// ParseLevel reads a log level name.
func ParseLevel(s string) (slog.Level, error) {
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

// NewClient returns the go-redis client of a validated c with at least one
// address: of one server (standalone), of a master found through its
// Sentinels (go-redis's failover client, which follows a failover), or of
// a Cluster. onConnect, when set, runs on each new connection: in Sentinel
// mode on those to the Sentinels too, as go-redis gives them the same hook.
func (c *RedisConfig) NewClient(onConnect func(context.Context, *redis.Conn) error) redis.UniversalClient {
	var tlsConfig *tls.Config
	if c.TLS {
		// The server name is taken from each address as it is dialled.
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	password := string(c.Password)
	switch c.Mode {
	case RedisModeSentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:       c.MasterName,
			SentinelAddrs:    c.Addrs,
			SentinelPassword: password,
			Username:         c.Username,
			Password:         password,
			DB:               c.DB,
			TLSConfig:        tlsConfig,
			OnConnect:        onConnect,
		})
	case RedisModeCluster:
		// One dial per try, not go-redis's five: a call that spans shards
		// waits for its slowest node, and a master just killed would hold
		// up every healthy master's work for the five dials (each up to
		// the dial timeout, for a host that does not answer). The store's
		// callers retry with a backoff of their own.
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Username: c.Username, Password: password, TLSConfig: tlsConfig,
			OnConnect: onConnect, DialerRetries: 1})
	}
	return redis.NewClient(&redis.Options{Addr: c.Addrs[0], Username: c.Username, Password: password, DB: c.DB, TLSConfig: tlsConfig,
		OnConnect: onConnect})
}

// validPort reports whether port is a TCP port number, 1 to 65535.
func validPort(port string) bool {
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n > 0
}
