package httpsend

import (
	"cmp"
	"context"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/templates"
)

// TimeoutDefault caps one attempt's request when the sender's config sets no
// cap.
const TimeoutDefault = 10 * time.Second

// Common is the configuration every HTTP sender shares; the webhook, sms and
// poll Configs embed it.
type Common struct {
	// Timeout caps one attempt's request: the notification's rules set the
	// timeout, and this is the longest any of them may have
	// (senders.webhook.timeout). Default TimeoutDefault.
	Timeout time.Duration
	// Rules returns the delivery rules of an attempt (its policy's timeout,
	// retry_on, success_body, and its topic's poll condition); Herald wires
	// policy.CurrentRules here. It is called on every attempt, so a hot
	// reload applies to the next attempt. Default: notify.Rules{}, the
	// default retry_on and no poll condition.
	Rules notify.RulesFunc
	// Templates renders notifications that name a template. nil: such
	// notifications fail permanently.
	Templates *templates.Set
	// HTTP configures the connections: the SSRF guard's allowed networks,
	// resolver and dialer, the User-Agent (include the version, as
	// "herald/1.4.0") and the logger. The zero value refuses every internal
	// network.
	HTTP Config
}

// Base is the state every HTTP sender shares, built from a Common; senders
// embed it.
type Base struct {
	// Client sends the requests through the SSRF guard.
	Client *Client
	// Templates renders bodies; nil renders payloads only.
	Templates *templates.Set

	rules   notify.RulesFunc
	timeout time.Duration
	// nowFunc stamps webhook-timestamp and measures HTTP-date Retry-After.
	nowFunc func() time.Time
}

// NewBase builds the shared state of a sender from c, or fails on a bad
// allow_networks entry.
func NewBase(c *Common) (*Base, error) {
	client, err := NewClient(&c.HTTP)
	if err != nil {
		return nil, err
	}
	rules := c.Rules
	if rules == nil {
		rules = defaultRules
	}
	return &Base{
		Client:    client,
		Templates: c.Templates,
		rules:     rules,
		timeout:   cmp.Or(c.Timeout, TimeoutDefault),
		nowFunc:   time.Now,
	}, nil
}

// defaultRules are the rules of a sender given none.
func defaultRules(*notify.Notification) notify.Rules { return notify.Rules{} }

// Rules returns the delivery rules of an attempt of n now.
func (b *Base) Rules(n *notify.Notification) notify.Rules { return b.rules(n) }

// Now returns the sender's clock.
func (b *Base) Now() time.Time { return b.nowFunc() }

// Begin bounds an attempt under rules r: ctx ends at r's timeout, or at the
// configured cap when that is shorter. A ctx that ends no later already
// bounds it, as the dispatcher's does (it ends at the policy's timeout or
// the reservation's deadline), and is returned as it is: a context derived
// from it would cost every attempt an allocation and a registration with
// its parent for nothing.
func (b *Base) Begin(ctx context.Context, r *notify.Rules) (context.Context, context.CancelFunc) {
	timeout := b.timeout
	if pt := r.Timeout; pt > 0 && pt < timeout {
		timeout = pt
	}
	if dl, ok := ctx.Deadline(); ok && !dl.After(time.Now().Add(timeout)) {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}
