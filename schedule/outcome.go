package schedule

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// finishOf turns an attempt of n that ran from started to finished into the
// store's finish, deciding the next step under p.
func finishOf(p *policy.Policy, n *notify.Notification, started, finished time.Time, resp notify.Response, err error) store.Finish {
	step := p.Decide(n, finished, err, rand.Float64())
	return store.Finish{
		Notification: n,
		Action:       step.Action,
		NextAt:       step.NextAt,
		Attempt:      notify.NewAttempt(n, started, finished, resp, err, step.Outcome),
	}
}

// attemptContext bounds an attempt by the policy's timeout and by the
// reservation's deadline, so that no attempt outlives its reservation and
// two attempts of one notification never overlap. now and the deadline are
// on the store's clock, which need not be the host's that a context's
// deadline is read on: the bound is what is left of the reservation.
func attemptContext(ctx context.Context, p *policy.Policy, n *notify.Notification, now time.Time) (context.Context, context.CancelFunc) {
	left := time.Duration(p.Timeout)
	if n.Deadline != nil {
		left = min(left, n.Deadline.Sub(now))
	}
	return context.WithTimeout(ctx, left)
}
