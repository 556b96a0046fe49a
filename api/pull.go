package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
)

type reserveResponse struct {
	// Notifications are records with their receipt and deadline. Their
	// history is not read, to keep reservations cheap: it is empty here
	// even for a retry.
	Notifications []*notify.Notification `json:"notifications"`
}

// reserve handles POST /v1/topics/{topic}/reserve?max=N&wait=D: up to max
// (default 1) due notifications of a pull topic, waiting up to wait (default
// 0, cut to MaxWait) for one to become due; the body is none or {}. A wait
// that ends, or a server shutting down, answers 200 with an empty list.
func (s *Server) reserve(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "max", "wait")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The server watches the connection for a hang-up, which ends the
	// request's context and so the wait, only once the body is read: an
	// unread one (the {} many clients send with a POST) would keep polling
	// for a consumer that has left, and hand it what comes due.
	body, err := readBody(w, r, s.cfg.MaxBody)
	if err == nil {
		err = checkReserveBody(body)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// A parameter given empty (?max=&wait=) is refused, not taken for the
	// default: it comes from an unset variable, and the default would
	// reserve one at a time without waiting.
	limit := 1
	if _, given := q["max"]; given {
		if limit, err = strconv.Atoi(q.Get("max")); err != nil {
			s.fail(w, r, notify.Errorf("max", "must be an integer between 1 and %d", client.MaxReserve))
			return
		}
	}
	var wait time.Duration
	if _, given := q["wait"]; given {
		if wait, err = notify.ParseDuration(q.Get("wait")); err != nil {
			s.fail(w, r, notify.Errorf("wait", "%v", err))
			return
		}
	}
	wait = min(wait, s.cfg.MaxWait)
	ctx, cancel := context.WithTimeout(r.Context(), wait+s.cfg.Timeout)
	defer cancel()
	stop := context.AfterFunc(s.closing, cancel)
	defer stop()
	items, err := s.client.Reserve(ctx, r.PathValue("topic"), limit, wait)
	if errors.Is(err, context.Canceled) && s.closing.Err() != nil && r.Context().Err() == nil {
		items, err = []*notify.Notification{}, nil
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, reserveResponse{Notifications: redactedAll(items)})
}

// reserveBody is what a reservation's body may hold: nothing. Its
// parameters are in the query; naming them here lets the answer to a
// consumer that sent them as JSON say where they go.
type reserveBody struct {
	Max  json.RawMessage `json:"max"`
	Wait json.RawMessage `json:"wait"`
}

// checkReserveBody takes no body and {}, the bodies clients send with a
// bare POST, and refuses any other: one that was ignored would reserve one
// notification at a time without waiting, as if it had been obeyed.
func checkReserveBody(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	var rb reserveBody
	if err := decodeJSON(body, &rb); err != nil {
		return err
	}
	switch {
	case rb.Max != nil:
		return notify.Errorf("max", "goes in the query (?max=10), not the body")
	case rb.Wait != nil:
		return notify.Errorf("wait", "goes in the query (?wait=20s), not the body")
	}
	return nil
}

type ackRequest struct {
	Receipt string `json:"receipt"`
}

type nackRequest struct {
	Receipt string `json:"receipt"`
	// Error is recorded in the attempt's history.
	Error string `json:"error,omitempty"`
	// RetryAfter asks for the next attempt no earlier than this; the
	// policy decides whether it is honoured (honor_retry_after).
	RetryAfter *notify.Duration `json:"retry_after,omitempty"`
	// Permanent sends the notification to the dead-letter set at once,
	// whatever its backoff array has left: no retry can help (a payload
	// the consumer cannot read). Not with RetryAfter.
	Permanent bool `json:"permanent,omitempty"`
}

// ack handles POST /v1/notifications/{id}/ack: 204 when the attempt is
// recorded as a success, 409 when the receipt no longer holds the
// reservation.
func (s *Server) ack(w http.ResponseWriter, r *http.Request) {
	s.withReceipt(w, r, s.client.Ack)
}

// release handles POST /v1/notifications/{id}/release: the consumer gives
// the job back unstarted (it is shutting down, or took more than it will
// do), due again at once with no attempt counted. 204, or 409 as for ack.
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	s.withReceipt(w, r, s.client.Release)
}

// withReceipt reads a body holding only a receipt and calls do with the
// path's id and that receipt: 204 when it is done.
func (s *Server) withReceipt(w http.ResponseWriter, r *http.Request, do func(ctx context.Context, id, receipt string) error) {
	var req ackRequest
	if err := readJSON(w, r, s.cfg.MaxBody, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	if err := do(ctx, r.PathValue("id"), req.Receipt); err != nil {
		s.fail(w, r, err)
		return
	}
	noContent(w)
}

// nack handles POST /v1/notifications/{id}/nack: the attempt failed, and
// the notification is retried on its backoff array or, once that is spent
// or when the consumer says the failure is permanent, dead. 204, or 409 as
// for ack.
func (s *Server) nack(w http.ResponseWriter, r *http.Request) {
	var req nackRequest
	if err := readJSON(w, r, s.cfg.MaxBody, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	cause := client.ErrNacked
	if req.Error != "" {
		cause = errors.New(req.Error)
	}
	switch {
	case req.Permanent && req.RetryAfter != nil:
		s.fail(w, r, notify.Errorf("retry_after", "cannot go with permanent, which makes no further attempt"))
		return
	case req.Permanent:
		cause = notify.Permanent(cause)
	case req.RetryAfter != nil:
		cause = notify.Retry(cause, time.Duration(*req.RetryAfter))
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	if err := s.client.Nack(ctx, r.PathValue("id"), req.Receipt, cause); err != nil {
		s.fail(w, r, err)
		return
	}
	noContent(w)
}

// repeatable are the query parameters that may be given more than once:
// each adds to the list.
var repeatable = []string{"ids"}

// query returns r's query parameters and refuses any not in allowed, so
// that a misspelt filter is an error rather than a silently wider operation
// (a purge of more than was meant), any but the repeatable given twice,
// which would otherwise take the first and drop the other unseen
// (?max=1&max=50 reserving one), and any pair the query's syntax does not
// allow, which r.URL.Query drops unseen (?topic=a&dry_run=true; purging).
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(allowed, k):
			return nil, notify.Errorf(k, "is not a known query parameter")
		case len(q[k]) > 1 && !slices.Contains(repeatable, k):
			return nil, notify.Errorf(k, "is given %d times; give it once", len(q[k]))
		}
	}
	return q, nil
}

// ParseQuery is url.ParseQuery, which skips the pairs it cannot read and
// reports only the first, made to refuse them: a pair holding a ";" (a
// separator some clients use, which Go does not) or a bad %-escape is a
// *notify.FieldError naming its parameter, as far as its name can be read.
// The dashboard reads its filters with it too, so that a purge never acts
// on a filter with a pair dropped.
func ParseQuery(raw string) (url.Values, error) {
	q := url.Values{}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		rawKey, rawValue, _ := strings.Cut(pair, "=")
		name, _, semicolon := strings.Cut(rawKey, ";")
		if !semicolon {
			semicolon = strings.Contains(rawValue, ";")
		}
		key, err := url.QueryUnescape(name)
		if err != nil {
			return nil, notify.Errorf("", "the query parameter name %q is not %%-encoded correctly", name)
		}
		if semicolon {
			return nil, notify.Errorf(key, "holds a \";\": separate query parameters with \"&\"")
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, notify.Errorf(key, "is not %%-encoded correctly: %v", err)
		}
		q[key] = append(q[key], value)
	}
	return q, nil
}
