package ui

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// Defaults of Config.
const (
	// TimeoutDefault bounds the store calls of one page.
	TimeoutDefault = 10 * time.Second
	// SessionTTLDefault is how long a sign-in lasts.
	SessionTTLDefault = 12 * time.Hour
	// RefreshDefault is how often the script refreshes a live page.
	RefreshDefault = 5 * time.Second
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// Config configures a Handler.
type Config struct {
	// Store is the notifications' state. Required.
	Store *store.Store
	// PoliciesFunc returns the current policies and topics. Default: the
	// built-in default policy and no topics.
	PoliciesFunc func() *policy.Set
	// Tokens are the API's bearer tokens; signing in takes one of them.
	// Empty: the dashboard is open to anyone who reaches it, and says so.
	Tokens []string
	// Timeout bounds the store calls of one page. Default TimeoutDefault.
	Timeout time.Duration
	// SessionTTL is how long a sign-in lasts. Default SessionTTLDefault.
	SessionTTL time.Duration
	// Refresh is how often the overview and notification pages refresh
	// themselves when scripts run; -1 turns refreshing off. Default
	// RefreshDefault.
	Refresh time.Duration
	// Logger receives failures to reach the store. Default: a warn-level
	// text handler on stderr.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.Timeout = cmp.Or(out.Timeout, TimeoutDefault)
	out.SessionTTL = cmp.Or(out.SessionTTL, SessionTTLDefault)
	out.Refresh = cmp.Or(out.Refresh, RefreshDefault)
	if out.PoliciesFunc == nil {
		set, _ := policy.NewSet(nil, nil)
		out.PoliciesFunc = func() *policy.Set { return set }
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return &out
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("ui: Store is required")
	}
	if c.Timeout < 0 || c.SessionTTL < 0 {
		return errors.New("ui: Timeout and SessionTTL must not be negative")
	}
	for _, t := range c.Tokens {
		if t == "" {
			return errors.New("ui: a token must not be empty")
		}
	}
	return nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Handler serves the dashboard under Prefix; mount it there. Close it when
// done with it.
type Handler struct {
	cfg      *Config
	client   *client.Client
	store    *store.Store
	log      *slog.Logger
	sessions *sessions
	pages    map[string]*template.Template
	mux      *http.ServeMux
}

// New returns the dashboard for cfg.
func New(cfg *Config) (*Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := client.New(&client.Config{Store: cfg.Store, PoliciesFunc: cfg.PoliciesFunc})
	if err != nil {
		return nil, err
	}
	sess, err := newSessions(cfg.Tokens, cfg.SessionTTL)
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, client: c, store: cfg.Store, log: cfg.Logger, sessions: sess}
	if h.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	mux := http.NewServeMux()
	mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", cacheStatic(http.FileServerFS(static))))
	mux.HandleFunc("GET "+Prefix+"login", h.loginPage)
	mux.HandleFunc("POST "+Prefix+"login", h.login)
	mux.Handle("POST "+Prefix+"logout", h.guard(h.logout))
	mux.Handle("GET "+Prefix+"{$}", h.guard(h.overview))
	mux.Handle("GET "+Prefix+"find", h.guard(h.find))
	mux.Handle("GET "+Prefix+"notifications/{id}", h.guard(h.notification))
	mux.Handle("GET "+Prefix+"dead", h.guard(h.dead))
	mux.Handle("GET "+Prefix+"dead/confirm", h.guard(h.confirm))
	mux.Handle("POST "+Prefix+"dead/replay", h.guard(h.replay))
	mux.Handle("POST "+Prefix+"dead/purge", h.guard(h.purge))
	mux.Handle("GET "+Prefix+"policies", h.guard(h.policies))
	h.routePauses(mux)
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		h.render(w, r, http.StatusNotFound, "error", nil, &errorData{Title: "Not found", Message: "There is no page at " + r.URL.Path + "."})
	})
	h.mux = mux
	return h, nil
}

// ServeHTTP implements http.Handler: every answer carries the security
// headers, whatever the page.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// No inline script or style anywhere: app.js and app.css are the only
	// code and style a page runs, and charts are SVG presentation
	// attributes.
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// Close ends the client's background work. A second Close does nothing.
func (h *Handler) Close() error { return h.client.Close() }

// cacheStatic lets browsers keep the embedded assets for an hour; pages
// name each with its content's version (assetURL), so a release's own are
// loaded at once.
func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
}

// storeContext bounds a page's store calls by Timeout.
func (h *Handler) storeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.cfg.Timeout)
}

// pageData is what every page's layout reads.
type pageData struct {
	Title string
	// Nav names the navigation entry to highlight.
	Nav string
	// Open is true when no tokens are configured.
	Open bool
	// SignedIn shows the sign-out button.
	SignedIn bool
	// CSRF is the session's form token.
	CSRF string
	// Flash is what the last pause, resume or enable did.
	Flash string
	// Refresh is the live refresh interval in seconds; 0 for none.
	Refresh int
	// Now is when the page was rendered.
	Now time.Time
	// Page is the page's own data.
	Page any
}

// errorData is the page shown for errors and refusals.
type errorData struct {
	Title   string
	Message string
}

// render writes page name with data, status and the session s (nil on the
// login page).
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, s *session, page any) {
	t := h.pages[name]
	d := pageData{Nav: name, Open: h.sessions.open, Now: h.store.Now().UTC(), Page: page}
	if s != nil {
		d.SignedIn = !h.sessions.open
		d.CSRF = s.csrf
		d.Flash = takeFlash(w, r)
	}
	if name == "overview" || name == "notification" {
		d.Refresh = max(int(h.cfg.Refresh/time.Second), 0)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", d); err != nil {
		h.log.ErrorContext(r.Context(), "ui: rendering failed", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail renders err as a page: a field error or not-found as what the
// operator asked wrong, anything else as the store being unreachable.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var fe *notify.FieldError
	switch {
	case errors.As(err, &fe):
		h.render(w, r, http.StatusBadRequest, "error", s, &errorData{Title: "Bad request", Message: fe.Error()})
	case errors.Is(err, notify.ErrNotFound):
		h.render(w, r, http.StatusNotFound, "error", s, &errorData{Title: "Not found", Message: "No such notification."})
	case errors.Is(err, endpoint.ErrNotFound):
		h.render(w, r, http.StatusNotFound, "error", s, &errorData{Title: "Not found", Message: "No such endpoint."})
	case errors.Is(err, notify.ErrOutOfMemory):
		h.log.WarnContext(r.Context(), "ui: Redis refused a write", "path", r.URL.Path, "error", err)
		h.render(w, r, http.StatusServiceUnavailable, "error", s, &errorData{Title: "Redis is full",
			Message: "Redis is out of memory (maxmemory reached) and refused the change; try again once memory is freed (" + notify.FreeingMemory + ")."})
	default:
		h.log.WarnContext(r.Context(), "ui: store call failed", "path", r.URL.Path, "error", err)
		h.render(w, r, http.StatusServiceUnavailable, "error", s, &errorData{Title: "Unavailable",
			Message: "The store did not answer; try again in a moment."})
	}
}
