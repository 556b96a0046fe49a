package notify

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// RetryOnDefault is the failures retried when the rules name none: network
// errors, timeouts, 5xx, 408, 425 and 429.
var RetryOnDefault = []string{"network", "timeout", "5xx", "408", "425", "429"}

// Rules are what a sender needs to know, for one attempt, of the policy and
// topic of the notification it sends: how long the request may take, which
// failures are retried, and what answer counts as success. Package policy
// derives them from its policy file (policy.CurrentRules); the senders read
// them through a RulesFunc, so they depend on no policy package.
type Rules struct {
	// Timeout bounds the attempt's request. 0: the sender's own cap.
	Timeout time.Duration
	// RetryOn lists the failures that are retried: "network", "timeout",
	// "5xx", "4xx", "3xx" or a status code such as "429"; any other failure
	// is permanent. nil: RetryOnDefault.
	RetryOn []string
	// SuccessBody, when set, must equal the trimmed response body for a 2xx
	// to count as success; a JSON value compares as JSON, and a JSON object
	// is held by any object with at least its members.
	SuccessBody string
	// HonorRetryAfter passes a receiver's Retry-After on with the retry.
	HonorRetryAfter bool
	// Poll is the topic's done condition, for the poll channel; nil when
	// the topic has none.
	Poll *PollRule
}

// PollRule says when a polled answer is final, and where the final answer
// goes.
type PollRule struct {
	// Method is GET or POST; empty means GET.
	Method string
	// Field is a dotted path into the JSON answer; a numeric segment
	// indexes an array.
	Field string
	// Values lists the values of Field that mean done.
	Values []string
	// OnDone, when set, is the URL that receives the final answer as a
	// webhook.
	OnDone string
}

// RulesFunc returns the rules that apply to an attempt of n now. Senders
// call it on every attempt, so a reloaded policy file applies to the next
// attempt.
type RulesFunc func(n *Notification) Rules

// Retries reports whether r retries a failure class, "network" or
// "timeout".
func (r *Rules) Retries(class string) bool { return slices.Contains(r.retryOn(), class) }

// RetriesStatus reports whether r retries an HTTP status code, named
// itself ("429") or by its class ("5xx").
func (r *Rules) RetriesStatus(code int) bool {
	for _, c := range r.retryOn() {
		switch {
		case c == strconv.Itoa(code):
			return true
		case len(c) == 3 && strings.HasSuffix(c, "xx") && c[0] == byte('0'+code/100):
			return true
		}
	}
	return false
}

func (r *Rules) retryOn() []string {
	if r.RetryOn == nil {
		return RetryOnDefault
	}
	return r.RetryOn
}
