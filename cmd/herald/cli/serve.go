package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/cmd/herald/config"
	"github.com/heraldhq/herald/internal/redisconf"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/policy"
)

// Roles of serve: what one process runs.
const (
	RoleAPI        = "api"
	RoleDispatcher = "dispatcher"
	RoleAll        = "all"
)

func (c *app) serveCommand() *cobra.Command {
	var role string
	cmd := withConfig(&cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API and the dispatcher",
		Long: `Serve runs Herald: the HTTP API on api.listen (with /metrics, /healthz,
/readyz and the operator dashboard at /ui/) and the dispatcher that starts
each attempt on time. --role runs one of them, so they can be scaled apart:
any number of either may share a Redis.
A dispatcher-only process serves /metrics, /healthz and /readyz on
api.listen, so that its attempt and lateness metrics are scraped too.

SIGINT or SIGTERM shuts down gracefully: the API stops taking requests and
finishes those in flight, the dispatcher lets running attempts end (or gives
them back, unpenalised, after 10s). A second SIGINT or SIGTERM exits at
once, leaving what still runs to be retried once its ttr runs out. SIGHUP
rereads the policies file, as a change to it does, and, where serve
dispatches, the templates; a bad file or template is refused, logged, and
the old ones stay.

While Redis is down or loading, serve waits for it, answering /readyz with
503. What waiting cannot mend stops serve at start with the reason: a Redis
older than 6.2, a refused redis.username or redis.password, a Redis user
denied scripts or Herald's keys.

With redis.addrs empty, serve runs on an embedded in-process Redis and logs
its address; nothing survives exit.`,
		Example: "  herald serve\n  herald serve --config configs/demo.yaml\n  HERALD_REDIS_ADDRS=10.0.0.5:6379 herald serve --role dispatcher",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains([]string{RoleAPI, RoleDispatcher, RoleAll}, role) {
				return &UsageError{Err: fmt.Errorf("--role must be api, dispatcher or all, not %q", role)}
			}
			return c.serve(cmd, role)
		},
	})
	cmd.Flags().StringVar(&role, "role", RoleAll, "what this process runs: api, dispatcher or all")
	cmd.Flags().String("listen", "", "host:port the API listens on (api.listen)")
	config.BindFlag(cmd.Flags(), "listen", "api.listen")
	return cmd
}

// Waits between attempts to reach Redis at start-up: doubling from the
// first to the last.
const (
	redisRetryFirst = 100 * time.Millisecond
	redisRetryMax   = 5 * time.Second
)

func (c *app) serve(cmd *cobra.Command, role string) error {
	// The command's context ends at the first signal, and a second one ends
	// the process (see main): say so, since the shutdown can take a while.
	defer context.AfterFunc(cmd.Context(), func() {
		c.base.Logger.Warn("herald: shutting down once the work in flight ends; press Ctrl-C again to exit at once")
	})()
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	// Listen before anything starts, so a taken port fails at once.
	l, err := net.Listen("tcp", c.base.Config.API.Listen)
	if err != nil {
		return fmt.Errorf("api.listen: %w", err)
	}
	var h handlerSwap
	h.set(api.NewProbes(&api.ProbeConfig{Unavailable: "starting: waiting for Redis", Logger: c.base.Logger}))
	served := make(chan error, 1)
	go func() { served <- api.Serve(ctx, l, &h, c.base.Logger) }()
	var once sync.Once
	var serveErr error
	// wait waits until the HTTP server has finished the requests in flight.
	wait := func() error {
		once.Do(func() { serveErr = <-served })
		return serveErr
	}
	err = c.serveOn(cmd, role, l.Addr(), &h, wait)
	cancel()
	return cmp.Or(err, wait())
}

// serveOn loads the policies, connects to Redis, retrying until it
// answers, then starts what role runs and hands the listener over to it,
// until the command's context ends and wait says the HTTP server is done.
// While it waits for Redis, h answers /healthz, and /readyz with 503.
func (c *app) serveOn(cmd *cobra.Command, role string, addr net.Addr, h *handlerSwap, wait func() error) error {
	ctx := cmd.Context()
	// The watcher catches SIGHUP, whose default action ends the process, so
	// it starts before the wait for Redis, which can be long: a reload then
	// rereads the file as it does later. It runs until this function
	// returns, past the first signal, so that a SIGHUP during the shutdown
	// does not end the process and cut the attempts in flight short.
	// A dispatcher rereads its templates with the policies, once it has
	// loaded them.
	var reloaded atomic.Pointer[func(*policy.Set)]
	policies, stopPolicies, err := c.base.StartPolicies(context.WithoutCancel(ctx), func(set *policy.Set) {
		if f := reloaded.Load(); f != nil {
			(*f)(set)
		}
	})
	if err != nil {
		return err
	}
	defer stopPolicies()
	watch := &redisconf.Watch{Log: c.base.Logger}
	w, err := c.connect(cmd, addr, watch)
	if err != nil || w == nil {
		return err
	}
	defer w.Close()
	if e := w.redis.embedded; e != nil {
		// On stdout too, beside the log's warning, which log.level may
		// silence.
		fmt.Fprintf(c.base.Out, "herald: EMBEDDED REDIS at %s: nothing survives exit; set redis.addrs to keep notifications "+
			"(other commands reach this one with HERALD_REDIS_ADDRS=%[1]s)\n", e.Addr())
	}
	stopTracing, err := w.startTracing(ctx)
	if err != nil {
		return err
	}
	defer stopTracing()
	// A Redis replaced by one too old since the start is not ready: every
	// enqueue and attempt would fail.
	ready := func(ctx context.Context) error { return cmp.Or(watch.Check(), w.store.Ping(ctx)) }
	details := func() any {
		if s, ok := watch.Settings(); ok {
			return map[string]any{"redis": s}
		}
		return nil
	}
	mcfg := &metrics.Config{
		Store:     w.store,
		MaxTopics: w.cfg.Metrics.MaxTopics,
		KeepTopicFunc: func(topic string) bool {
			_, ok := policies.Current().Topics[topic]
			return ok
		},
		RedisSafetyFunc: func() (evictionOK, persistenceOK *bool) {
			s, _ := watch.Settings()
			return s.EvictionOK, s.PersistenceOK
		},
	}
	probes := &api.ProbeConfig{ReadyFunc: ready, DetailsFunc: details, Logger: c.base.Logger}
	if w.memory != nil {
		mcfg.RedisMemoryFunc, probes.MemoryFunc = w.memory.usage, w.memory.read
	}
	m := metrics.New(mcfg)
	probes.Metrics = m.Handler()
	if role != RoleAPI {
		d, err := w.newDispatcher(policies.Current, m)
		if err != nil {
			return err
		}
		if err := d.Start(ctx); err != nil {
			return err
		}
		defer d.Stop()
		w.warnUnloadedTemplates(ctx, policies.Current())
		reload := func(set *policy.Set) { w.reloadTemplates(ctx, set) }
		reloaded.Store(&reload)
		defer reloaded.Store(nil)
	}
	if role == RoleDispatcher {
		h.set(api.NewProbes(probes))
		fmt.Fprintf(c.base.Out, "herald: dispatcher running, metrics on http://%s/metrics; stop with Ctrl-C\n", addr)
		return wait()
	}
	srv, err := w.newAPI(ctx, addr, policies.Current, m, ready, details)
	if err != nil {
		return err
	}
	// Waiting reservations end as the shutdown begins, not after it. The
	// deferred Close covers a return that comes first: a cancel reaches a
	// context's children in no set order, so the HTTP server can be done
	// and this function return before the AfterFunc is reached, and its
	// stop would then keep it from ever running.
	stopClose := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer func() {
		stopClose()
		_ = srv.Close()
	}()
	h.set(srv)
	fmt.Fprintf(c.base.Out, "herald: API on http://%s (role %s), dashboard on http://%[1]s/ui/; stop with Ctrl-C\n", addr, role)
	return wait()
}

// connect wires the command to Redis, retrying with backoff while Redis is
// down or loading, until ctx ends (then with a nil wiring). What no retry
// can mend is returned at once: a usage error, such as a shards setting the
// namespace's recorded count contradicts or a wrong redis.password, a Redis
// older than redisconf.VersionMin, or a Redis user the ACL forbids a
// command or key Herald needs.
//
// Each retry's line says how long the failed attempt took besides the wait
// before the next: go-redis dials and resends a few times within one
// attempt, so against an address where nothing listens an attempt takes
// seconds, and the lines come that much further apart than the waits.
func (c *app) connect(cmd *cobra.Command, addr net.Addr, watch *redisconf.Watch) (*wiring, error) {
	wait := redisRetryFirst
	for attempt := 1; ; attempt++ {
		began := time.Now()
		w, err := c.base.wireWatched(cmd, true, watch.OnConnect)
		var tooOld *redisconf.VersionError
		if err == nil || isUsage(err) || errors.As(err, &tooOld) || redis.IsPermissionError(err) {
			return w, err
		}
		if cmd.Context().Err() != nil {
			// The shutdown ended the attempt: there is no retry to log.
			return nil, nil
		}
		if attempt == 1 {
			fmt.Fprintf(c.base.Out, "herald: http://%s serves /healthz; /readyz answers 503 until Redis is ready\n", addr)
		}
		c.base.Logger.WarnContext(cmd.Context(), "herald: Redis is not ready, retrying", "error", err,
			"attempt", attempt, "attempt_took", time.Since(began).Round(10*time.Millisecond), "retry_in", wait)
		select {
		case <-cmd.Context().Done():
			return nil, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, redisRetryMax)
	}
}

// handlerSwap serves with the handler last set: serve's probes while it
// waits for Redis, then its API.
type handlerSwap struct{ h atomic.Pointer[http.Handler] }

func (s *handlerSwap) set(h http.Handler) { s.h.Store(&h) }

// ServeHTTP implements http.Handler.
func (s *handlerSwap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}
