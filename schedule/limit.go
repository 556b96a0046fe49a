package schedule

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// limitStore is what endpoint limits need of the store. A Store that does
// not implement it (a test double) limits nothing.
type limitStore interface {
	Acquire(ctx context.Context, name string, e *endpoint.Endpoint, leaseID string, lease time.Duration) (bool, time.Duration, error)
	Release(ctx context.Context, name, leaseID string) error
}

var _ limitStore = (*store.Store)(nil)

// Waits of a notification whose endpoint is at its limit: it is given back
// unattempted, due again after one of these, spread at random so that the
// waiting ones do not all come back at once.
const (
	// fullWait is the shortest wait at max_in_flight, where a place frees
	// whenever an attempt ends.
	fullWait = 20 * time.Millisecond
	// waitSpread is the most added to a wait.
	waitSpread = 200 * time.Millisecond
)

// limits is a dispatcher's side of endpoint limits: until when it knows an
// endpoint to be at its limit, so that it gives back the endpoint's other
// notifications without asking Redis.
type limits struct {
	mu      sync.Mutex
	blocked map[string]time.Time
}

// acquire lets n's attempt start under its endpoint's limits: it returns a
// function that ends the attempt's lease, or ok false after giving n back,
// unattempted and unburnt, due when the endpoint should have room. A
// notification with no endpoint, or one without limits, costs nothing here
// (the endpoint is read from the registry's cache).
func (d *Dispatcher) acquire(ctx context.Context, n *notify.Notification) (release func(), ok bool) {
	nop := func() {}
	ls, isLimiter := d.store.(limitStore)
	if n.Endpoint == "" || d.cfg.Endpoints == nil || !isLimiter {
		return nop, true
	}
	e, err := d.cfg.Endpoints.Endpoint(ctx, n.Endpoint)
	if err != nil || !store.Limited(e) {
		return nop, true // the sender reports a missing endpoint
	}
	now := d.store.Now()
	d.limits.mu.Lock()
	until, known := d.limits.blocked[n.Endpoint]
	d.limits.mu.Unlock()
	if known && now.Before(until) {
		d.giveBack(n, until)
		return nil, false
	}
	lease := n.ID + "|" + n.Receipt
	granted, wait, err := ls.Acquire(ctx, n.Endpoint, e, lease, time.Duration(n.TTR))
	if err != nil {
		d.cfg.Observer.StoreError("acquire", err)
		wait = fullWait
	}
	if err != nil || !granted {
		until := now.Add(max(wait, fullWait))
		d.limits.mu.Lock()
		if d.limits.blocked == nil {
			d.limits.blocked = map[string]time.Time{}
		}
		d.limits.blocked[n.Endpoint] = until
		d.limits.mu.Unlock()
		d.giveBack(n, until)
		return nil, false
	}
	if e.MaxInFlight == 0 {
		return nop, true // a rate slot is spent, not held
	}
	return func() {
		if err := ls.Release(context.WithoutCancel(ctx), n.Endpoint, lease); err != nil {
			d.cfg.Observer.StoreError("release", err) // the lease expires by itself
		}
	}, true
}

// giveBack returns n unattempted, due at about at.
func (d *Dispatcher) giveBack(n *notify.Notification, at time.Time) {
	at = at.Add(rand.N(waitSpread))
	d.finish(pendingFinish{Finish: store.Finish{Notification: n, Action: notify.ActionRelease, NextAt: at}})
}
