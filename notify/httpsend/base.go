package httpsend

import (
	"cmp"
	"context"
	"time"

	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/templates"
)

// TimeoutDefault caps one attempt's request when the sender's config sets no
// cap.
const TimeoutDefault = 10 * time.Second

// Common is the configuration every HTTP sender shares; the webhook, sms and
// poll Configs embed it.
type Common struct {
	// Timeout caps one attempt's request: the notification's policy sets the
	// timeout, and this is the longest any policy may have
	// (senders.webhook.timeout). Default TimeoutDefault.
	Timeout time.Duration
	// Policies returns the current policy set. It is called on every
	// attempt, so a hot reload applies to the next attempt. Default: a set
	// with only the default policy.
	Policies func() *policy.Set
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

	policies func() *policy.Set
	timeout  time.Duration
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
	return &Base{
		Client:    client,
		Templates: c.Templates,
		policies:  policiesOrDefault(c.Policies),
		timeout:   cmp.Or(c.Timeout, TimeoutDefault),
		nowFunc:   time.Now,
	}, nil
}

// Policies returns the current policy set.
func (b *Base) Policies() *policy.Set { return b.policies() }

// Now returns the sender's clock.
func (b *Base) Now() time.Time { return b.nowFunc() }

// Begin bounds an attempt under policy p: ctx ends at p's timeout, or at the
// configured cap when that is shorter.
func (b *Base) Begin(ctx context.Context, p *policy.Policy) (context.Context, context.CancelFunc) {
	timeout := b.timeout
	if pt := time.Duration(p.Timeout); pt > 0 && pt < timeout {
		timeout = pt
	}
	return context.WithTimeout(ctx, timeout)
}
