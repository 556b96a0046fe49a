package notify

import (
	"context"
	"encoding/json"
	"time"
)

// Response is what a sender saw of the receiver, kept in the attempt's
// history: an HTTP status code (0 where there is none) and the start of the
// response body.
type Response struct {
	StatusCode int
	Body       string
}

// Sender makes one attempt to deliver n. The dispatcher calls it with a
// context that ends at the attempt's timeout or the reservation's deadline,
// whichever is first; n.Attempts is the 0-based index of this attempt.
//
// The error classifies the attempt: nil is success, Permanent(err) is final,
// anything else is retried on the notification's backoff array (Retry adds the
// receiver's requested wait).
type Sender interface {
	Send(ctx context.Context, n *Notification) (Response, error)
}

// SenderFunc adapts a function to Sender; library-mode handlers are usually
// one.
type SenderFunc func(ctx context.Context, n *Notification) (Response, error)

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, n *Notification) (Response, error) { return f(ctx, n) }

var _ Sender = SenderFunc(nil)

// Request is what a producer asks to enqueue, as the API decodes it. Empty
// fields take their topic's defaults, then the policy's.
type Request struct {
	ID      string `json:"id,omitempty"`
	Topic   string `json:"topic"`
	Channel string `json:"channel,omitempty"`
	Target  string `json:"target,omitempty"`
	// Endpoint names a registered endpoint to deliver to instead of a
	// target (webhook channel only); see Notification.Endpoint.
	Endpoint string            `json:"endpoint,omitempty"`
	Payload  json.RawMessage   `json:"payload,omitempty"`
	Template string            `json:"template,omitempty"`
	Policy   string            `json:"policy,omitempty"`
	Backoff  []Duration        `json:"backoff,omitempty"`
	SendAt   *time.Time        `json:"send_at,omitempty"`
	Delay    *Duration         `json:"delay,omitempty"`
	TTR      *Duration         `json:"ttr,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	// OrderKey orders the notification behind earlier ones of its topic
	// with the same key; see Notification.OrderKey.
	OrderKey string `json:"order_key,omitempty"`
	// Replace reschedules an existing notification of the same id with this
	// content, unless it is reserved.
	Replace bool `json:"replace,omitempty"`
}

// CheckDurations refuses a delay or ttr that the API's decoder refuses
// (negative, or over 100 years), naming the field, for a request built in
// Go, which no decoder has read.
func (r *Request) CheckDurations() error {
	for _, f := range []struct {
		name string
		d    *Duration
	}{{"delay", r.Delay}, {"ttr", r.TTR}} {
		if f.d == nil {
			continue
		}
		if err := f.d.Check(f.name); err != nil {
			return err
		}
	}
	return nil
}
