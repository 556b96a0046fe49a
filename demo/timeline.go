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

// line prints one event that happened at at.
func (t *timeline) line(at time.Time, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%8s  %s\n", t.stamp(at), fmt.Sprintf(format, args...))
}

// note prints what a receiver saw just now.
func (t *timeline) note(who, format string, args ...any) {
	t.line(time.Now(), "     %s: %s", who, fmt.Sprintf(format, args...))
}

// AttemptFinished implements schedule.Observer: one line per attempt, at
// the time it started.
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
		t.line(a.StartedAt, "%ssucceeded%s", head, status)
	case notify.ActionRetry:
		p := t.policies.PolicyFor(n)
		next, _ := p.NextAttemptAt(n.Backoff, policy.Failure{Attempt: a.Attempt, At: a.FinishedAt})
		t.line(a.StartedAt, "%sfailed, %s; attempt %d due at %s", head, reason, a.Attempt+1, t.stamp(next))
	case notify.ActionDead:
		why := "no attempts left"
		if a.Outcome == notify.OutcomePermanent {
			why = "a permanent failure"
		}
		t.line(a.StartedAt, "%sfailed, %s; DEAD: %s", head, reason, why)
	case notify.ActionCancelled:
		t.line(a.StartedAt, "%s%s, as the notification was cancelled", head, a.Outcome)
	default:
		t.line(a.StartedAt, "%s%s", head, a.Outcome)
	}
}

// StoreError implements schedule.Observer.
func (t *timeline) StoreError(op string, err error) {
	t.line(time.Now(), "Redis error in %s: %v", op, err)
}
