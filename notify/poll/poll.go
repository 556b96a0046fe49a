// Package poll asks a provider's query API whether something is final, on
// the notification's backoff array: the payment-poll use, where a trade is
// polled until its status is TRADE_SUCCESS, TRADE_FINISHED or TRADE_CLOSED.
//
// # Request
//
// Each attempt is a GET, or a POST, to the notification's target, with its
// own headers (an Authorization for the provider, say) and Accept:
// application/json. A POST carries the rendered template or the payload, as
// a webhook does.
//
// # Done
//
// The notification's topic says when the answer is final (notify.Rules.Poll,
// from the topic's poll section in the policies file): the
// JSON response's Field, a dotted path such as
// "alipay_trade_query_response.trade_status" (a numeric segment indexes an
// array), must equal one of Values. A number or boolean compares by its JSON
// text ("10000", "true").
//
// The answer is parsed once, strictly: exactly one JSON value with nothing
// but white space around it, so `{"trade_status":"TRADE_SUCCESS"} junk` is
// not JSON. Only the first httpsend.ReadLimit bytes (64 KiB) of an answer
// are read. A 2xx answer that is done is success. One that is not done,
// lacks the field, is not JSON or is longer than the read limit is retried
// (the error wraps ErrNotDone, or says which of the last two it is), so
// polling goes on until the backoff array runs out.
// Other statuses and transport failures are classified under the policy as
// for a webhook; a topic without a poll condition is a permanent failure.
//
// # on_done
//
// When the topic names an on_done URL, a done answer is followed by a webhook
// to it, sent through Config.OnDone (the webhook sender, so it is signed
// and SSRF-guarded) with webhook-id set to the notification's id and the
// body:
//
//	{"id": ..., "topic": ..., "target": ..., "field": ..., "value": ...,
//	 "status_code": 200, "response": <the provider's answer, as parsed>}
//
// The notification's own headers are not forwarded there: they are meant for
// the provider; only the attempt's trace context (traceparent, tracestate)
// is, so that the webhook is part of the attempt's trace. For the same
// reason "target" is the polled URL as answers show it, without its user
// information (notify.RedactedURL). The poll and the webhook share the
// attempt's timeout. If the on_done webhook fails, the attempt fails with
// its error (retried or permanent as the webhook's outcome is), so the next
// attempt polls again and, finding the trade still final, sends on_done
// again: at least once, like every delivery.
package poll

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/templates"
)

// ErrNotDone is wrapped by the error of an attempt whose answer was not
// final yet: an expected, retryable outcome rather than a fault.
var ErrNotDone = errors.New("not done")

// Config configures a Sender.
type Config struct {
	// OnDone sends the on_done webhook of topics that name one; normally
	// the webhook sender. nil: a done answer of such a topic fails
	// permanently, since the webhook it asks for cannot be sent.
	OnDone notify.Sender
	// Common holds the timeout cap, the policies (whose topics give each
	// poll its done condition: with none, every poll fails), the templates
	// of POST polls and the connection settings.
	httpsend.Common
}

// Sender polls. It is safe for concurrent use.
type Sender struct {
	*httpsend.Base
	onDone notify.Sender
}

var _ notify.Sender = (*Sender)(nil)

// New returns a Sender for cfg, or an error for a bad allow_networks entry.
func New(cfg *Config) (*Sender, error) {
	base, err := httpsend.NewBase(&cfg.Common)
	if err != nil {
		return nil, fmt.Errorf("poll: %w", err)
	}
	return &Sender{Base: base, onDone: cfg.OnDone}, nil
}

// Send makes one poll of n.Target; see the package doc for what counts as
// done.
func (s *Sender) Send(ctx context.Context, n *notify.Notification) (notify.Response, error) {
	r := s.Rules(n)
	cond := r.Poll
	if cond == nil {
		return notify.Response{}, notify.Permanent(fmt.Errorf("poll: topic %q has no poll condition (topics.%s.poll)", n.Topic, n.Topic))
	}
	ctx, cancel := s.Begin(ctx, &r)
	defer cancel()

	req := httpsend.NewRequest(cmp.Or(cond.Method, http.MethodGet), n.Target)
	// A query changes nothing at the provider, POST or GET: one cut off on
	// a connection the provider closed can go again within the attempt.
	req.Replayable = true
	req.SetNotificationHeaders(n.Headers, "Accept")
	req.Header.Set("Accept", templates.ContentTypeJSON)
	if req.Method == http.MethodPost {
		body, contentType, err := s.Templates.Body(n)
		if err != nil {
			return notify.Response{}, notify.Permanent(fmt.Errorf("poll: %w", err))
		}
		req.Header.Set("Content-Type", contentType)
		req.Body = body
	}
	res, err := s.Client.Do(ctx, req)
	if err != nil {
		return notify.Response{}, httpsend.ClassifyError(&r, fmt.Errorf("poll: %w", err))
	}
	resp := res.Response()
	if err := httpsend.ClassifyStatus(&r, res, s.Now()); err != nil {
		return resp, fmt.Errorf("poll: %w", err)
	}
	doc, err := parseAnswer(res.Body)
	if err != nil {
		return resp, unreadable(res.Body, err)
	}
	value, found := lookup(doc, cond.Field)
	switch {
	case !found:
		return resp, fmt.Errorf("poll: %s is absent from the answer: %w", cond.Field, ErrNotDone)
	case !slices.Contains(cond.Values, value):
		return resp, fmt.Errorf("poll: %s is %q, not one of %s: %w", cond.Field, value, strings.Join(cond.Values, ", "), ErrNotDone)
	}
	if cond.OnDone != "" {
		if err := s.sendOnDone(ctx, n, cond, value, res.StatusCode, doc); err != nil {
			return resp, fmt.Errorf("poll: done, but on_done: %w", err)
		}
	}
	return resp, nil
}

// sendOnDone sends the on_done webhook of a done poll; see the package doc.
func (s *Sender) sendOnDone(ctx context.Context, n *notify.Notification, cond *notify.PollRule, value string, status int, doc any) error {
	if s.onDone == nil {
		return notify.Permanent(fmt.Errorf("topic %q names on_done %s, but the poll sender has no webhook sender", n.Topic, notify.RedactedURL(cond.OnDone)))
	}
	payload, err := json.Marshal(struct {
		ID         string `json:"id"`
		Topic      string `json:"topic"`
		Target     string `json:"target"`
		Field      string `json:"field"`
		Value      string `json:"value"`
		StatusCode int    `json:"status_code"`
		Response   any    `json:"response"`
	}{n.ID, n.Topic, notify.RedactedURL(n.Target), cond.Field, value, status, doc})
	if err != nil {
		return notify.Permanent(err)
	}
	_, err = s.onDone.Send(ctx, &notify.Notification{
		ID:       n.ID,
		Topic:    n.Topic,
		Channel:  notify.ChannelWebhook,
		Target:   cond.OnDone,
		Headers:  traceContext(n.Headers),
		Policy:   n.Policy,
		State:    n.State,
		Attempts: n.Attempts,
		Backoff:  n.Backoff,
		TTR:      n.TTR,
		Payload:  payload,
		SendAt:   n.SendAt,
	})
	return err
}

// traceContext returns the W3C Trace Context headers among a poll's, which
// go on to its on_done webhook, so that the webhook is part of the
// attempt's trace as the poll is; the poll's other headers, which may carry
// the provider's credentials, stay with the provider.
func traceContext(headers map[string]string) map[string]string {
	var out map[string]string
	for name, v := range headers {
		if strings.EqualFold(name, "traceparent") || strings.EqualFold(name, "tracestate") {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = v
		}
	}
	return out
}

// parseAnswer reads a provider's answer: exactly one JSON value, with
// nothing but white space around it. Numbers stay as their JSON text, so a
// value compares and is forwarded to on_done as the provider wrote it.
func parseAnswer(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return doc, nil
}

// unreadable is the error of an answer that parseAnswer refused with err.
// A JSON value that breaks off exactly where httpsend stops reading was
// cut there: the provider's answer is too long, not malformed, and the
// operator reading the history should be told which.
func unreadable(body []byte, err error) error {
	if len(body) == httpsend.ReadLimit && errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("poll: the answer is longer than the read limit of %d bytes, so its JSON cannot be read whole", httpsend.ReadLimit)
	}
	return fmt.Errorf("poll: the answer is not JSON: %w", err)
}

// lookup finds the dotted path in a parsed answer and returns the value
// there as text: a string as it is, a number or boolean as its JSON text,
// null as "null", an object or array as compact JSON. found is false when
// the path leads nowhere.
func lookup(doc any, path string) (value string, found bool) {
	v := doc
	for _, seg := range strings.Split(path, ".") {
		switch t := v.(type) {
		case map[string]any:
			if v, found = t[seg]; !found {
				return "", false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(t) {
				return "", false
			}
			v = t[i]
		default:
			return "", false
		}
	}
	switch t := v.(type) {
	case string:
		return t, true
	case json.Number:
		return t.String(), true
	case bool:
		return strconv.FormatBool(t), true
	case nil:
		return "null", true
	default:
		// A parsed object or array always marshals.
		b, _ := json.Marshal(t)
		return string(b), true
	}
}
