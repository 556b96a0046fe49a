package demo

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/show"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
)

// timeline prints the demo as it happens, one line per event, stamped with
// the time since the demo started. It is the dispatcher's Observer, so
// every attempt is printed with its outcome and what comes next; the fake
// receivers add what they saw, indented. It is safe for concurrent use.
type timeline struct {
	out   io.Writer
	start time.Time
	// policies gives the next attempt of a retried notification, computed
	// as the dispatcher computes it.
	policies *policy.Set
	// showFunc names a target briefly.
	showFunc func(target string) string

	// mu keeps lines whole.
	mu sync.Mutex
}

var _ schedule.Observer = (*timeline)(nil)

// stamp is at's time since the start, "+ 2.01s".
func (t *timeline) stamp(at time.Time) string {
	return fmt.Sprintf("+%.2fs", at.Sub(t.start).Seconds())
}

// line prints one event, stamped with the time it is printed: the lines
// come from the dispatcher, the receivers and the story at once, and a
// stamp taken before the lock, or an attempt's start, could be earlier
// than the line above's.
func (t *timeline) line(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%8s  %s\n", t.stamp(time.Now()), fmt.Sprintf(format, args...))
}

// note prints what a receiver saw just now.
func (t *timeline) note(who, format string, args ...any) {
	t.line("     %s: %s", who, fmt.Sprintf(format, args...))
}

// AttemptFinished implements schedule.Observer: one line per attempt, once
// its outcome is known, after what the receiver saw.
func (t *timeline) AttemptFinished(n *notify.Notification, a notify.Attempt, action notify.Action, _ time.Duration) {
	attempt := fmt.Sprintf("attempt %d of %d", a.Attempt, len(n.Backoff))
	if a.Attempt >= len(n.Backoff) {
		attempt = fmt.Sprintf("attempt %d (replayed)", a.Attempt)
	}
	to := t.showFunc(n.Target)
	if n.Channel == notify.ChannelPull {
		to = "the worker"
	}
	head := fmt.Sprintf("%-16s %-7s to %-22s %s: ", n.ID, n.Channel, to, attempt)
	// The channel is in its column already.
	reason := show.Line(strings.TrimPrefix(a.Error, n.Channel+": "), 90)
	switch action {
	case notify.ActionAck:
		status := "" // a pull worker's ack has none
		if a.StatusCode != 0 {
			status = fmt.Sprintf(" (HTTP %d)", a.StatusCode)
		}
		t.line("%ssucceeded%s", head, status)
	case notify.ActionRetry:
		p := t.policies.PolicyFor(n)
		next, _ := p.NextAttemptAt(n.Backoff, policy.Failure{Attempt: a.Attempt, At: a.FinishedAt})
		t.line("%sfailed, %s; attempt %d due at %s", head, reason, a.Attempt+1, t.stamp(next))
	case notify.ActionDead:
		why := "no attempts left"
		if a.Outcome == notify.OutcomePermanent {
			why = "a permanent failure"
		}
		t.line("%sfailed, %s; DEAD: %s", head, reason, why)
	case notify.ActionCancelled:
		t.line("%s%s, as the notification was cancelled", head, a.Outcome)
	default:
		t.line("%s%s", head, a.Outcome)
	}
}

// StoreError implements schedule.Observer.
func (t *timeline) StoreError(op string, err error) {
	t.line("Redis error in %s: %v", op, err)
}
