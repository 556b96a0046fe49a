package store

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// lingerMax bounds how long a writer waits for the callers it expects
// (batcher.expect) before it writes without them.
const lingerMax = 50 * time.Microsecond

// batcher writes enqueues made at the same time together (a group commit):
// a caller that finds no write under way writes its own request at once;
// requests that arrive while one is under way wait, and the first of them
// writes all that waited, up to MaxBatch, as soon as it ends. An idle store
// therefore answers in one round trip, and a busy one pays one script per
// batch (per shard on a Cluster) instead of one per notification.
//
// One write at a time, not two overlapping: 8 producers of single calls
// are then written about 7 to a script instead of 3.6, which cut Redis CPU
// per enqueue by a fifth at the same rate (docs/benchmarks.md). Most of a
// small script's cost is the request's, not its items'.
type batcher struct {
	store *Store

	mu sync.Mutex // guards the fields below
	// writing is set while a batch is being written.
	writing bool
	// waiting holds the requests that arrived during the write.
	waiting []*waiter
	// expect is how many callers the next batch is likely to hold: those
	// the last batch answered, who are about to enqueue again, and those
	// that waited for it.
	expect int
}

// waiter is one caller's request and, once written, its result.
type waiter struct {
	req EnqueueRequest
	res EnqueueResult
	err error
	// done is closed when res and err are set; lead is closed when the
	// waiter must write the batch it heads.
	done, lead chan struct{}
}

// do writes req, alone or with the requests of other callers, and returns
// its result. A cancelled ctx stops the wait, not a write under way.
func (b *batcher) do(ctx context.Context, req EnqueueRequest) (EnqueueResult, error) {
	w := &waiter{req: req, done: make(chan struct{}), lead: make(chan struct{})}
	b.mu.Lock()
	first := !b.writing
	if first {
		b.writing = true
	} else {
		b.waiting = append(b.waiting, w)
	}
	b.mu.Unlock()
	if !first {
		select {
		case <-w.done:
			return w.res, w.err
		case <-w.lead:
		case <-ctx.Done():
			// Leadership may already be on its way: pass it on rather than
			// strand the others.
			b.abandon(w)
			return EnqueueResult{}, ctx.Err()
		}
	}
	b.write(context.WithoutCancel(ctx), w)
	return w.res, w.err
}

// write writes lead's request with those waiting, up to MaxBatch in all,
// answers each waiter, then hands the writing on to the first of those
// that arrived meanwhile, or stops.
func (b *batcher) write(ctx context.Context, lead *waiter) {
	// Yield once before cutting the batch: the callers the last batch just
	// answered are runnable and about to enqueue again, and letting them
	// queue first makes batches larger. With 8 producers of single calls
	// this raised the rate by 15% and cut Redis CPU per enqueue by 13%
	// (docs/benchmarks.md).
	//
	// Then, while fewer have come than expected, keep yielding, up to
	// lingerMax: Redis is idle meanwhile, and on this kind of machine a
	// request that wakes it costs its CPU more than the items in it. With 8
	// producers of single calls it raised a script's batch from 6.7 to 7.5
	// and cut Redis CPU per enqueue by 8% at the same rate
	// (docs/benchmarks.md).
	//
	// A lone caller expects no one and neither yields nor waits: a yield
	// with nothing else runnable still wakes an idle thread to look for
	// work, which cost a lone producer's enqueue a sixth of its CPU.
	b.mu.Lock()
	if b.expect > 1 {
		b.mu.Unlock()
		runtime.Gosched()
		b.mu.Lock()
	}
	if len(b.waiting)+1 < b.expect {
		for end := time.Now().Add(lingerMax); len(b.waiting)+1 < b.expect && time.Now().Before(end); {
			b.mu.Unlock()
			runtime.Gosched()
			b.mu.Lock()
		}
	}
	n := min(len(b.waiting), MaxBatch-1)
	batch := append([]*waiter{lead}, b.waiting[:n]...)
	b.waiting = b.waiting[n:]
	b.mu.Unlock()

	reqs := make([]EnqueueRequest, len(batch))
	for i, w := range batch {
		reqs[i] = w.req
	}
	results, err := b.store.enqueueBatch(ctx, reqs)
	for i, w := range batch {
		if err != nil {
			w.err = err
		} else {
			w.res = results[i]
		}
		close(w.done)
	}
	b.handOff(len(batch))
}

// handOff makes the first waiting request the writer, taking it out of the
// queue, or ends the writing. answered is how many callers the batch just
// written answered (0 when no batch was).
func (b *batcher) handOff(answered int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if answered > 0 {
		b.expect = answered + len(b.waiting)
	}
	if len(b.waiting) == 0 {
		b.writing = false
		return
	}
	next := b.waiting[0]
	b.waiting = b.waiting[1:]
	close(next.lead)
}

// abandon removes w, whose caller gave up; if w had just been made a
// writer, the next waiting request takes its place.
func (b *batcher) abandon(w *waiter) {
	b.mu.Lock()
	for i, o := range b.waiting {
		if o == w {
			b.waiting = append(b.waiting[:i:i], b.waiting[i+1:]...)
			b.mu.Unlock()
			return
		}
	}
	b.mu.Unlock()
	select {
	case <-w.lead:
		b.handOff(0)
	default:
		// w was taken into a batch already: the batch's writer answers it.
	}
}
