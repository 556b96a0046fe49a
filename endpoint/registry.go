package endpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heraldhq/herald/notify"
)

// CacheTTLDefault is how long a Registry keeps an endpoint read from its
// Source before reading it again.
const CacheTTLDefault = time.Second

// Lookup finds an endpoint by name; ErrNotFound when there is none. The
// webhook sender asks on every attempt and the client on every enqueue
// that names an endpoint. The endpoint returned may be shared: callers
// must not modify it.
type Lookup interface {
	Endpoint(ctx context.Context, name string) (*Endpoint, error)
}

// LookupFunc adapts a function to Lookup.
type LookupFunc func(ctx context.Context, name string) (*Endpoint, error)

// Endpoint calls f.
func (f LookupFunc) Endpoint(ctx context.Context, name string) (*Endpoint, error) {
	return f(ctx, name)
}

var (
	_ Lookup = LookupFunc(nil)
	_ Lookup = (*Registry)(nil)
)

// Check refuses a notification naming an endpoint l does not hold: a
// *notify.FieldError naming "endpoint", as an enqueue is refused, rather
// than a notification that fails at its first attempt. A failed lookup is
// returned as it is.
func Check(ctx context.Context, l Lookup, name string) error {
	_, err := l.Endpoint(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return notify.Errorf("endpoint", "unknown endpoint %q", name)
	case err != nil:
		return fmt.Errorf("look up endpoint %q: %w", name, err)
	}
	return nil
}

// Map is a Lookup over a fixed set of endpoints, such as a policies file's.
type Map map[string]Endpoint

// Endpoint returns a copy of the named endpoint.
func (m Map) Endpoint(_ context.Context, name string) (*Endpoint, error) {
	e, ok := m[name]
	if !ok {
		return nil, ErrNotFound
	}
	return &e, nil
}

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// FileFunc returns the endpoints of the policies file in force; it is
	// called on every lookup, so a reload applies at once. nil: none.
	FileFunc func() map[string]Endpoint
	// Source holds the endpoints registered over the API. nil: none.
	Source Lookup
	// CacheTTL is how long an endpoint read from Source is used before it
	// is read again, which bounds how late a change made over the API (on
	// any node) reaches an attempt. Default CacheTTLDefault (1s).
	CacheTTL time.Duration
}

// Registry looks endpoints up in the policies file first, which wins on a
// name clash, then in its Source, keeping what it read from the Source for
// CacheTTL. A name the Source does not have is asked again every time, so an
// endpoint registered a moment ago on another node is found at once. It is
// safe for concurrent use.
type Registry struct {
	cfg     RegistryConfig
	nowFunc func() time.Time

	mu sync.Mutex
	// cached holds endpoints read from the Source, with when they were read.
	cached map[string]cachedEndpoint
}

type cachedEndpoint struct {
	e    *Endpoint
	read time.Time
}

// NewRegistry returns a Registry for cfg.
func NewRegistry(cfg *RegistryConfig) *Registry {
	c := *cfg
	if c.CacheTTL <= 0 {
		c.CacheTTL = CacheTTLDefault
	}
	return &Registry{cfg: c, nowFunc: time.Now, cached: map[string]cachedEndpoint{}}
}

// Endpoint returns the named endpoint, from the file or the Source.
func (r *Registry) Endpoint(ctx context.Context, name string) (*Endpoint, error) {
	if r.cfg.FileFunc != nil {
		if e, ok := r.cfg.FileFunc()[name]; ok {
			return &e, nil
		}
	}
	if r.cfg.Source == nil {
		return nil, ErrNotFound
	}
	now := r.nowFunc()
	r.mu.Lock()
	c, ok := r.cached[name]
	r.mu.Unlock()
	if ok && now.Sub(c.read) < r.cfg.CacheTTL {
		return c.e, nil
	}
	e, err := r.cfg.Source.Endpoint(ctx, name)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.cached[name] = cachedEndpoint{e: e, read: now}
	case ok:
		delete(r.cached, name) // gone, or unreadable: never serve it stale
	}
	return e, err
}

// InFile reports whether the policies file defines name, which then wins
// over an endpoint of that name registered over the API.
func (r *Registry) InFile(name string) bool {
	if r.cfg.FileFunc == nil {
		return false
	}
	_, ok := r.cfg.FileFunc()[name]
	return ok
}
