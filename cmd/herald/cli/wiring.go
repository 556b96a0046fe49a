package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/cmd/herald/config"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/redisconf"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/poll"
	"github.com/heraldhq/herald/notify/sms"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/templates"
	"github.com/heraldhq/herald/tracing"
	"github.com/heraldhq/herald/ui"
)

// wiring is what a command builds from the configuration: the Redis
// connection and the store on it, then, as the command needs them, the
// client, templates, senders, dispatcher and API. Every command builds
// them here, so serve, demo and the operator's commands cannot drift
// apart in how they read the configuration.
type wiring struct {
	cfg   *config.Config
	log   *slog.Logger
	redis *redisConn
	store *store.Store
	// tracer is set by startTracing when otel.endpoint is set.
	tracer *tracing.Tracer
	// templates is set by loadTemplates: the templates the senders render
	// and the client and API check requests' template names against.
	templates *templates.Set
	// memory reads Redis's memory for /readyz; nil on an embedded Redis,
	// which has no maxmemory and no INFO memory.
	memory *redisMemory
}

// wire connects to the configured Redis and opens the store on it for cmd.
// allowEmbedded says whether cmd may run on an embedded Redis when
// redis.addrs is empty (see openRedis). Close the wiring when done.
func (b *Base) wire(cmd *cobra.Command, allowEmbedded bool) (*wiring, error) {
	return b.wireWatched(cmd, allowEmbedded, nil)
}

// wireWatched is wire with onConnect run on every new Redis connection,
// as serve watches Redis's settings.
func (b *Base) wireWatched(cmd *cobra.Command, allowEmbedded bool, onConnect func(context.Context, *redis.Conn) error) (*wiring, error) {
	rc, err := openRedis(cmd.Context(), &b.Config.Redis, b.Logger, allowEmbedded, cmd.CommandPath(), onConnect)
	if err != nil {
		return nil, err
	}
	st, err := store.New(&store.Config{
		Client:        rc.client,
		Namespace:     b.Config.Namespace,
		Shards:        b.Config.Shards,
		Retention:     b.Config.Retention,
		DeadRetention: b.Config.DeadRetention,
		WaitReplicas:  b.Config.Redis.WaitReplicas,
		WaitTimeout:   b.Config.Redis.WaitTimeout,
		Logger:        b.Logger,
		ReadOnly:      cmd.Annotations[readOnlyAnnotation] != "",
	})
	if err == nil {
		// Settle the namespace's shard count now, so that a shards setting
		// that disagrees with it stops the command before it does anything.
		_, err = st.Shards(cmd.Context())
		if redis.IsPermissionError(err) {
			err = fmt.Errorf("the Redis user may not use Herald's keys and channels; allow it ~%[1]s:* and &%[1]s:*: %w", b.Config.Namespace, err)
		}
	}
	if err != nil {
		rc.close()
		return nil, err
	}
	w := &wiring{cfg: b.Config, log: b.Logger, redis: rc, store: st}
	if rc.embedded == nil {
		w.memory = &redisMemory{client: rc.client}
	}
	return w, nil
}

// memoryCacheFor is how long one reading of Redis's memory answers /readyz
// and the memory gauges: probes and scrapes of every process then cost
// Redis at most one INFO memory per master a second each.
const memoryCacheFor = time.Second

// redisMemory reads what Redis uses against its maxmemory, caching a
// reading for memoryCacheFor. It is safe for concurrent use.
type redisMemory struct {
	client redis.UniversalClient

	// mu guards the reading last, taken at at, and reading, which is
	// closed when the read under way ends (nil while none is): callers
	// that find the reading stale while another reads wait for its end,
	// each no longer than its own context, rather than each send INFO.
	mu      sync.Mutex
	at      time.Time
	last    api.RedisMemory
	reading chan struct{}
}

// read returns the cached reading, or a new one once it is stale. A failed
// read is not cached: the next caller tries again.
func (m *redisMemory) read(ctx context.Context) (api.RedisMemory, error) {
	for {
		m.mu.Lock()
		if !m.at.IsZero() && time.Since(m.at) < memoryCacheFor {
			last := m.last
			m.mu.Unlock()
			return last, nil
		}
		wait := m.reading
		if wait == nil {
			break // m.mu held: this caller reads
		}
		m.mu.Unlock()
		select {
		case <-wait: // read, or failed: look again
		case <-ctx.Done():
			// A probe answers within its own timeout, however long a
			// scrape's read waits for Redis.
			return api.RedisMemory{}, fmt.Errorf("INFO memory: %w", ctx.Err())
		}
	}
	done := make(chan struct{})
	m.reading = done
	m.mu.Unlock()
	got, err := readRedisMemory(ctx, m.client)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reading = nil
	close(done)
	if err != nil {
		return api.RedisMemory{}, err
	}
	m.at, m.last = time.Now(), got
	return got, nil
}

// usage is read's figures, as the metrics' memory gauges take them.
func (m *redisMemory) usage(ctx context.Context) (used, limit int64, err error) {
	r, err := m.read(ctx)
	return r.Used, r.Max, err
}

// readRedisMemory reads what Redis counts against its maxmemory, and that
// maxmemory, with INFO memory (redisconf.Memory). On a Cluster it reads
// every master and returns the one closest to its maxmemory, with its
// address: enqueues are spread over the masters by shard, and those to its
// slots are refused first.
func readRedisMemory(ctx context.Context, c redis.UniversalClient) (api.RedisMemory, error) {
	cluster, ok := c.(*redis.ClusterClient)
	if !ok {
		return nodeMemory(ctx, c)
	}
	masters, err := clusterMasters(ctx, cluster)
	if err != nil {
		return api.RedisMemory{}, err
	}
	read := make([]api.RedisMemory, len(masters))
	errs := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, node := range masters {
		wg.Go(func() {
			read[i], errs[i] = nodeMemory(ctx, node)
			read[i].Addr = node.Options().Addr
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", read[i].Addr, errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return api.RedisMemory{}, err
	}
	fullest := read[0]
	for _, m := range read[1:] {
		if fuller(m, fullest) {
			fullest = m
		}
	}
	return fullest, nil
}

// clusterMasters returns the masters of every slot, as the client's cached
// slot map has them, found by the widest slot range of each master one of
// them names with CLUSTER SLOTS. ForEachMaster would first read the slot
// map afresh from a node picked at random, replicas among them, and wait
// out the read timeout of one that hangs (its host stopped or cut off): a
// probe of /readyz, which reads memory every second, would then fail at
// random while every master answers.
func clusterMasters(ctx context.Context, cc *redis.ClusterClient) ([]*redis.Client, error) {
	//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7.0, and Herald supports 6.2
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	// A resharded cluster splits a master's slots into many ranges, some of
	// one slot, whose key takes thousands of tries to find: a key is looked
	// for in each master's widest range alone.
	widest := map[string]redis.ClusterSlot{}
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		addr := r.Nodes[0].Addr
		if w, ok := widest[addr]; !ok || r.End-r.Start > w.End-w.Start {
			widest[addr] = r
		}
	}
	var masters []*redis.Client
	seen := map[string]bool{}
	for _, r := range widest {
		node, err := cc.MasterForKey(ctx, keyInSlots(r.Start, r.End))
		if err != nil {
			return nil, fmt.Errorf("find the master of slots %d-%d: %w", r.Start, r.End, err)
		}
		// The client's map may name one master for two of the answer's.
		if addr := node.Options().Addr; !seen[addr] {
			seen[addr] = true
			masters = append(masters, node)
		}
	}
	if len(masters) == 0 {
		return nil, errors.New("CLUSTER SLOTS names no master")
	}
	return masters, nil
}

// keyInSlots returns a key that Redis Cluster puts in a slot from first to
// last: the first decimal number that hashes there, found in about
// 16384/(last-first+1) tries.
func keyInSlots(first, last int) string {
	for i := 0; ; i++ {
		key := strconv.Itoa(i)
		if slot := int(crc16(key) % 16384); slot >= first && slot <= last {
			return key
		}
	}
}

// crc16 is the CRC-16/XMODEM of key, whose remainder modulo 16384 is the
// Redis Cluster slot of a key without a hash tag.
func crc16(key string) uint16 {
	var crc uint16
	for i := range len(key) {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// fuller reports whether a is closer to its maxmemory than b: a larger
// share of it used, a limit against none, or without limits more used.
func fuller(a, b api.RedisMemory) bool {
	switch {
	case a.Max > 0 && b.Max > 0:
		return float64(a.Used)/float64(a.Max) > float64(b.Used)/float64(b.Max)
	case a.Max > 0 || b.Max > 0:
		return a.Max > 0
	}
	return a.Used > b.Used
}

// nodeMemory reads one server's memory against its maxmemory.
func nodeMemory(ctx context.Context, c redis.Cmdable) (api.RedisMemory, error) {
	used, limit, err := redisconf.Memory(ctx, c)
	return api.RedisMemory{Used: used, Max: limit}, err
}

// Close closes the Redis connection and stops an embedded Redis.
func (w *wiring) Close() { w.redis.close() }

// loadPolicies reads a policies file once, for a command that resolves a
// few requests and exits (serve keeps it current with Base.StartPolicies).
// A file that does not load is a *UsageError naming the offending key.
func loadPolicies(path string) (*policy.Set, error) {
	set, err := policy.Load(path)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	return set, nil
}

// loadConfigPolicies is loadPolicies of the file policies_file names.
func (b *Base) loadConfigPolicies() (*policy.Set, error) {
	set, err := loadPolicies(b.Config.PoliciesFile)
	return set, relativePathHint(err, "policies_file", b.Config.PoliciesFile)
}

// relativePathHint adds to err, when it is that path, the relative value of
// key, was not found, where relative paths are looked for: an operator who
// keeps herald.yaml and the policies in /etc/herald looks beside it, while
// herald, often started by a service manager in /, looks in its working
// directory.
func relativePathHint(err error, key, path string) error {
	if !errors.Is(err, fs.ErrNotExist) || filepath.IsAbs(path) {
		return err
	}
	wd, werr := os.Getwd()
	if werr != nil {
		return err
	}
	return fmt.Errorf("%w (%s is relative to the working directory, %s)", err, key, wd)
}

// newClient returns the Go client the operator's commands use: the same
// validation, defaults and payload limit as the API, straight to Redis,
// checking the template a request names once loadTemplates has read them.
func (w *wiring) newClient(policies func() *policy.Set) (*client.Client, error) {
	return client.New(&client.Config{Store: w.store, PoliciesFunc: policies, MaxPayload: w.cfg.API.MaxBody, StrictTopics: w.cfg.TopicsStrict,
		TemplateFunc: w.templateFunc()})
}

// loadTemplates reads templates_dir, as serve does where it dispatches. A
// missing folder or a template that does not parse is a configuration
// error.
func (w *wiring) loadTemplates() error {
	tmpl, err := templates.Load(w.cfg.TemplatesDir)
	if err != nil {
		return &UsageError{Err: relativePathHint(fmt.Errorf("templates_dir: %w", err), "templates_dir", w.cfg.TemplatesDir)}
	}
	w.templates = tmpl
	return nil
}

// templateFunc is the client's and the API's TemplateFunc: whether
// loadTemplates loaded a template of that name. Before it has run, nil,
// which takes any name: only a process that sends, or a command whose
// request names a template, loads them.
func (w *wiring) templateFunc() func(name string) bool {
	if w.templates == nil {
		return nil
	}
	return w.templates.Has
}

// endpoints returns the registry of the policies file's endpoints and those
// registered over the API.
func (w *wiring) endpoints(policies func() *policy.Set) *endpoint.Registry {
	return endpoint.NewRegistry(&endpoint.RegistryConfig{
		FileFunc: func() map[string]endpoint.Endpoint { return policies().Endpoints },
		Source:   w.store,
	})
}

// newSenders builds the webhook, SMS and poll senders, all behind the SSRF
// guard with senders.webhook.allow_networks, the poll sender sending its
// on_done webhooks through the webhook sender. Without senders.sms.url the
// http SMS provider has nowhere to send, so there is no SMS sender and SMS
// notifications fail permanently; that is logged once here. A missing
// templates_dir or a broken template is a configuration error.
func (w *wiring) newSenders(policies func() *policy.Set) (map[string]notify.Sender, error) {
	if err := w.loadTemplates(); err != nil {
		return nil, err
	}
	sc := &w.cfg.Senders
	common := httpsend.Common{Timeout: sc.Webhook.Timeout, Rules: policy.CurrentRules(policies), Templates: w.templates, HTTP: httpsend.Config{
		AllowNetworks: sc.Webhook.AllowNetworks,
		UserAgent:     "herald/" + readVersion().Version,
		Logger:        w.log,
	}}
	hook, err := webhook.New(&webhook.Config{Secret: string(sc.Webhook.Secret), Endpoints: w.endpoints(policies), Common: common})
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("senders.webhook: %w", err)}
	}
	poller, err := poll.New(&poll.Config{OnDone: hook, Common: common})
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("senders.webhook: %w", err)}
	}
	senders := map[string]notify.Sender{notify.ChannelWebhook: hook, notify.ChannelPoll: poller}
	if sc.SMS.Provider == sms.ProviderHTTP && sc.SMS.URL == "" {
		w.log.Warn("herald: senders.sms.url is empty, so SMS notifications fail permanently until it is set")
		return senders, nil
	}
	texter, err := sms.New(&sms.Config{
		Provider:   sc.SMS.Provider,
		URL:        sc.SMS.URL,
		AccountSID: sc.SMS.AccountSID,
		AuthToken:  string(sc.SMS.AuthToken),
		From:       sc.SMS.From,
		Common:     common,
	})
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("senders.sms: %w", err)}
	}
	senders[notify.ChannelSMS] = texter
	return senders, nil
}

// RouteTraceLogs sends the OpenTelemetry SDK's errors, a failed export to
// otel.endpoint among them, to log as warnings, in its format and under its
// level. The setting is process-wide.
func RouteTraceLogs(log *slog.Logger) { tracing.RouteErrors(log) }

// startTracing sends spans to otel.endpoint, when it is set, for the
// dispatcher and API built after it. The returned function flushes what is
// left and stops.
func (w *wiring) startTracing(ctx context.Context) (stop func(), err error) {
	if w.cfg.Otel.Endpoint == "" {
		return func() {}, nil
	}
	tp, err := tracing.NewOTLPProvider(ctx, w.cfg.Otel.Endpoint)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	w.tracer = tracing.New(&tracing.Config{TracerProvider: tp})
	// A collector URL may carry credentials, which logs must not.
	shown := notify.RedactedURL(w.cfg.Otel.Endpoint)
	w.log.InfoContext(ctx, "herald: tracing", "otel_endpoint", shown)
	return func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(flushCtx); err != nil {
			w.log.Warn("herald: flushing traces failed", "error", err)
		}
	}, nil
}

// warnUnloadedTemplates logs each topic of set that names a template
// newSenders did not load: every notification of it would fail for good,
// so an operator hears of it at start and at each reload, not from the
// dead letters.
func (w *wiring) warnUnloadedTemplates(ctx context.Context, set *policy.Set) {
	loaded := w.templates.Names()
	for _, topic := range slices.Sorted(maps.Keys(set.Topics)) {
		if t := set.Topics[topic].Template; t != "" && !slices.Contains(loaded, t) {
			w.log.WarnContext(ctx, "herald: a topic names a template templates_dir does not hold; its notifications fail until the template is added and serve gets SIGHUP",
				"topic", topic, "template", t, "templates_dir", w.cfg.TemplatesDir)
		}
	}
}

// reloadTemplates rereads the templates newSenders loaded, as the
// policies are reread (set is now in force): a topic added to the
// policies with a template of its own would otherwise have every
// notification die for want of it until a restart. A folder that does not
// parse is refused and logged, and the templates loaded before stay.
func (w *wiring) reloadTemplates(ctx context.Context, set *policy.Set) {
	if err := w.templates.Reload(); err != nil {
		w.log.ErrorContext(ctx, "herald: templates not reloaded; the ones loaded before stay", "error", err)
	} else {
		w.log.InfoContext(ctx, "herald: templates reloaded", "templates_dir", w.cfg.TemplatesDir, "count", len(w.templates.Names()))
	}
	w.warnUnloadedTemplates(ctx, set)
}

// newDispatcher returns a dispatcher sized by the dispatcher section, on
// the senders of newSenders.
func (w *wiring) newDispatcher(policies func() *policy.Set, obs schedule.Observer) (*schedule.Dispatcher, error) {
	senders, err := w.newSenders(policies)
	if err != nil {
		return nil, err
	}
	var tr schedule.Tracer
	if w.tracer != nil {
		tr = w.tracer
	}
	return schedule.New(&schedule.Config{
		Store:        w.store,
		Senders:      senders,
		PoliciesFunc: policies,
		Endpoints:    w.endpoints(policies),
		Concurrency:  w.cfg.Dispatcher.Concurrency,
		Batch:        w.cfg.Dispatcher.Batch,
		Observer:     obs,
		Tracer:       tr,
		Logger:       w.log,
	})
}

// minTokenLen is the shortest bearer token serve does not warn of.
const minTokenLen = 16

// newAPI returns the HTTP API of the api section, listening on addr,
// serving m at /metrics, ready and details on /readyz, with Redis's memory
// against its maxmemory, and the dashboard at /ui/.
func (w *wiring) newAPI(ctx context.Context, addr net.Addr, policies func() *policy.Set, m *metrics.Metrics,
	ready func(context.Context) error, details func() any,
) (*api.Server, error) {
	tokens := make([]string, len(w.cfg.API.Tokens))
	for i, t := range w.cfg.API.Tokens {
		tokens[i] = string(t)
	}
	switch {
	case len(tokens) > 0:
	case slices.Contains(w.cfg.API.Hosts, api.AnyHost):
		w.log.WarnContext(ctx, "herald: api.tokens is empty and api.hosts has \"*\", so /v1 and /ui/ answer anyone who can reach "+addr.String()+
			" under any host name, web pages that point their own name at it included; set api.tokens, or have a proxy in front check the host name")
	default:
		w.log.WarnContext(ctx, "herald: api.tokens is empty, so /v1 and /ui/ answer anyone who can reach "+addr.String()+
			" by IP address, localhost or a name in api.hosts; set api.tokens before others can reach it")
	}
	for i, t := range tokens {
		if len(t) < minTokenLen {
			// Every token has every power, a payment notification's
			// endpoints and dead letters included.
			w.log.WarnContext(ctx, "herald: a short bearer token can be guessed; give each of api.tokens 32 or more random characters, such as openssl rand -hex 32 makes",
				"token", fmt.Sprintf("api.tokens[%d]", i), "length", len(t))
		}
	}
	dashboard, err := ui.New(&ui.Config{Store: w.store, PoliciesFunc: policies, Tokens: tokens, Logger: w.log})
	if err != nil {
		return nil, err
	}
	cfg := &api.Config{
		Store:            w.store,
		PoliciesFunc:     policies,
		Tokens:           tokens,
		Hosts:            w.cfg.API.Hosts,
		UI:               dashboard,
		MaxBody:          int64(w.cfg.API.MaxBody),
		Metrics:          m.Handler(),
		ReadyFunc:        ready,
		ReadyDetailsFunc: details,
		StrictTopics:     w.cfg.TopicsStrict,
		TemplateFunc:     w.templateFunc(),
		Observer:         m,
		Logger:           w.log,
	}
	if w.memory != nil {
		cfg.RedisMemoryFunc = w.memory.read
	}
	if w.tracer != nil {
		cfg.Tracer, cfg.Middleware = w.tracer, w.tracer.Middleware
	}
	return api.New(cfg)
}
