package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// Defaults of Config.
const (
	// MaxBodyDefault bounds a request body, and so a payload, in bytes.
	MaxBodyDefault = 256 << 10
	// MaxBatchBodyDefault bounds a batch body in bytes: room for 1000
	// notifications of about 16 KiB each. Each item's payload is still held
	// to MaxBody.
	MaxBatchBodyDefault = 16 << 20
	// TimeoutDefault bounds the store calls of one request.
	TimeoutDefault = 10 * time.Second
	// MaxWaitDefault caps a reservation's long poll.
	MaxWaitDefault = 30 * time.Second
	// ShutdownTimeoutDefault is how long Serve waits for requests in flight
	// when its context ends.
	ShutdownTimeoutDefault = 10 * time.Second
	// ListLimitDefault is the page size of the dead list when none is asked.
	ListLimitDefault = 100
	// MaxLargeBodiesDefault bounds how many bodies larger than MaxBody are
	// read and decoded at once.
	MaxLargeBodiesDefault = 2
)

// Config configures a Server.
type Config struct {
	// Store is the notifications' state. Required.
	Store *store.Store
	// PoliciesFunc returns the current policies and topics (it may change on
	// reload). Default: the built-in default policy and no topics.
	PoliciesFunc func() *policy.Set
	// Tokens are the bearer tokens that may call /v1. Empty: no
	// authentication, and /v1 and /ui/ answer only the host names of Hosts
	// (403 for others). /healthz, /readyz and /metrics are always open.
	Tokens []string
	// Hosts are the host names (the Host header's, port aside) that /v1
	// and /ui/ answer when Tokens is empty, besides IP addresses and
	// localhost, which are always answered. Any other name is refused with
	// 403: a web page an operator opens can point its own name at this
	// address (DNS rebinding), and its scripts would then be same-origin
	// with the API. AnyHost ("*") answers every name, for a proxy in front
	// that checks it. With Tokens, Hosts does not matter. See ValidateHost.
	Hosts []string
	// MaxBody bounds a request body in bytes (413 above it), and so each
	// notification's payload, in a batch too. Default MaxBodyDefault
	// (256 KiB).
	MaxBody int64
	// MaxBatchBody bounds the body of a batch enqueue in bytes. Default
	// MaxBatchBodyDefault (16 MiB), and never less than MaxBody.
	MaxBatchBody int64
	// MaxLargeBodies bounds how many request bodies larger than MaxBody
	// (batches) are read and decoded at once: each costs a few times its
	// size in memory. Others wait up to Timeout for their turn, then get
	// 503. Default MaxLargeBodiesDefault (2).
	MaxLargeBodies int
	// Timeout bounds the store calls of one request, so that a Redis that
	// stops answering costs a 503 rather than a hung client. A long poll
	// gets its wait on top. Default TimeoutDefault (10s).
	Timeout time.Duration
	// MaxWait caps the wait of a reservation; a longer one is cut to it.
	// Default MaxWaitDefault (30s).
	MaxWait time.Duration
	// ShutdownTimeout is how long Serve waits for requests in flight when
	// its context ends. Default ShutdownTimeoutDefault (10s).
	ShutdownTimeout time.Duration
	// Metrics serves GET /metrics (metrics.Metrics.Handler). Nil: 404.
	Metrics http.Handler
	// Observer is told about enqueues, pull attempts and store errors
	// (metrics.Metrics). Optional.
	Observer client.Observer
	// Tracer traces enqueues (tracing.Tracer). Nil: no tracing.
	Tracer client.Tracer
	// Middleware, when set, wraps every request's handling: the tracing
	// package's reads an incoming traceparent into the request's context,
	// so that an enqueue's span joins the caller's trace.
	Middleware func(http.Handler) http.Handler
	// UI is the operator dashboard (ui.Handler), served under /ui/ with its
	// own sign-in instead of the bearer token check. Nil: 404.
	UI http.Handler
	// StrictTopics accepts only the topics the policies name (400 naming
	// topic otherwise); see client.Config.StrictTopics.
	StrictTopics bool
	// TemplateFunc, when set, refuses a notification naming a template it
	// does not know (400 naming template); see client.Config.TemplateFunc.
	TemplateFunc func(name string) bool
	// PollInterval is the longest a waiting reservation goes without
	// asking Redis; news of an enqueue or a resume ends the wait sooner.
	// Default client.PollIntervalDefault (1s).
	PollInterval time.Duration
	// ReadyFunc reports whether the server can serve, for GET /readyz.
	// Default: the store's Ping.
	ReadyFunc func(ctx context.Context) error
	// ReadyDetailsFunc, when set, adds what it returns to /readyz answers
	// as "details" (herald serve: the Redis settings that put data at
	// risk).
	ReadyDetailsFunc func() any
	// RedisMemoryFunc, when set, reads what Redis uses against its
	// maxmemory for /readyz, which shows it under details.memory and warns
	// past MemoryWarningRatio; see ProbeConfig.MemoryFunc. herald serve
	// caches its reads briefly, so frequent probes cost Redis little.
	RedisMemoryFunc func(ctx context.Context) (RedisMemory, error)
	// Logger receives one line per request (method, path, status, time; no
	// headers, so no tokens) and the detail of 5xx answers. Default: a
	// warn-level text handler on stderr.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.MaxBody = cmp.Or(out.MaxBody, MaxBodyDefault)
	out.MaxBatchBody = max(cmp.Or(out.MaxBatchBody, MaxBatchBodyDefault), out.MaxBody)
	out.Timeout = cmp.Or(out.Timeout, TimeoutDefault)
	out.MaxLargeBodies = cmp.Or(out.MaxLargeBodies, MaxLargeBodiesDefault)
	out.MaxWait = cmp.Or(out.MaxWait, MaxWaitDefault)
	out.ShutdownTimeout = cmp.Or(out.ShutdownTimeout, ShutdownTimeoutDefault)
	if out.ReadyFunc == nil && out.Store != nil {
		out.ReadyFunc = out.Store.Ping
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("api: Store is required")
	case c.MaxBody < 1 || c.MaxLargeBodies < 1 || c.Timeout < 0 || c.MaxWait < 0 || c.ShutdownTimeout < 0:
		return errors.New("api: MaxBody must be positive, and the durations not negative")
	}
	for _, t := range c.Tokens {
		if t == "" {
			return errors.New("api: a token must not be empty")
		}
	}
	for i, h := range c.Hosts {
		if err := ValidateHost(h); err != nil {
			return fmt.Errorf("api: Hosts[%d] %w", i, err)
		}
	}
	return nil
}

// Server is Herald's HTTP API, an http.Handler. Mount it at the root of a
// server, or run it with Serve; Close it when done with it.
type Server struct {
	cfg     *Config
	client  *client.Client
	store   *store.Store
	log     *slog.Logger
	handler http.Handler
	probes  *probes
	// large holds a token for each body larger than MaxBody being read
	// or decoded; its capacity is MaxLargeBodies.
	large chan struct{}
	// tokens are SHA-256 sums of the configured tokens: comparing sums of
	// equal length keeps the comparison's time independent of the tokens'
	// lengths too.
	tokens [][sha256.Size]byte
	// hosts are the names answered without tokens.
	hosts *hosts
	// refusals logs the writes a full Redis refused.
	refusals *refusalLog

	// closing ends when Close is called; waiting reservations watch it so
	// that a shutdown does not wait out their long polls.
	closing   context.Context
	close     context.CancelFunc
	closeOnce sync.Once
}

// New returns the API server for cfg.
func New(cfg *Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := client.New(&client.Config{
		Store:        cfg.Store,
		PoliciesFunc: cfg.PoliciesFunc,
		MaxPayload:   int(cfg.MaxBody),
		Observer:     cfg.Observer,
		Tracer:       cfg.Tracer,
		StrictTopics: cfg.StrictTopics,
		TemplateFunc: cfg.TemplateFunc,
		PollInterval: cfg.PollInterval,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, client: c, store: cfg.Store, log: cfg.Logger, hosts: newHosts(cfg.Hosts), probes: newProbes(&ProbeConfig{
		Metrics:     cfg.Metrics,
		ReadyFunc:   cfg.ReadyFunc,
		DetailsFunc: cfg.ReadyDetailsFunc,
		MemoryFunc:  cfg.RedisMemoryFunc,
		Timeout:     cfg.Timeout,
		Logger:      cfg.Logger,
	})}
	s.refusals = &refusalLog{log: cfg.Logger, every: refusalLogEvery}
	s.closing, s.close = context.WithCancel(context.Background())
	s.large = make(chan struct{}, cfg.MaxLargeBodies)
	for _, t := range cfg.Tokens {
		s.tokens = append(s.tokens, sha256.Sum256([]byte(t)))
	}
	// A page on another site that an operator's browser opens could
	// otherwise make the API act, since a no-cors POST needs no preflight:
	// where no tokens are configured, enqueue a webhook Herald signs and
	// sends where the page likes, or pause a topic. Programs send neither
	// Origin nor Sec-Fetch-Site, and pass.
	crossOrigin := http.NewCrossOriginProtection()
	crossOrigin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusForbidden, CodeForbidden, "a browser's request from another origin is refused")
	}))
	mux := http.NewServeMux()
	for _, rt := range routes {
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rt.handle(s, w, r) })
		if !rt.open {
			h = s.guardHost(s.authenticate(h), func(w http.ResponseWriter, msg string) {
				writeError(w, http.StatusForbidden, CodeHostNotAllowed, msg)
			})
		}
		mux.Handle(rt.pattern(), crossOrigin.Handler(h))
	}
	if cfg.UI != nil {
		// A browser shows the dashboard's refusal, so it is text.
		deny := func(w http.ResponseWriter, msg string) { http.Error(w, msg, http.StatusForbidden) }
		mux.Handle("/ui/", s.guardHost(cfg.UI, deny))
		mux.Handle("GET /ui", s.guardHost(http.RedirectHandler("/ui/", http.StatusMovedPermanently), deny))
	}
	s.handler = s.logRequests(s.unmatched(mux))
	if cfg.Middleware != nil {
		s.handler = cfg.Middleware(s.handler)
	}
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Serve serves the API on l until ctx ends, then stops taking requests, ends
// waiting reservations with what they have, waits up to ShutdownTimeout for
// the requests in flight, and closes the server. It returns nil after a
// clean shutdown.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	// Room for the longest long poll and the store calls around it.
	writeTimeout := s.cfg.MaxWait + 2*s.cfg.Timeout
	return serve(ctx, l, s, writeTimeout, s.cfg.ShutdownTimeout, s.log, func() { _ = s.Close() })
}

// Close ends waiting reservations (they answer with what they have) and the
// client's wake-up subscription, and logs the summary of refusals of a full
// Redis not yet logged. Requests after Close are still served, but
// reservations no longer wait, and each refusal is logged. A second Close
// does nothing.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.close()
		_ = s.client.Close()
		s.refusals.close()
	})
	return nil
}

// storeContext bounds the store calls of a request by Timeout.
func (s *Server) storeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.Timeout)
}

// authenticate lets a request through when no tokens are configured or when
// it carries one of them as a bearer token, and answers 401 otherwise. Every
// configured token is compared, in constant time, whatever matches.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.tokens) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		auth := r.Header.Get("Authorization")
		const scheme = "bearer "
		match := 0
		if len(auth) > len(scheme) && strings.EqualFold(auth[:len(scheme)], scheme) {
			sum := sha256.Sum256([]byte(auth[len(scheme):]))
			for _, t := range s.tokens {
				match |= subtle.ConstantTimeCompare(sum[:], t[:])
			}
		}
		if match != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			writeError(w, http.StatusUnauthorized, CodeUnauthenticated, "a valid bearer token is required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unmatched answers requests that match no route in the API's error shape:
// 404 for an unknown path, 405 (with Allow) for a known path and another
// method. The mux would answer them in plain text.
func (s *Server) unmatched(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		probe := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
			return
		}
		writeError(w, http.StatusNotFound, CodeNotFound, "no route for "+r.Method+" "+r.URL.Path)
	})
}

// statusRecorder keeps the status and headers the mux's fallback handlers
// write and discards their plain-text bodies.
type statusRecorder struct {
	header http.Header
	status int
}

func (p *statusRecorder) Header() http.Header         { return p.header }
func (p *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusRecorder) WriteHeader(status int)      { p.status = status }

// logRequests logs one line per request and turns a handler's panic into a
// 500, so that one bad request never takes down the connection's others.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.ErrorContext(r.Context(), "api: handler panicked", "method", r.Method, "path", r.URL.Path,
					"panic", p, "stack", string(debug.Stack()))
				if sw.status == 0 {
					writeError(sw, http.StatusInternalServerError, CodeInternal, "internal error")
				}
			}
			// An answer to a client that has hung up (a pull consumer
			// stopping mid-poll) reached no one and is no fault of ours.
			level := slog.LevelInfo
			if sw.status >= http.StatusInternalServerError && r.Context().Err() == nil && !sw.quiet {
				level = slog.LevelWarn
			}
			s.log.Log(r.Context(), level, "api: request", "method", r.Method, "path", r.URL.Path, "route", r.Pattern,
				"status", sw.status, "bytes", sw.bytes, "duration_ms", time.Since(start).Milliseconds(), "remote", r.RemoteAddr)
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter records a response's status and size for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	// quiet says that a 5xx answer is logged elsewhere, in a summary, so
	// its request line is at info.
	quiet bool
}

// quietRequest logs the request w answers at info whatever its status.
func quietRequest(w http.ResponseWriter) {
	for {
		switch v := w.(type) {
		case *statusWriter:
			v.quiet = true
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return
		}
	}
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
