package schedule

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// ErrTTRExpired is the error recorded for an attempt whose reservation ran
// out before it was acknowledged or failed.
var ErrTTRExpired = errors.New("ttr expired")

// errReleased is the error of an attempt given back at shutdown.
var errReleased = errors.New("released at shutdown")

// NextStep decides how an attempt of n that ran from started to finished
// ends, from the sender's response and error under policy p: ack on nil;
// dead on a permanent error; otherwise a retry at the time p's backoff array
// gives (lengthened by a honoured Retry-After), or dead when the array is
// exhausted. ErrTTRExpired is a retryable failure recorded as ttr_expired.
// The dispatcher, the reaper and the API's nack all go through here, so the
// retry rules live in one place.
func NextStep(p *policy.Policy, n *notify.Notification, started, finished time.Time, resp notify.Response, err error) store.Finish {
	f := store.Finish{
		Notification: n,
		Attempt: notify.Attempt{
			Attempt:    n.Attempts,
			StartedAt:  started.UTC(),
			FinishedAt: finished.UTC(),
			StatusCode: resp.StatusCode,
			DurationMS: finished.Sub(started).Milliseconds(),
		},
	}
	if err == nil {
		f.Action, f.Attempt.Outcome = store.ActionAck, notify.OutcomeSuccess
		return f
	}
	f.Attempt.Error = err.Error()
	if errors.Is(err, errReleased) {
		f.Action, f.Attempt.Outcome, f.NextAt = store.ActionRelease, notify.OutcomeReleased, finished
		return f
	}
	if perm := (*notify.PermanentError)(nil); errors.As(err, &perm) {
		f.Action, f.Attempt.Outcome = store.ActionDead, notify.OutcomePermanent
		return f
	}
	f.Attempt.Outcome = notify.OutcomeRetry
	if errors.Is(err, ErrTTRExpired) {
		f.Attempt.Outcome = notify.OutcomeTTRExpired
	}
	var retryAfter time.Duration
	if re := (*notify.RetryError)(nil); errors.As(err, &re) {
		retryAfter = re.RetryAfter
	}
	next, ok := p.NextAttemptAt(n.Backoff, policy.Failure{Attempt: n.Attempts, At: finished, RetryAfter: retryAfter, Rand: rand.Float64()})
	if !ok {
		f.Action = store.ActionDead
		return f
	}
	f.Action, f.NextAt = store.ActionRetry, next
	return f
}

// attemptTimeout bounds an attempt by the policy's timeout and by the
// reservation's deadline, so that no attempt outlives its reservation and
// two attempts of one notification never overlap.
func attemptContext(ctx context.Context, p *policy.Policy, n *notify.Notification, now time.Time) (context.Context, context.CancelFunc) {
	deadline := now.Add(time.Duration(p.Timeout))
	if n.Deadline != nil && n.Deadline.Before(deadline) {
		deadline = *n.Deadline
	}
	return context.WithDeadline(ctx, deadline)
}
