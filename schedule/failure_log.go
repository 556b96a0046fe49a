package schedule

import (
	"context"
	"log/slog"
	"time"
)

// failureRemindEvery is how often a store call that keeps failing is
// warned of again.
const failureRemindEvery = 30 * time.Second

// failureLog logs the failures of one kind of store call, such as one
// queue's reservations, so that an outage costs the log a few lines
// however fast the loop making the call retries: a warning at the first
// failure, then, while the call keeps failing, a reminder at most every
// failureRemindEvery saying since when it fails and how many failures went
// unlogged, and an info line once it works again, saying for how long and
// how many times it failed. A run of failures that begins less than
// failureRemindEvery after the last warning is not logged, nor is its end:
// the call flaps, failing and working by turns (a slot migrating on a
// Cluster fails the calls that meet it), and the next warning says how
// many such runs went unlogged. Repeats would say nothing new: what an outage
// loses or delays, such as an outcome that could not be recorded in time,
// is logged where that happens. Each loop has failureLogs of its own, used
// by its goroutine only.
type failureLog struct {
	log     *slog.Logger
	nowFunc func() time.Time
	// warning is the message of failures, recovered the message once the
	// call works again.
	warning, recovered string

	// since is when the current run of failures began, and logged when it
	// was last logged; failures counts the run's failures (0 while the
	// call works), and unlogged those since that line.
	since, logged      time.Time
	failures, unlogged int
	// quiet says the current run is not logged, having begun less than
	// failureRemindEvery after the last warning; flaps counts such runs
	// since that warning.
	quiet bool
	flaps int
}

// newFailureLog returns a failureLog on the dispatcher's logger and clock
// whose lines carry attrs, such as the queue.
func (d *Dispatcher) newFailureLog(warning, recovered string, attrs ...any) *failureLog {
	return &failureLog{log: d.log.With(attrs...), nowFunc: d.store.Now, warning: warning, recovered: recovered}
}

// failed logs a failure of the call with err and attrs, unless the call
// already failed last time and was logged less than failureRemindEvery ago.
func (f *failureLog) failed(ctx context.Context, err error, attrs ...any) {
	now := f.nowFunc()
	f.failures++
	recent := !f.logged.IsZero() && now.Sub(f.logged) < failureRemindEvery
	switch {
	case f.failures == 1 && recent:
		f.since, f.quiet = now, true
		f.flaps++
		return
	case f.failures == 1:
		f.since = now
	case recent:
		f.unlogged++
		return
	default:
		attrs = append(attrs, "failing_since", f.since, "failures", f.failures, "suppressed", f.unlogged)
	}
	if f.flaps > 0 {
		attrs = append(attrs, "flapped", f.flaps)
	}
	f.logged, f.unlogged, f.quiet, f.flaps = now, 0, false, 0
	f.log.WarnContext(ctx, f.warning, append([]any{"error", err}, attrs...)...)
}

// ok notes that the call worked, and logs so if it failed last time and
// that run was warned of.
func (f *failureLog) ok(ctx context.Context) {
	if f.failures == 0 {
		return
	}
	if !f.quiet {
		f.log.InfoContext(ctx, f.recovered, "after", f.nowFunc().Sub(f.since).Round(time.Millisecond), "failures", f.failures)
	}
	f.failures, f.unlogged, f.quiet = 0, 0, false
}
