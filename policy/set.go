package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
)

// Topic gives the notifications of a topic their defaults.
type Topic struct {
	// Channel is the default channel: webhook, sms, poll or pull.
	Channel string `koanf:"channel" json:"channel,omitempty"`
	// Policy is the default policy's name. Empty: "default".
	Policy string `koanf:"policy" json:"policy,omitempty"`
	// Template is the default template's file name.
	Template string `koanf:"template" json:"template,omitempty"`
	// Target is the default target (URL or E.164 number).
	Target string `koanf:"target" json:"target,omitempty"`
	// Endpoint is the default endpoint, instead of a target: one of the
	// file's endpoints or one registered over the API (checked on enqueue).
	Endpoint string `koanf:"endpoint" json:"endpoint,omitempty"`
	// Poll configures the poll channel: the done condition and the optional
	// on_done webhook.
	Poll *Poll `koanf:"poll" json:"poll,omitempty"`
}

// Poll is the poll channel's configuration of a topic: when a provider's
// answer means the polled thing is final.
type Poll struct {
	// Method is GET (the default) or POST.
	Method string `koanf:"method" json:"method,omitempty"`
	// Field is a dotted path into the JSON response, such as
	// "alipay_trade_query_response.trade_status".
	Field string `koanf:"field" json:"field"`
	// Values lists the values of Field that mean done.
	Values []string `koanf:"values" json:"values"`
	// OnDone, when set, is a URL that receives the final response as a
	// webhook.
	OnDone string `koanf:"on_done" json:"on_done,omitempty"`
}

// Set is an immutable set of policies and topics. Replace it as a whole on
// reload; never change one in place.
type Set struct {
	Policies map[string]Policy `koanf:"policies" json:"policies"`
	Topics   map[string]Topic  `koanf:"topics" json:"topics"`
	// Endpoints are the file's endpoints (see WithEndpoints). Their
	// secrets are never marshalled.
	Endpoints map[string]endpoint.Endpoint `koanf:"endpoints" json:"-"`
}

// NewSet returns a validated set of policies (defaults applied) and topics.
// A "default" policy with BackoffDefault is added when policies has none.
func NewSet(policies map[string]Policy, topics map[string]Topic) (*Set, error) {
	s := &Set{Policies: make(map[string]Policy, len(policies)+1), Topics: maps.Clone(topics)}
	if s.Topics == nil {
		s.Topics = map[string]Topic{}
	}
	for _, name := range slices.Sorted(maps.Keys(policies)) {
		p := policies[name]
		if err := p.Validate(); err != nil {
			return nil, prefix("policies."+name, err)
		}
		s.Policies[name] = p.WithDefaults()
	}
	if _, ok := s.Policies[DefaultName]; !ok {
		s.Policies[DefaultName] = Policy{Backoff: slices.Clone(BackoffDefault)}.WithDefaults()
	}
	for _, name := range slices.Sorted(maps.Keys(s.Topics)) {
		t := s.Topics[name]
		field := "topics." + name
		switch {
		case !notify.ValidTopic(name):
			return nil, notify.Errorf(field, "topic names must match [a-z0-9._-]{1,64}")
		case t.Channel != "" && !slices.Contains([]string{notify.ChannelWebhook, notify.ChannelSMS, notify.ChannelPoll, notify.ChannelPull}, t.Channel):
			return nil, notify.Errorf(field+".channel", "must be webhook, sms, poll or pull, not %q", t.Channel)
		}
		if err := checkTopicEndpoint(field, &t); err != nil {
			return nil, err
		}
		if t.Policy != "" {
			if _, ok := s.Policies[t.Policy]; !ok {
				return nil, notify.Errorf(field+".policy", "names unknown policy %q", t.Policy)
			}
		}
		if err := validateTopicTarget(t); err != nil {
			return nil, prefix(field, err)
		}
		if t.Poll != nil {
			if t.Poll.OnDone != "" && !notify.ValidHTTPURL(t.Poll.OnDone) {
				// herald policy check prints the error, and serve logs it.
				return nil, notify.Errorf(field+".poll.on_done", "must be an http or https URL with a host, not %q", notify.RedactedURL(t.Poll.OnDone))
			}
			if t.Poll.Field == "" {
				return nil, notify.Errorf(field+".poll.field", "is required")
			}
			if len(t.Poll.Values) == 0 {
				return nil, notify.Errorf(field+".poll.values", "must have at least one value")
			}
			if m := t.Poll.Method; m != "" && m != "GET" && m != "POST" {
				return nil, notify.Errorf(field+".poll.method", "must be GET or POST")
			}
		}
	}
	return s, nil
}

// validateTopicTarget checks a topic's default target as an enqueue checks
// a notification's: for the topic's channel, or, when the topic names none,
// as either an http or https URL or an E.164 number.
func validateTopicTarget(t Topic) error {
	switch {
	case t.Target == "":
		return nil
	case t.Channel != "":
		return notify.ValidateTarget(t.Channel, t.Target)
	case !notify.ValidHTTPURL(t.Target) && !notify.ValidE164(t.Target):
		return notify.Errorf("target", "must be an http or https URL or an E.164 phone number")
	}
	return nil
}

func prefix(path string, err error) error {
	if fe, ok := err.(*notify.FieldError); ok {
		return &notify.FieldError{Field: path + "." + fe.Field, Message: fe.Message}
	}
	return fmt.Errorf("%s: %w", path, err)
}

// Policy returns the named policy, or the default policy when name is empty.
// ok is false for an unknown name.
func (s *Set) Policy(name string) (Policy, bool) {
	if name == "" {
		name = DefaultName
	}
	p, ok := s.Policies[name]
	return p, ok
}

// PolicyFor returns the policy a stored notification follows now: its own
// policy, or the default when that policy has since been removed, so a
// reload never strands scheduled work.
func (s *Set) PolicyFor(n *notify.Notification) Policy {
	if p, ok := s.Policy(n.Policy); ok {
		return p
	}
	p, _ := s.Policy(DefaultName)
	return p
}

// Rules returns the delivery rules of an attempt of n now: those of the
// policy PolicyFor picks, and its topic's poll condition.
func (s *Set) Rules(n *notify.Notification) notify.Rules {
	p := s.PolicyFor(n)
	r := p.rules()
	if c := s.Topics[n.Topic].Poll; c != nil {
		r.Poll = &notify.PollRule{Method: c.Method, Field: c.Field, Values: c.Values, OnDone: c.OnDone}
	}
	return r
}

// CurrentRules adapts a source of the set in force (a Watcher's Current) to
// the senders' notify.RulesFunc: every call reads the set anew, so a reload
// applies to the next attempt.
func CurrentRules(current func() *Set) notify.RulesFunc {
	return func(n *notify.Notification) notify.Rules { return current().Rules(n) }
}

// Resolve turns a request into a notification ready to store: it applies the
// topic's defaults (its endpoint or target only when the request names
// neither), then the policy's, picks a random id when none is given,
// computes the send time from send_at or delay (now when neither), validates
// the result, and computes its content digest. A negative delay is a send
// time that long ago, as an import keeps a task due now whose policy waits
// before its first attempt; producers' requests are checked for the ranges
// the API takes before they get here (notify.Request.CheckDurations).
// maxPayload is as in notify.Notification.Validate.
func (s *Set) Resolve(req *notify.Request, now time.Time, maxPayload int) (*notify.Notification, error) {
	if !notify.ValidTopic(req.Topic) {
		return nil, notify.Errorf("topic", "must match [a-z0-9._-]{1,64}")
	}
	t := s.Topics[req.Topic]
	if req.Endpoint != "" && req.Target != "" {
		return nil, notify.Errorf("endpoint", "give endpoint or target, not both")
	}
	target, ep := t.Target, t.Endpoint
	if req.Target != "" || req.Endpoint != "" {
		target, ep = req.Target, req.Endpoint
	}
	channel := cmp.Or(req.Channel, t.Channel)
	if ep != "" || t.Endpoint != "" {
		channel = cmp.Or(channel, notify.ChannelWebhook) // endpoints are webhook receivers
	}
	n := &notify.Notification{
		ID:       req.ID,
		Topic:    req.Topic,
		Channel:  channel,
		Target:   target,
		Endpoint: ep,
		Template: cmp.Or(req.Template, t.Template),
		Policy:   cmp.Or(req.Policy, t.Policy, DefaultName),
		Headers:  req.Headers,
		Payload:  req.Payload,
		OrderKey: req.OrderKey,
		State:    notify.StateScheduled,
	}
	if n.ID == "" {
		n.ID = notify.NewID()
	}
	p, ok := s.Policy(n.Policy)
	if !ok {
		return nil, notify.Errorf("policy", "unknown policy %q", n.Policy)
	}
	n.Backoff = slices.Clone(req.Backoff)
	if len(n.Backoff) == 0 {
		n.Backoff = slices.Clone(p.Backoff)
	}
	n.TTR = p.TTR
	if req.TTR != nil {
		n.TTR = *req.TTR
	}
	var schedule string
	field := "send_at"
	switch {
	case req.SendAt != nil && req.Delay != nil:
		return nil, notify.Errorf("delay", "give send_at or delay, not both")
	case req.SendAt != nil:
		// The caller's instant is kept to the nanosecond: the store rounds
		// due times up, so truncating here would start attempts early.
		n.SendAt = req.SendAt.UTC()
		schedule = n.SendAt.Format(time.RFC3339Nano)
	case req.Delay != nil:
		n.SendAt = now.Add(time.Duration(*req.Delay)).UTC()
		// Go's form, "30m0s", which stored digests were taken of.
		schedule = "delay " + time.Duration(*req.Delay).String()
		field = "delay"
	default:
		n.SendAt = now.UTC()
		schedule = "now"
	}
	if req.SendAt == nil && (req.Delay == nil || *req.Delay == 0) && len(n.Backoff) > 0 && n.Backoff[0] == 0 {
		// Due at once, an instant no one asked for: rounded up to the
		// millisecond as the store rounds due times, it would not be due
		// for up to a millisecond after the enqueue's answer. Rounded
		// down, no attempt starts before the enqueue it follows.
		n.SendAt = n.SendAt.Truncate(time.Millisecond)
	}
	if err := checkSendAt(n.SendAt); err != nil {
		return nil, notify.Errorf(field, "%v", err)
	}
	if err := n.Validate(maxPayload); err != nil {
		return nil, err
	}
	// As the store keeps them, so that the enqueue's answer shows what
	// every later read does.
	n.TTR = n.TTR.CeilMS()
	for i, d := range n.Backoff {
		n.Backoff[i] = d.CeilMS()
	}
	if n.Channel == notify.ChannelPoll && t.Poll == nil {
		// The poll sender fails every attempt without the topic's done
		// condition: better a 400 now than a dead notification later.
		return nil, notify.Errorf("channel", "is poll, but topic %q has no done condition to poll for (topics.%s.poll in the policies file)", n.Topic, n.Topic)
	}
	if n.Channel == notify.ChannelSMS && n.Template == "" {
		// Without a template the payload is the text: one that holds none
		// would fail every attempt.
		if _, err := notify.SMSText(n.Payload); err != nil {
			return nil, notify.Errorf("payload", "%v", err)
		}
	}
	if err := checkSendAt(n.SendAt.Add(time.Duration(n.Backoff[0]))); err != nil {
		if len(req.Backoff) > 0 {
			field = "backoff[0]"
		}
		return nil, notify.Errorf(field, "puts the first attempt (backoff[0] after the send time) out of range: it %v", err)
	}
	// The digest is of the request as its producer wrote it, not of the
	// defaults it resolved to: a producer that retries an enqueue whose
	// answer it lost gets the notification it made (200), not a conflict,
	// when a policy or topic was edited in between.
	asked := notify.Notification{Topic: n.Topic, Channel: req.Channel, Target: req.Target, Endpoint: req.Endpoint,
		Template: req.Template, Policy: req.Policy, Headers: req.Headers, Payload: req.Payload, OrderKey: req.OrderKey}
	if len(req.Backoff) > 0 {
		asked.Backoff = req.Backoff
	}
	if req.TTR != nil {
		asked.TTR = *req.TTR
	}
	n.Digest, n.Schedule = asked.ComputeDigest(schedule), schedule
	return n, nil
}

// Bounds of a due time. A record writes its times in RFC 3339, whose years
// have four digits, so the last one is the last millisecond of 9999 (due
// times are rounded up to the millisecond, so a later fraction of it
// would be the year 10000); a send_at written in 9999 with a negative
// offset can be past it. Times before the Unix epoch are refused rather
// than read as "now". Both are well inside what a Redis score holds
// exactly.
var (
	minSendAt = time.Unix(0, 0).UTC()
	maxSendAt = time.Date(9999, time.December, 31, 23, 59, 59, int(999*time.Millisecond), time.UTC)
)

func checkSendAt(t time.Time) error {
	if t.Before(minSendAt) || t.After(maxSendAt) {
		return fmt.Errorf("must be between %s and %s", minSendAt.Format(time.RFC3339), maxSendAt.Format(time.RFC3339Nano))
	}
	return nil
}
