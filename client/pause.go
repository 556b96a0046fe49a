package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// Pause pauses a topic (kind store.PauseTopic) or an endpoint
// (store.PauseEndpoint): once Pause returns, no attempt of its
// notifications starts, on any dispatcher or pull consumer, until it is
// resumed, and none is lost or burnt; an attempt already under way runs to
// its end. An endpoint must exist (endpoint.ErrNotFound otherwise); a topic
// need not be configured.
//
// Pause returns about 0.3 s after it is recorded: every process reads what
// is paused at least every store.PausedViewAge, and an operator who pauses
// a failing receiver expects nothing more to reach it once the pause has
// answered. A ctx that ends meanwhile ends the wait, not the pause: the
// error says so.
func (c *Client) Pause(ctx context.Context, kind, name string) error {
	if err := c.checkPausable(ctx, kind, name); err != nil {
		return err
	}
	if err := c.store.Pause(ctx, kind, name); err != nil {
		c.storeError("pause", err)
		return err
	}
	c.pausedCache.forget()
	return settle(ctx, store.PausedViewAge+pauseReadTime, "paused, but a process may not have read it yet")
}

// settle waits d, the time a change takes to reach every process. A ctx
// that ends first ends the wait, not the change: the error begins with
// done, which says so.
func settle(ctx context.Context, d time.Duration, done string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", done, ctx.Err())
	}
}

// pauseReadTime bounds how long a process's read of what is paused, and the
// check of one notification against it, take after the read was due.
const pauseReadTime = 50 * time.Millisecond

// Resume ends a pause: the notifications that came due meanwhile start at
// once; resumed counts them. A topic's waiting Reserve calls, on every
// client, look again at once. Resuming what is not paused changes nothing.
func (c *Client) Resume(ctx context.Context, kind, name string) (resumed int, err error) {
	if err := c.checkResumable(ctx, kind, kind, name); err != nil {
		return 0, err
	}
	if resumed, err = c.store.Resume(ctx, kind, name); err != nil {
		c.storeError("resume", err)
		return resumed, err
	}
	c.pausedCache.forget()
	return resumed, nil
}

// Pause is what holds back notifications: a topic or an endpoint paused,
// or an endpoint its disable_after disabled.
type Pause struct {
	// Kind is store.PauseTopic, store.PauseEndpoint or store.PauseDisabled.
	Kind  string    `json:"kind"`
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
}

// Pauses returns what is paused now, in order of kind then name. A
// disabled endpoint is listed as a pause of kind store.PauseDisabled,
// besides any pause of its own, as each needs its own resume or enable.
func (c *Client) Pauses(ctx context.Context) ([]Pause, error) {
	paused, err := c.store.Paused(ctx)
	if err != nil {
		c.storeError("paused", err)
		return nil, err
	}
	out := make([]Pause, 0, len(paused))
	for f, since := range paused {
		kind, name, _ := strings.Cut(f, "|")
		out = append(out, Pause{Kind: kind, Name: name, Since: since.UTC()})
	}
	slices.SortFunc(out, func(a, b Pause) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
	return out, nil
}

func (c *Client) checkPausable(ctx context.Context, kind, name string) error {
	if kind != store.PauseEndpoint {
		return nil // the store checks the topic's name
	}
	_, err := c.cfg.Endpoints.Endpoint(ctx, name)
	return err
}

// checkResumable is checkPausable for ending a pause of kind (paused as
// pausedAs): an endpoint that no longer exists passes while it is still
// paused, so that what is parked behind it can come out.
func (c *Client) checkResumable(ctx context.Context, kind, pausedAs, name string) error {
	err := c.checkPausable(ctx, kind, name)
	if errors.Is(err, endpoint.ErrNotFound) {
		if paused, perr := c.store.IsPaused(ctx, pausedAs, name); perr == nil && paused {
			return nil
		}
	}
	return err
}

// shown readies a stored record for the caller: the receipt of a reserved
// notification is left out, as only the consumer that reserved it holds it,
// as is the reservation a cancel ended while its attempt ran, and one
// parked by a pause shows as paused, with no next attempt time, rather than
// with its parking time (which JSON cannot hold).
func shown(n *notify.Notification) {
	n.Receipt = ""
	if n.State != notify.StateReserved {
		n.Deadline = nil
	}
	if store.Parked(n) {
		n.Paused, n.NextAttemptAt = true, nil
	}
}

// pausedCache is what a client last read of what is paused, for Reserve.
type pausedCache struct {
	mu     sync.Mutex
	read   time.Time
	paused map[string]time.Time
}

// forget drops what was read, so that this client's own pause or resume
// holds for its next reservation. A read under way holds mu, so it is
// dropped too once done.
func (p *pausedCache) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.read = time.Time{}
}

// topicPaused reports whether topic is paused, from a read at most
// store.PausedViewAge old (this client's own pauses and resumes hold at
// once): a paused pull topic hands nothing out, and what came due
// meanwhile is there for the first Reserve after the resume. A failure to
// read keeps the previous answer.
func (c *Client) topicPaused(ctx context.Context, topic string) bool {
	p := &c.pausedCache
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.read) >= store.PausedViewAge {
		if paused, err := c.store.Paused(ctx); err == nil {
			p.paused, p.read = paused, now
		} else {
			c.storeError("paused", err)
		}
	}
	_, ok := p.paused[store.PauseKey(store.PauseTopic, topic)]
	return ok
}
