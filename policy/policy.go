// Package policy holds retry policies and topics: what schedule a
// notification follows, how long an attempt may take, which failures are
// retried, and the defaults a topic gives its notifications.
//
// NextAttemptAt is the one function that answers "when is attempt n+1 due, or
// is the notification dead?"; it is pure, with the clock and the randomness
// passed in.
//
// Set.Rules gives the senders the per-attempt part of a policy and topic as
// notify.Rules; CurrentRules wires a Watcher's Current into them.
//
// Load reads a policies file (YAML, through koanf) into a Set, naming the
// offending key of a bad file ("policies.merchant-notify.backoff[2]"); a
// Watcher keeps the Set in force and swaps in a new one when the file
// changes or on request, refusing a bad file and keeping the old Set.
package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/heraldhq/herald/notify"
)

// Defaults of a policy's fields, used where a field is zero.
const (
	// TTRDefault is how long a reservation lasts.
	TTRDefault = notify.TTRDefault
	// TimeoutDefault bounds one attempt's request.
	TimeoutDefault = 10 * time.Second
	// MaxRetryAfterDefault caps a receiver's Retry-After.
	MaxRetryAfterDefault = time.Hour
	// DefaultName is the policy used when neither the notification nor its
	// topic names one.
	DefaultName = "default"
)

// RetryOnDefault is the failures retried when a policy names none: network
// errors, timeouts, 5xx, 408, 425 and 429 (notify.RetryOnDefault).
var RetryOnDefault = slices.Clone(notify.RetryOnDefault)

// BackoffDefault is the default policy's array: an immediate attempt, an
// immediate retry, then 2m, 10m, 10m, 1h, 2h, 6h and 15h — 9 attempts over
// about 24h22m.
var BackoffDefault = []notify.Duration{
	0, 0,
	notify.Duration(2 * time.Minute), notify.Duration(10 * time.Minute), notify.Duration(10 * time.Minute),
	notify.Duration(time.Hour), notify.Duration(2 * time.Hour), notify.Duration(6 * time.Hour), notify.Duration(15 * time.Hour),
}

// Policy is a retry policy. Each field's zero value takes its default.
type Policy struct {
	// Backoff is the schedule: attempt 0 starts Backoff[0] after send_at, and
	// attempt n+1 starts Backoff[n+1] after attempt n fails; its length is
	// the number of attempts. Required, 1 to 100 entries, each between 0
	// and 100 years, as for every duration of a policy.
	Backoff []notify.Duration `koanf:"backoff" json:"backoff"`
	// TTR is how long a reservation lasts before it counts as a failed
	// attempt. Default TTRDefault (30s).
	TTR notify.Duration `koanf:"ttr" json:"ttr"`
	// Timeout bounds one attempt's request. Default TimeoutDefault (10s);
	// it is cut to the ttr when larger, and to the senders' own cap
	// (senders.webhook.timeout, 10s unless configured, for every HTTP
	// sender), so a policy that waits longer needs that raised too.
	Timeout notify.Duration `koanf:"timeout" json:"timeout"`
	// RetryOn lists the failures that are retried: "network", "timeout",
	// "5xx", "4xx", "3xx" or a status code such as "429". Anything else is
	// permanent. Default RetryOnDefault.
	RetryOn []string `koanf:"retry_on" json:"retry_on"`
	// SuccessBody, when set, must equal the trimmed response body for a 2xx
	// to count as success (Alipay's "success"). Empty: any 2xx succeeds. A
	// JSON value is compared as JSON, so {"code":"SUCCESS"} matches however
	// it is spaced, and a JSON object is held by any object with at least
	// its members: {"code":"SUCCESS","message":"OK"} matches it too.
	SuccessBody string `koanf:"success_body" json:"success_body,omitempty"`
	// HonorRetryAfter lets a receiver's Retry-After push the next attempt
	// later than the array says (never earlier), up to MaxRetryAfter.
	HonorRetryAfter bool `koanf:"honor_retry_after" json:"honor_retry_after"`
	// MaxRetryAfter caps a honoured Retry-After. Default
	// MaxRetryAfterDefault (1h).
	MaxRetryAfter notify.Duration `koanf:"max_retry_after" json:"max_retry_after"`
	// Jitter spreads retries: each wait is lengthened by up to this fraction
	// of itself, chosen at random (0.1: up to 10% later). 0, the default,
	// means exact times; jitter never makes an attempt earlier.
	Jitter float64 `koanf:"jitter" json:"jitter"`
}

// WithDefaults returns a copy of p with zero fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	if p.TTR == 0 {
		p.TTR = notify.Duration(TTRDefault)
	}
	if p.Timeout == 0 {
		p.Timeout = notify.Duration(TimeoutDefault)
	}
	if p.MaxRetryAfter == 0 {
		p.MaxRetryAfter = notify.Duration(MaxRetryAfterDefault)
	}
	if len(p.RetryOn) == 0 {
		p.RetryOn = slices.Clone(RetryOnDefault)
	}
	return p
}

// Validate checks p and names the offending field, as "backoff[2]". Its
// durations are checked as a policies file's are read, so that a policy
// built in Go is refused where the same policy in a file would be.
func (p *Policy) Validate() error {
	if len(p.Backoff) == 0 {
		return notify.Errorf("backoff", "must have at least one entry")
	}
	if len(p.Backoff) > notify.MaxBackoff {
		return notify.Errorf("backoff", "has %d entries, more than %d", len(p.Backoff), notify.MaxBackoff)
	}
	for i, d := range p.Backoff {
		if err := d.Check(fmt.Sprintf("backoff[%d]", i)); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		d    notify.Duration
	}{{"ttr", p.TTR}, {"timeout", p.Timeout}, {"max_retry_after", p.MaxRetryAfter}} {
		if err := f.d.Check(f.name); err != nil {
			return err
		}
	}
	for i, r := range p.RetryOn {
		if !validRetryOn(r) {
			return notify.Errorf(fmt.Sprintf("retry_on[%d]", i), "must be network, timeout, 3xx, 4xx, 5xx or a status code, not %q", r)
		}
	}
	// Written so that NaN, which compares false with everything, fails.
	if !(p.Jitter >= 0 && p.Jitter <= 1) {
		return notify.Errorf("jitter", "must be between 0 and 1")
	}
	return nil
}

func validRetryOn(r string) bool {
	switch r {
	case "network", "timeout", "3xx", "4xx", "5xx":
		return true
	}
	// Senders match a code by its decimal form, so "0429" or "+429" would
	// never match a 429: only the plain form is a code.
	code, err := strconv.Atoi(r)
	return err == nil && code >= 100 && code <= 599 && strconv.Itoa(code) == r
}

// rules returns what a sender applies of p to an attempt.
func (p *Policy) rules() notify.Rules {
	return notify.Rules{
		Timeout:         time.Duration(p.Timeout),
		RetryOn:         p.RetryOn,
		SuccessBody:     p.SuccessBody,
		HonorRetryAfter: p.HonorRetryAfter,
	}
}

// Failure describes a failed attempt, the input of NextAttemptAt.
type Failure struct {
	// Attempt is the 0-based index of the attempt that failed.
	Attempt int
	// At is when it failed.
	At time.Time
	// RetryAfter is the receiver's requested wait, 0 when none.
	RetryAfter time.Duration
	// Rand is a number in [0, 1) that picks the jitter.
	Rand float64
}

// NextAttemptAt answers when attempt f.Attempt+1 of a notification carrying
// backoff is due, or reports dead (ok false) when the array is exhausted:
// the next attempt starts backoff[n+1] after the failure, lengthened by up to
// Jitter of itself, or at the receiver's Retry-After when that is later and
// honoured (capped at MaxRetryAfter).
func (p *Policy) NextAttemptAt(backoff []notify.Duration, f Failure) (time.Time, bool) {
	next := f.Attempt + 1
	if next < 1 || next >= len(backoff) {
		return time.Time{}, false
	}
	wait := time.Duration(backoff[next])
	if p.Jitter > 0 {
		wait += time.Duration(float64(wait) * p.Jitter * f.Rand)
	}
	if p.HonorRetryAfter && f.RetryAfter > wait {
		wait = min(f.RetryAfter, max(time.Duration(p.MaxRetryAfter), wait))
	}
	if wait == 0 {
		// At once, an instant no one asked for: rounded down to the
		// millisecond, it is due when the failure's answer comes back,
		// where the store's rounding up of due times would hold it back
		// up to a millisecond. A wait asked for keeps its every nanosecond.
		return f.At.Truncate(time.Millisecond), true
	}
	return f.At.Add(wait), true
}

// ScheduleCeiling is the offset Schedule gives an attempt that starts later
// than a time.Duration can say, about 292 years after send_at: an array of
// up to notify.MaxBackoff waits of up to 100 years each can add up to more.
const ScheduleCeiling = time.Duration(math.MaxInt64)

// ScheduleCeilingText is how reports show ScheduleCeiling: as what it
// means, not as an offset.
const ScheduleCeilingText = "more than 292 years"

// Schedule returns the offset of each attempt from send_at when every
// attempt fails at once (no request time, no Retry-After, no jitter): what
// `herald policy check` and the dashboard print. An offset past what a
// time.Duration holds is ScheduleCeiling, so that none wraps around to a
// negative one; the waits themselves are never negative.
func Schedule(backoff []notify.Duration) []time.Duration {
	out := make([]time.Duration, len(backoff))
	var at time.Duration
	for i, d := range backoff {
		if at > ScheduleCeiling-time.Duration(d) {
			at = ScheduleCeiling
		} else {
			at += time.Duration(d)
		}
		out[i] = at
	}
	return out
}
