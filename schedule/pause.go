package schedule

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// strayEvery is how many pause reads pass between two looks for
// notifications parked under a pause that has ended (see
// store.Store.UnparkStray): about every 5s.
const strayEvery = 20

// pauseStore is what pausing needs of the store. A Store that does not
// implement it (a test double) pauses nothing.
type pauseStore interface {
	Paused(ctx context.Context) (map[string]time.Time, error)
	IsPaused(ctx context.Context, kind, name string) (bool, error)
	UnparkStray(ctx context.Context, queues []string, paused map[string]time.Time) (int, error)
}

var _ pauseStore = (*store.Store)(nil)

// pauses is a dispatcher's view of what is paused, read every
// store.PausedViewAge.
type pauses struct {
	store pauseStore
	// current holds the topics and endpoints paused at the last read,
	// as store.PauseKey names them, and those noted since; nil before the
	// first read.
	current atomic.Pointer[map[string]time.Time]
	// read is closed once current holds a first read, or at the start
	// when nothing can be paused: the reserve loops wait for it.
	read chan struct{}

	mu sync.Mutex
	// reads counts the reads begun.
	reads int
	// noted holds the pauses noted (note) with the count of reads begun
	// then: a read begun before a note may miss its pause, and keeps it.
	noted map[string]int
}

// note adds a pause the dispatcher learnt of from the store to its view
// at once, where the next read may be PausedViewAge away: an endpoint its
// health just disabled would otherwise burn the attempts of everything
// due meanwhile. It reports whether the view lacked it. park asks the
// store again before it parks, so a note outlived by a resume parks
// nothing.
func (p *pauses) note(key string, since time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.current.Load()
	if cur == nil {
		return true // no read yet: nothing is reserved to park
	}
	if _, ok := (*cur)[key]; ok {
		return false
	}
	if p.noted == nil {
		p.noted = map[string]int{}
	}
	p.noted[key] = p.reads
	next := maps.Clone(*cur)
	next[key] = since
	p.current.Store(&next)
	return true
}

// startPauses reads what is paused, then keeps reading. Nothing is reserved
// before the first read succeeds, so that a dispatcher starting while
// something is paused attempts none of it, even when Redis cannot tell it
// at first (a deploy during a failover); that read is retried as soon as a
// reservation would be.
func (d *Dispatcher) startPauses(ctx context.Context, queues []string) {
	ps, ok := d.store.(pauseStore)
	if !ok {
		close(d.pauses.read)
		return
	}
	d.pauses.store = ps
	d.loops.Add(1)
	go func() {
		defer d.loops.Done()
		failing := d.newFailureLog("schedule: cannot read what is paused; nothing is reserved until it can",
			"schedule: reading what is paused recovered")
		if !d.retry(ctx, failing, func() error { return d.refreshPauses(ctx) }) {
			return
		}
		close(d.pauses.read)
		ticker := time.NewTicker(store.PausedViewAge)
		defer ticker.Stop()
		// sweeps counts the reads left that look for stray parks because a
		// pause ended: a park asked about just before the resume may land
		// after the resume's own pass, and would wait for the next look
		// every strayEvery reads. They start at the read after the one
		// that saw the end, so as not to race the resume's own pass, whose
		// count would then miss what they moved; two, as the first may
		// come before the park lands.
		sweeps, from := 0, 0
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			before := *d.pauses.current.Load()
			if d.refreshPauses(ctx) != nil {
				continue
			}
			after := *d.pauses.current.Load()
			for key := range before {
				if _, ok := after[key]; !ok {
					sweeps, from = 2, i+1
				}
			}
			if i%strayEvery == 0 || (sweeps > 0 && i >= from) {
				if i >= from {
					sweeps = max(sweeps-1, 0)
				}
				if _, err := ps.UnparkStray(ctx, queues, after); err != nil && !errors.Is(err, context.Canceled) {
					d.cfg.Observer.StoreError("unpark", err)
				}
			}
		}
	}()
}

// refreshPauses reads what is paused; on failure the previous view stays.
// What was noted after the read began stays in the view.
func (d *Dispatcher) refreshPauses(ctx context.Context) error {
	p := &d.pauses
	p.mu.Lock()
	p.reads++
	read := p.reads
	p.mu.Unlock()
	paused, err := p.store.Paused(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Observer.StoreError("paused", err)
		}
		return err
	}
	if paused == nil {
		paused = map[string]time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, at := range p.noted {
		if at < read {
			delete(p.noted, key)
		} else if cur := p.current.Load(); cur != nil {
			if since, ok := (*cur)[key]; ok {
				paused[key] = since
			}
		}
	}
	p.current.Store(&paused)
	return nil
}

// park gives n back, unattempted, when its topic or endpoint is paused, or
// its endpoint disabled by its health (store.PauseDisabled): it
// waits parked until the resume (store.ParkAt). It reports whether it did.
// The view read every store.PausedViewAge says what may be paused, and
// costs nothing when nothing is; what it names is asked again, so that a
// view read just before a resume does not park what the resume set going.
func (d *Dispatcher) park(ctx context.Context, n *notify.Notification) bool {
	cur := d.pauses.current.Load()
	if cur == nil || len(*cur) == 0 {
		return false
	}
	for _, p := range [...]struct{ kind, name string }{
		{store.PauseTopic, n.Topic}, {store.PauseEndpoint, n.Endpoint}, {store.PauseDisabled, n.Endpoint},
	} {
		if _, ok := (*cur)[store.PauseKey(p.kind, p.name)]; !ok || p.name == "" {
			continue
		}
		// A failure to ask counts as paused: better a late attempt than one
		// made while paused.
		if paused, err := d.pauses.store.IsPaused(ctx, p.kind, p.name); err != nil || paused {
			d.releaseAt(n, store.ParkAt(p.kind, p.name))
			return true
		}
	}
	return false
}
