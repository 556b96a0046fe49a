package notify

import (
	"errors"
	"time"
)

// Action is what the store does with a notification whose attempt ended.
type Action string

// Actions of a finished attempt.
const (
	// ActionAck records success: the notification is succeeded.
	ActionAck Action = "ack"
	// ActionRetry schedules the next attempt.
	ActionRetry Action = "retry"
	// ActionDead moves the notification to the dead-letter set.
	ActionDead Action = "dead"
	// ActionRelease gives the reservation back without counting an attempt
	// (a dispatcher shutting down).
	ActionRelease Action = "release"
	// ActionCancelled records an attempt that ended after its notification
	// was cancelled: the attempt goes into the history and the notification
	// stays cancelled. The store finishes such an attempt so, whatever
	// action its caller decided.
	ActionCancelled Action = "cancelled"
)

// ErrTTRExpired is the error recorded for an attempt whose reservation ran
// out before it was acknowledged or failed. It is retried like any other
// failure, and recorded with OutcomeTTRExpired.
var ErrTTRExpired = errors.New("ttr expired")

// ErrReleased is the error of an attempt given back without penalty: the
// notification is due again at once and the attempt does not count.
var ErrReleased = errors.New("released at shutdown")

// NewAttempt returns the history entry of the attempt n.Attempts that ran
// from started to finished and ended with resp and err, recorded as
// outcome. The error is cut to MaxErrorLen.
func NewAttempt(n *Notification, started, finished time.Time, resp Response, err error, outcome Outcome) Attempt {
	a := Attempt{
		Attempt:    n.Attempts,
		StartedAt:  started.UTC(),
		FinishedAt: finished.UTC(),
		Outcome:    outcome,
		StatusCode: resp.StatusCode,
		DurationMS: finished.Sub(started).Milliseconds(),
	}
	if err != nil {
		a.Error = CutError(err.Error())
	}
	return a
}
