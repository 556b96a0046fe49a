package schedule

import (
	"cmp"
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
// unattempted, due again when the endpoint should have room for it.
const (
	// fullWait is the shortest wait at max_in_flight, where a place frees
	// whenever an attempt ends, and what an attempt is taken to last until
	// one to the endpoint has been timed.
	fullWait = 20 * time.Millisecond
	// waitSpread is the most added at random to a wait that is not a
	// limit's, so that what waits does not all come back at once.
	waitSpread = 200 * time.Millisecond
	// backTick groups the notifications given back at a limit: they come
	// back on the next tick, so that one reservation takes a tick's worth
	// rather than one each. A rate lets a tenth of a second's worth through
	// at once (its slack is more); at max_in_flight the tick is shorter, an
	// attempt's time, where places free sooner.
	backTick = 100 * time.Millisecond
	// backlogHorizon is the furthest ahead a notification is given back.
	// Past it, a backlog comes back spread at random over the horizon: a
	// limit raised meanwhile takes effect within it.
	backlogHorizon = time.Minute
)

// limits is a dispatcher's side of endpoint limits: until when it knows an
// endpoint to be at its limit, so that it gives back the endpoint's other
// notifications without asking Redis, and when the next one it gives back
// should come again. Given back in turn, at twice the pace the endpoint
// takes them, a backlog of any size comes back no faster than a limited
// endpoint can use it, rather than all of it every few hundred
// milliseconds: that costs Redis work in proportion to the backlog, for
// nothing.
type limits struct {
	mu        sync.Mutex
	endpoints map[string]*limited
}

// limited is what a dispatcher knows of one endpoint at its limits.
type limited struct {
	// until is when the endpoint should have room again.
	until time.Time
	// next is when the next notification given back is due.
	next time.Time
	// attempt is how long an attempt to the endpoint lasts, averaged over
	// recent ones; 0 until one was timed.
	attempt time.Duration
}

// of returns what is known of endpoint name; l.mu is held.
func (l *limits) of(name string) *limited {
	if l.endpoints == nil {
		l.endpoints = map[string]*limited{}
	}
	e := l.endpoints[name]
	if e == nil {
		e = &limited{}
		l.endpoints[name] = e
	}
	return e
}

// pace is the time between two notifications an endpoint under e's limits
// can take: a rate's interval, or the time an attempt lasts over
// max_in_flight, whichever is longer.
func (k *limited) pace(e *endpoint.Endpoint) time.Duration {
	var pace time.Duration
	if e.Rate > 0 {
		pace = time.Duration(float64(time.Second) / e.Rate)
	}
	if e.MaxInFlight > 0 {
		pace = max(pace, cmp.Or(k.attempt, fullWait)/time.Duration(e.MaxInFlight))
	}
	return pace
}

// tick is the grouping of the notifications given back for an endpoint
// under e's limits: backTick, or an attempt's time at max_in_flight where
// shorter.
func (k *limited) tick(e *endpoint.Endpoint) time.Duration {
	tick := backTick
	if e.MaxInFlight > 0 {
		tick = min(tick, cmp.Or(k.attempt, fullWait))
	}
	return max(tick, time.Millisecond)
}

// timed folds an attempt's duration into what is known of endpoint name.
func (l *limits) timed(name string, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.of(name)
	if k.attempt == 0 {
		k.attempt = took
		return
	}
	k.attempt += (took - k.attempt) / 8
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
	until := d.limits.of(n.Endpoint).until
	d.limits.mu.Unlock()
	if now.Before(until) {
		d.backOff(n, e, now, until)
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
		d.limits.of(n.Endpoint).until = until
		d.limits.mu.Unlock()
		d.backOff(n, e, now, until)
		return nil, false
	}
	if e.MaxInFlight == 0 {
		return nop, true // a rate slot is spent, not held
	}
	return func() {
		d.limits.timed(n.Endpoint, d.store.Now().Sub(now))
		if err := ls.Release(context.WithoutCancel(ctx), n.Endpoint, lease); err != nil {
			d.cfg.Observer.StoreError("release", err) // the lease expires by itself
		}
	}, true
}

// backOff gives n back unattempted, due when its endpoint, at its limits
// until then, should have room for it: after the ones given back before
// it, within backlogHorizon.
func (d *Dispatcher) backOff(n *notify.Notification, e *endpoint.Endpoint, now, until time.Time) {
	d.limits.mu.Lock()
	k := d.limits.of(n.Endpoint)
	at := until
	if k.next.After(at) {
		at = k.next
	}
	if at.Sub(now) < backlogHorizon {
		k.next = at.Add(k.pace(e) / 2)
	} else {
		at = until.Add(rand.N(backlogHorizon))
	}
	tick := k.tick(e)
	d.limits.mu.Unlock()
	d.releaseAt(n, at.Truncate(tick).Add(tick))
}

// giveBack returns n unattempted, due at about at.
func (d *Dispatcher) giveBack(n *notify.Notification, at time.Time) {
	d.releaseAt(n, at.Add(rand.N(waitSpread)))
}
