package policy

import (
	"errors"
	"time"

	"github.com/heraldhq/herald/notify"
)

// Step is the decision for an attempt that ended: what the store does with
// the notification, how the attempt is recorded, and when the next attempt
// is due.
type Step struct {
	Action  notify.Action
	Outcome notify.Outcome
	// NextAt is when the next attempt is due, for notify.ActionRetry and
	// notify.ActionRelease; zero otherwise.
	NextAt time.Time
}

// Decide answers how notification n goes on after its attempt n.Attempts
// ended at finished with err under p: ack on nil; dead on a permanent
// error; release (due at once, not counted) on notify.ErrReleased;
// otherwise a retry at the time NextAttemptAt gives, or dead when the array
// is exhausted. notify.ErrTTRExpired is a retryable failure recorded as
// ttr_expired. rnd in [0, 1) picks the jitter. The dispatcher, the reaper
// and a pull consumer's nack all decide here, so the retry rules live in
// one place.
func (p *Policy) Decide(n *notify.Notification, finished time.Time, err error, rnd float64) Step {
	switch {
	case err == nil:
		return Step{Action: notify.ActionAck, Outcome: notify.OutcomeSuccess}
	case errors.Is(err, notify.ErrReleased):
		return Step{Action: notify.ActionRelease, Outcome: notify.OutcomeReleased, NextAt: finished}
	}
	if perm := (*notify.PermanentError)(nil); errors.As(err, &perm) {
		return Step{Action: notify.ActionDead, Outcome: notify.OutcomePermanent}
	}
	step := Step{Action: notify.ActionDead, Outcome: notify.OutcomeRetry}
	if errors.Is(err, notify.ErrTTRExpired) {
		step.Outcome = notify.OutcomeTTRExpired
	}
	var retryAfter time.Duration
	if re := (*notify.RetryError)(nil); errors.As(err, &re) {
		retryAfter = re.RetryAfter
	}
	if next, ok := p.NextAttemptAt(n.Backoff, Failure{Attempt: n.Attempts, At: finished, RetryAfter: retryAfter, Rand: rnd}); ok {
		step.Action, step.NextAt = notify.ActionRetry, next
	}
	return step
}
