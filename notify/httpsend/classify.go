package httpsend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/notify"
)

// StatusError is an attempt that reached the receiver and got a status that
// is not success. Callers can read the status with errors.As.
type StatusError struct {
	StatusCode int
	// Body is the start of the response body, for the history, with the
	// request's credentials hidden (Result.Response).
	Body string
}

// Error implements error.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("status %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// ClassifyError turns a transport error into an attempt's outcome under r:
// an error already permanent stays so; a refused address is permanent; a timeout and any other network failure
// (refused connection, unknown host, reset) are retried when r's retry_on
// names "timeout" or "network", and permanent otherwise. A cancelled context
// (the dispatcher shutting down) is returned as it is, retryable.
func ClassifyError(r *notify.Rules, err error) error {
	var (
		blocked *BlockedError
		perm    *notify.PermanentError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &perm):
		return err
	case errors.As(err, &blocked):
		return notify.Permanent(err)
	case errors.Is(err, context.Canceled):
		return err
	case isTimeout(err):
		if r.Retries("timeout") {
			return err
		}
		return notify.Permanent(err)
	case r.Retries("network"):
		return err
	default:
		return notify.Permanent(err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// ClassifyStatus turns a response into an attempt's outcome under r: nil
// for a 2xx; a retry for a status r's retry_on names, carrying the
// receiver's Retry-After when r honours it; permanent for any other status,
// a 3xx included (redirects are not followed). now is the clock that an
// HTTP-date Retry-After is measured against.
func ClassifyStatus(r *notify.Rules, res *Result, now time.Time) error {
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return nil
	}
	err := &StatusError{StatusCode: res.StatusCode, Body: res.Recorded(bytes.TrimSpace(res.Body))}
	if !r.RetriesStatus(res.StatusCode) {
		return notify.Permanent(err)
	}
	var after time.Duration
	if r.HonorRetryAfter {
		after = RetryAfter(res.Header.Get("Retry-After"), now)
	}
	return notify.Retry(err, after)
}

// CheckSuccessBody returns nil when res, a 2xx, acknowledges the request
// under r's success_body, and otherwise a retryable error quoting the
// answer: a receiver (or an SMS gateway) that answers 200 with something
// else has not taken the notification, and is asked again.
func CheckSuccessBody(r *notify.Rules, res *Result) error {
	if successBodyMatches(r.SuccessBody, res.Body) {
		return nil
	}
	return fmt.Errorf("status %d without the success_body %q: %q", res.StatusCode, r.SuccessBody, res.Recorded(res.Body))
}

// successBodyMatches reports whether a response body acknowledges the
// delivery: always when want is empty; otherwise when the trimmed body
// equals want, or when both are JSON and the body holds want: the same
// value, or, for an object, an object with at least want's members, so
// that {"code":"SUCCESS"} accepts {"code":"SUCCESS","message":"OK"}, as a
// receiver that adds a message to its acknowledgement means it.
func successBodyMatches(want string, body []byte) bool {
	if want == "" {
		return true
	}
	want = strings.TrimSpace(want)
	got := bytes.TrimSpace(body)
	if string(got) == want {
		return true
	}
	var w, g any
	if json.Unmarshal([]byte(want), &w) != nil || json.Unmarshal(got, &g) != nil {
		return false
	}
	return holds(g, w)
}

// holds reports whether the JSON value got holds want: equal, or, for
// objects, with every member of want held by got's of the same name.
func holds(got, want any) bool {
	wo, isObject := want.(map[string]any)
	if !isObject {
		return reflect.DeepEqual(got, want)
	}
	gotObject, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range wo {
		if g, ok := gotObject[k]; !ok || !holds(g, v) {
			return false
		}
	}
	return true
}

// RetryAfter reads a Retry-After header value: a number of seconds, or an
// HTTP date measured from now. It returns 0 for an empty, unreadable or
// past value, which asks for no particular wait.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	// A number too long for int64 still asks for a long wait: ParseInt
	// saturates it, and the clamp below applies.
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if secs <= 0 {
			return 0
		}
		// A year is far beyond any policy's cap; clamping keeps the
		// multiplication from overflowing.
		return time.Duration(min(secs, 365*24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
