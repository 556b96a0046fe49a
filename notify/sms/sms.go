// Package sms delivers notifications as text messages through a provider:
// Twilio's Messages API, or any gateway that takes a JSON POST.
//
// # Text
//
// The message is the notification's template rendered (appointment-
// reminder.sms, say), trimmed of surrounding white space. Without a
// template, the payload is the text: a JSON string ("Your code is 1234"), or
// an object whose "text" field is one ({"text": "Your code is 1234"}). An
// empty text, a payload of another shape and a target that is not an E.164
// number are permanent failures, as is a template that fails to render.
//
// # Providers
//
// twilio: a form-encoded POST of To, From and Body to
// {URL}/2010-04-01/Accounts/{AccountSID}/Messages.json with basic auth.
// Twilio's 21xxx errors (invalid or unreachable number, unsubscribed
// recipient, bad From) are permanent whatever the status, except 21611 (the
// From number's queue is full), which is retried when the policy retries a
// 429; other answers are classified by status under the policy, so 429 and
// 5xx are retried.
//
// http: a JSON POST of {"to", "from", "body"} to URL, classified by status
// under the policy like a webhook. Its Idempotency-Key is the notification
// id and the Unix milliseconds of its enqueue, as
// "appt-42-reminder.1777885200000": the same on every attempt and replay,
// so a gateway can drop a repeated attempt, while a reminder enqueued again
// with replace (a moved appointment) is a new message with a new key, which
// the gateway sends even when the one it replaces went out. A gateway's
// API key can go in URL's query: the errors the history keeps name the URL
// without its query, and without its user information, as every sender's
// errors do.
//
// With both, as with a webhook, a 2xx answer must hold the policy's
// success_body where one is set, or the attempt is retried: a gateway that
// answers 200 {"status":"error"} has not sent the message.
//
// Both go through the SSRF guard of package httpsend, so a gateway on an
// internal address needs its network in Config.HTTP.AllowNetworks.
package sms

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/templates"
)

// Providers.
const (
	ProviderHTTP   = "http"
	ProviderTwilio = "twilio"
)

// Defaults of a Config.
const (
	// ProviderDefault is the provider when the config names none.
	ProviderDefault = ProviderHTTP
	// TwilioURLDefault is Twilio's API base URL.
	TwilioURLDefault = "https://api.twilio.com"
)

// Config configures a Sender.
type Config struct {
	// Provider is ProviderHTTP or ProviderTwilio. Default ProviderDefault.
	Provider string
	// URL is, for http, the gateway's URL (required); for twilio, the API
	// base URL, so tests can point it at a local fake. Default for twilio:
	// TwilioURLDefault.
	URL string
	// AccountSID and AuthToken are Twilio's credentials (required for
	// twilio, unused for http).
	AccountSID string
	AuthToken  string
	// From is the sending number or sender id (required for twilio;
	// optional for http, where an empty From is left out).
	From string
	// Common holds the timeout cap, policies, templates and connection
	// settings; a gateway on an internal address needs its network in
	// HTTP.AllowNetworks.
	httpsend.Common
}

// Sender sends SMS through the configured provider. It is safe for
// concurrent use.
type Sender struct {
	*httpsend.Base
	provider string
	url      string
	sid      string
	token    string
	from     string
}

var _ notify.Sender = (*Sender)(nil)

// New returns a Sender for cfg, or an error naming the config field that is
// missing or wrong.
func New(cfg *Config) (*Sender, error) {
	s := &Sender{
		provider: cmp.Or(cfg.Provider, ProviderDefault),
		url:      cfg.URL,
		sid:      cfg.AccountSID,
		token:    cfg.AuthToken,
		from:     cfg.From,
	}
	switch s.provider {
	case ProviderHTTP:
		if s.url == "" {
			return nil, notify.Errorf("url", "is required for the http provider")
		}
	case ProviderTwilio:
		s.url = strings.TrimSuffix(cmp.Or(s.url, TwilioURLDefault), "/")
		switch {
		case s.sid == "":
			return nil, notify.Errorf("account_sid", "is required for the twilio provider")
		case s.token == "":
			return nil, notify.Errorf("auth_token", "is required for the twilio provider")
		case s.from == "":
			return nil, notify.Errorf("from", "is required for the twilio provider")
		}
	default:
		return nil, notify.Errorf("provider", "must be %s or %s, not %q", ProviderHTTP, ProviderTwilio, s.provider)
	}
	if !notify.ValidHTTPURL(s.url) {
		// Not quoted: a gateway's URL may hold its API key or password.
		return nil, notify.Errorf("url", "must be an http or https URL, with a port from 1 to 65535 where it names one")
	}
	base, err := httpsend.NewBase(&cfg.Common)
	if err != nil {
		return nil, fmt.Errorf("sms: %w", err)
	}
	s.Base = base
	return s, nil
}

// Send makes one attempt to send n's text to the number n.Target.
func (s *Sender) Send(ctx context.Context, n *notify.Notification) (notify.Response, error) {
	if !notify.ValidE164(n.Target) {
		return notify.Response{}, notify.Permanent(fmt.Errorf("sms: target %q is not an E.164 number such as +14155550100", n.Target))
	}
	text, err := s.text(n)
	if err != nil {
		return notify.Response{}, notify.Permanent(fmt.Errorf("sms: %w", err))
	}
	r := s.Rules(n)
	ctx, cancel := s.Begin(ctx, &r)
	defer cancel()
	if s.provider == ProviderTwilio {
		return s.sendTwilio(ctx, &r, n, text)
	}
	return s.sendHTTP(ctx, &r, n, text)
}

// text is the message for n; see the package doc.
func (s *Sender) text(n *notify.Notification) (string, error) {
	body, _, err := s.Templates.Body(n)
	if err != nil {
		return "", err
	}
	if n.Template == "" {
		text, err := notify.SMSText(body)
		if err != nil {
			return "", fmt.Errorf("payload %w", err)
		}
		return text, nil
	}
	text := strings.TrimSpace(string(body))
	if text == "" {
		return "", errors.New("the message text is empty")
	}
	return text, nil
}

func (s *Sender) sendHTTP(ctx context.Context, r *notify.Rules, n *notify.Notification, text string) (notify.Response, error) {
	body, err := json.Marshal(struct {
		To   string `json:"to"`
		From string `json:"from,omitempty"`
		Body string `json:"body"`
	}{n.Target, s.from, text})
	if err != nil {
		return notify.Response{}, notify.Permanent(fmt.Errorf("sms: %w", err))
	}
	req := httpsend.NewRequest(http.MethodPost, s.url)
	req.Header.Set("Content-Type", templates.ContentTypeJSON)
	req.Header.Set("Idempotency-Key", idempotencyKey(n))
	req.Body = body
	res, err := s.do(ctx, req)
	if err != nil {
		return notify.Response{}, httpsend.ClassifyError(r, fmt.Errorf("sms: %w", err))
	}
	resp := res.Response()
	if err := httpsend.ClassifyStatus(r, res, s.Now()); err != nil {
		return resp, fmt.Errorf("sms: %w", err)
	}
	if err := httpsend.CheckSuccessBody(r, res); err != nil {
		return resp, fmt.Errorf("sms: %w", err)
	}
	return resp, nil
}

// do sends req to the provider. A transport error names the provider's URL
// without its query: the http provider has no other place for a gateway's
// API key, and the error goes to the history, which the API and the
// dashboard show.
func (s *Sender) do(ctx context.Context, req *httpsend.Request) (*httpsend.Result, error) {
	res, err := s.Client.Do(ctx, req)
	// Do returns the transport's *url.Error as it is, unwrapped.
	if ue, ok := err.(*url.Error); ok {
		shown := ue.URL
		if i := strings.IndexByte(shown, '?'); i >= 0 {
			shown = shown[:i+1] + "xxxxx"
		}
		return nil, &url.Error{Op: ue.Op, URL: shown, Err: ue.Err}
	}
	return res, err
}

// idempotencyKey is the Idempotency-Key of n's attempts; see the package
// doc. A notification never stored has no enqueue time, and its id alone
// is the key.
func idempotencyKey(n *notify.Notification) string {
	if n.CreatedAt.IsZero() {
		return n.ID
	}
	return n.ID + "." + strconv.FormatInt(n.CreatedAt.UnixMilli(), 10)
}

// twilioError is the body of a failed Twilio API request.
type twilioError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (s *Sender) sendTwilio(ctx context.Context, r *notify.Rules, n *notify.Notification, text string) (notify.Response, error) {
	endpoint := s.url + "/2010-04-01/Accounts/" + url.PathEscape(s.sid) + "/Messages.json"
	req := httpsend.NewRequest(http.MethodPost, endpoint)
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(s.sid+":"+s.token)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Body = []byte(url.Values{"To": {n.Target}, "From": {s.from}, "Body": {text}}.Encode())
	res, err := s.do(ctx, req)
	if err != nil {
		return notify.Response{}, httpsend.ClassifyError(r, fmt.Errorf("sms: twilio: %w", err))
	}
	resp := res.Response()
	statusErr := httpsend.ClassifyStatus(r, res, s.Now())
	if statusErr == nil {
		if err := httpsend.CheckSuccessBody(r, res); err != nil {
			return resp, fmt.Errorf("sms: twilio: %w", err)
		}
		return resp, nil
	}
	var te twilioError
	if json.Unmarshal(bytes.TrimSpace(res.Body), &te) == nil {
		// The message quotes the request at times; the error goes to the
		// history, where the account's token must not.
		err := fmt.Errorf("sms: twilio error %d: %s", te.Code, res.Recorded([]byte(te.Message)))
		switch {
		case te.Code == twilioQueueFull:
			// The From number's queue drains at the number's rate, so a
			// later attempt gets through: Twilio's 429 in all but status.
			if r.RetriesStatus(http.StatusTooManyRequests) {
				return resp, err
			}
			return resp, notify.Permanent(err)
		case te.Code >= 21000 && te.Code < 22000:
			return resp, notify.Permanent(err)
		}
	}
	return resp, fmt.Errorf("sms: twilio: %w", statusErr)
}

// twilioQueueFull is Twilio's error for a From number whose queue of
// messages is full.
const twilioQueueFull = 21611
