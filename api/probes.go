package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"
)

// ProbeConfig configures NewProbes.
type ProbeConfig struct {
	// Metrics serves GET /metrics. Nil: 404.
	Metrics http.Handler
	// ReadyFunc reports readiness for GET /readyz. Nil: not ready (503),
	// as while a process waits for Redis at start-up.
	ReadyFunc func(ctx context.Context) error
	// DetailsFunc, when set, adds what it returns to /readyz answers as
	// "details", such as the Redis settings that put data at risk. It
	// returns a JSON object (a map or a struct) or nil.
	DetailsFunc func() any
	// MemoryFunc, when set, reads what Redis uses against its maxmemory
	// once ReadyFunc says ready, for "memory" in the details of /readyz,
	// with a warning past MemoryWarningRatio. A full Redis leaves the
	// process ready: it refuses enqueues, but deliveries, pull workers and
	// the purge of dead letters that frees memory go on, and every process
	// on that Redis would leave the load balancer at once. Bounded by
	// Timeout, like ReadyFunc.
	MemoryFunc func(ctx context.Context) (RedisMemory, error)
	// Unavailable, when set, answers every other path 503 with this
	// message: a process whose API is not up yet. Empty: 404.
	Unavailable string
	// Timeout bounds ReadyFunc. Default TimeoutDefault (10s).
	Timeout time.Duration
	// Logger receives why /readyz answered 503. Default: a warn-level text
	// handler on stderr.
	Logger *slog.Logger
}

// probes answer /healthz, /readyz and /metrics, for a Server and for
// NewProbes alike.
type probes struct {
	cfg ProbeConfig
}

func newProbes(cfg *ProbeConfig) *probes {
	p := &probes{cfg: *cfg}
	p.cfg.Timeout = cmp.Or(p.cfg.Timeout, TimeoutDefault)
	if p.cfg.Logger == nil {
		p.cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return p
}

// NewProbes returns the handler of a process that serves no API, or none
// yet: GET /healthz, GET /readyz and GET /metrics, as a Server answers
// them, and 404 (or 503, see Unavailable) for the rest. A dispatcher-only
// herald serve answers with it, and every serve does while it waits for
// Redis.
func NewProbes(cfg *ProbeConfig) http.Handler {
	p := newProbes(cfg)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", p.healthz)
	mux.HandleFunc("GET /readyz", p.readyz)
	mux.HandleFunc("GET /metrics", p.metrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if p.cfg.Unavailable != "" {
			writeError(w, http.StatusServiceUnavailable, CodeUnavailable, p.cfg.Unavailable)
			return
		}
		writeError(w, http.StatusNotFound, CodeNotFound, "no route for "+r.Method+" "+r.URL.Path)
	})
	return mux
}

type statusResponse struct {
	Status  string `json:"status"`
	Details any    `json:"details,omitempty"`
}

// healthz handles GET /healthz: the process is up.
func (p *probes) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, statusResponse{Status: "ok"})
}

// readyz handles GET /readyz: 200 when Redis answers within Timeout, 503
// otherwise, with the details either way, and Redis's memory when ready.
func (p *probes) readyz(w http.ResponseWriter, r *http.Request) {
	var details any
	if p.cfg.DetailsFunc != nil {
		details = p.cfg.DetailsFunc()
	}
	notReady := func(message string) {
		writeJSON(w, http.StatusServiceUnavailable, struct {
			Error   Error `json:"error"`
			Details any   `json:"details,omitempty"`
		}{Error{Code: CodeUnavailable, Message: message}, details})
	}
	if p.cfg.ReadyFunc == nil {
		notReady("starting: waiting for Redis")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.Timeout)
	defer cancel()
	if err := p.cfg.ReadyFunc(ctx); err != nil {
		p.cfg.Logger.WarnContext(ctx, "api: not ready", "error", err)
		notReady("Redis is unreachable, or unfit for Herald (see details); the log says why")
		return
	}
	if p.cfg.MemoryFunc != nil {
		details = withMemory(details, readMemory(ctx, p.cfg.MemoryFunc))
	}
	writeJSON(w, http.StatusOK, statusResponse{Status: "ready", Details: details})
}

// metrics handles GET /metrics with Metrics.
func (p *probes) metrics(w http.ResponseWriter, r *http.Request) {
	if p.cfg.Metrics == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "metrics are not enabled")
		return
	}
	p.cfg.Metrics.ServeHTTP(w, r)
}

// Serve serves h on l until ctx ends, then stops taking requests and waits
// up to ShutdownTimeoutDefault for those in flight: how herald serve runs
// its probes, then its API. It returns nil after a clean shutdown.
func Serve(ctx context.Context, l net.Listener, h http.Handler, log *slog.Logger) error {
	return serve(ctx, l, h, MaxWaitDefault+2*TimeoutDefault, ShutdownTimeoutDefault, log, nil)
}

// serve is Serve with the write and shutdown timeouts given, calling
// closing (when set) as the shutdown begins.
func serve(ctx context.Context, l net.Listener, h http.Handler, writeTimeout, shutdownTimeout time.Duration, log *slog.Logger, closing func()) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		if closing != nil {
			closing()
		}
		return err
	case <-ctx.Done():
	}
	log.InfoContext(ctx, "api: shutting down")
	if closing != nil {
		closing()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = cmp.Or(err, serr)
	}
	return err
}
