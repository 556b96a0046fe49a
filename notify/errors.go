package notify

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors shared by the store, the dispatcher, the Go client and the
// API, which maps them to HTTP status codes.
var (
	// ErrNotFound means no notification has the given id (or its record has
	// expired after its retention).
	ErrNotFound = errors.New("notification not found")

	// ErrConflict means an enqueue reused an existing id with other content
	// and did not ask to replace it.
	ErrConflict = errors.New("notification id exists with other content")

	// ErrOtherShard means an enqueue asked to replace a notification with
	// one that lives in another shard of the store (under another order
	// key, or another topic with its key, or without a key where it had
	// one): a replace happens in one step in one shard, so it is refused,
	// on a store of more than one shard, as an ErrConflict.
	ErrOtherShard = fmt.Errorf("%w, in another shard than the replacement's order key and topic lead to: a replace cannot move it there; cancel it and enqueue the replacement under a new id", ErrConflict)

	// ErrReserved means the notification is reserved by a dispatcher or a
	// consumer right now, so it cannot be replaced.
	ErrReserved = errors.New("notification is reserved")

	// ErrOrdered means an enqueue asked to replace a notification that
	// holds a place in its order key's line (waiting, or ahead of others):
	// replacing it would reorder the line.
	ErrOrdered = errors.New("notification holds its place in its order key's line")

	// ErrFinished means the notification has already succeeded or is dead, so
	// it can no longer be cancelled.
	ErrFinished = errors.New("notification already finished")

	// ErrStaleReceipt means an ack or nack carried a receipt that no longer
	// holds the reservation: it expired, or the notification was cancelled.
	ErrStaleReceipt = errors.New("reservation receipt is stale")

	// ErrCancelledMeanwhile answers the finish of an attempt whose
	// notification was cancelled while it ran: the attempt is recorded in
	// the history, and the notification stays cancelled. The cancel ended
	// the reservation, so it is an ErrStaleReceipt too.
	ErrCancelledMeanwhile = fmt.Errorf("%w: the notification was cancelled during the attempt, which is recorded in its history", ErrStaleReceipt)

	// ErrNotReplicated means a write reached the Redis master but not as
	// many replicas as redis.wait_replicas asks within redis.wait_timeout:
	// it may not survive the master's loss, so it is not reported done.
	ErrNotReplicated = errors.New("write not acknowledged by enough replicas")

	// ErrOutOfMemory means Redis refused a write because its memory reached
	// maxmemory (under noeviction, the policy Herald requires). A refused
	// enqueue, pause or endpoint write changed nothing; it succeeds once
	// memory is freed (a purge of dead letters, the sweep of expired
	// records) or maxmemory is raised. Reservations, outcomes, cancels,
	// purges, sweeps, quarantines, resumes and endpoints' health delete
	// before they write, which Redis lets through while full, so that no
	// attempt is made whose outcome cannot be recorded. The Redis error
	// stays in the chain.
	ErrOutOfMemory = errors.New("redis is out of memory (used memory above maxmemory)")
)

// FreeingMemory says how an operator frees Redis's memory once it nears or
// reaches maxmemory, for the answers and pages that report ErrOutOfMemory.
const FreeingMemory = "purge dead letters, shorten retention, bound dead_retention or raise maxmemory"

// FieldError is a validation error that names the offending field, such as
// "backoff[2]" or "payload".
type FieldError struct {
	Field   string
	Message string
}

// Error implements error.
func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Errorf returns a FieldError for field with a formatted message.
func Errorf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// PermanentError marks an attempt's failure as final: the notification goes
// to the dead-letter set without further attempts. Build it with Permanent.
type PermanentError struct{ Err error }

// Permanent wraps err so that the dispatcher treats it as a permanent failure.
// A nil err stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Error implements error.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryError marks an attempt's failure as retryable and carries the
// receiver's requested wait (its Retry-After), zero when it named none. Any
// error that is not a PermanentError is retried; RetryError only adds the wait.
type RetryError struct {
	Err        error
	RetryAfter time.Duration
}

// Retry wraps err as a retryable failure that asks for at least after before
// the next attempt. A nil err stays nil.
func Retry(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryError{Err: err, RetryAfter: after}
}

// Error implements error.
func (e *RetryError) Error() string {
	if e.RetryAfter > 0 {
		// What was asked, not what was done: a policy that does not
		// honour Retry-After, or caps it, retries on its own array, and
		// the record's next attempt says when.
		return fmt.Sprintf("%v (asked for a retry after %s)", e.Err, Duration(e.RetryAfter))
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *RetryError) Unwrap() error { return e.Err }
