package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// refusalLogEvery is how often, at most, the requests a full Redis refused
// are summarised in the log.
const refusalLogEvery = 10 * time.Second

// refusalLog logs the requests refused because Redis is at maxmemory, so
// that thousands a second cost the log a line per refusalLogEvery rather
// than one each: the first refusal after a quiet refusalLogEvery is
// warned of in full (method, path, error), and the refusals after it are
// counted and warned of together once refusalLogEvery has passed since
// the last line, saying how many and since when. Every refusal is in a
// line: a timer writes the summary even when no refusal follows, and
// close writes the one pending. It is safe for concurrent use.
//
// It differs from the dispatcher's failure log (schedule's failureLog),
// which one loop's goroutine uses, reminds of one call failing, and has no
// timer: requests come from many goroutines and may simply stop.
type refusalLog struct {
	log   *slog.Logger
	every time.Duration

	// mu guards the rest. logged is when the last line was written;
	// pending counts the refusals since, not yet in a line, the first of
	// them at since; last is the latest one's error; flush is the timer
	// that writes them, set while pending > 0; closed stops new timers.
	mu      sync.Mutex
	logged  time.Time
	pending int
	since   time.Time
	last    error
	flush   *time.Timer
	closed  bool
}

// refused logs, or counts for the next summary, r refused with err.
func (l *refusalLog) refused(r *http.Request, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.pending == 0 && (l.logged.IsZero() || now.Sub(l.logged) >= l.every) || l.closed {
		l.logged = now
		l.log.WarnContext(r.Context(), "api: Redis is out of memory and refuses writes; later refusals are summarised every "+l.every.String(),
			"method", r.Method, "path", r.URL.Path, "error", err)
		return
	}
	l.pending++
	l.last = err
	if l.pending == 1 {
		l.since = now
		l.flush = time.AfterFunc(l.logged.Add(l.every).Sub(now), l.summarise)
	}
}

// summarise writes the pending refusals' summary, if any.
func (l *refusalLog) summarise() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.summariseLocked()
}

func (l *refusalLog) summariseLocked() {
	if l.pending == 0 {
		return
	}
	l.log.WarnContext(context.Background(), "api: requests refused since "+l.since.Format(time.RFC3339)+": Redis is out of memory",
		"refused", l.pending, "since", l.since, "error", l.last)
	l.logged, l.pending, l.last = time.Now(), 0, nil
}

// close writes the pending summary at once and stops the timer; later
// refusals are logged one by one.
func (l *refusalLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.flush != nil {
		l.flush.Stop()
	}
	l.summariseLocked()
	l.closed = true
}
