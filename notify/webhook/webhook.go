// Package webhook delivers notifications as signed HTTP POSTs.
//
// # Request
//
// The body is the notification's template rendered (see package templates),
// or else its payload as JSON. The headers follow Standard Webhooks:
//
//	webhook-id         the notification id, the same on every attempt, so a
//	                   receiver can de-duplicate
//	webhook-timestamp  Unix seconds of this attempt
//	webhook-signature  v1,<base64 HMAC-SHA256 of "id.timestamp.body">; for
//	                   a notification naming an endpoint, the endpoint's
//	                   signatures (see package endpoint); an endpoint
//	                   whose every secret has expired gets no request,
//	                   and the attempt is retried
//	Herald-Attempt     the 0-based attempt index, as in the history
//
// plus the notification's own headers (which cannot replace the ones above,
// Content-Type, User-Agent or Accept-Encoding) and a User-Agent.
//
// # Verifying, on the receiver's side
//
// Any Standard Webhooks library verifies these requests. The key is the
// secret's bytes after base64-decoding what follows "whsec_"; a secret
// without that prefix (a "raw" secret) is used as it is, byte for byte.
// With a "whsec_" secret, give the libraries the secret itself. With a raw
// one, give them its bytes: in Go,
//
//	wh, err := standardwebhooks.NewWebhookRaw([]byte(rawSecret))
//	err = wh.Verify(body, r.Header)
//
// and in libraries that only take "whsec_" secrets, pass "whsec_" followed
// by the standard base64 of the raw secret. By hand: compute base64(
// HMAC-SHA256(key, webhook-id + "." + webhook-timestamp + "." + body)) over
// the body exactly as received, compare it in constant time with each
// space-separated "v1,<signature>" entry of webhook-signature, and refuse a
// webhook-timestamp more than a few minutes from now (the libraries allow
// five), so a captured request cannot be replayed later.
//
// # Outcome
//
// Under the notification's policy, looked up on every attempt so that a
// reloaded policy file takes effect at once: a 2xx is success, when the
// response body also equals the policy's success_body where one is set
// (Alipay's "success", or WeChat's {"code":"SUCCESS"}, compared as JSON);
// a 2xx with another body is retried, as the receiver did not acknowledge.
// A status, timeout or network failure that the policy's retry_on names is
// retried, with the receiver's Retry-After when the policy honours it;
// anything else is permanent, a 3xx included, since redirects are not
// followed. A target the SSRF guard refuses and a template that fails to
// render are permanent too. See package httpsend for the guard.
package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
)

// SecretPrefix marks a Standard Webhooks secret, whose rest is the key in
// base64.
const SecretPrefix = "whsec_"

// minKeySize is the shortest signing key, in bytes, that New takes without
// a warning: Standard Webhooks keys are 24 to 64 random bytes.
const minKeySize = 24

// Header names of a webhook request.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
	HeaderAttempt   = "Herald-Attempt"
)

// Config configures a Sender. Every field but Secret has a default.
type Config struct {
	// Secret signs each request: "whsec_<base64>" as Standard Webhooks
	// issues them, or any other string used as the key's bytes, but for an
	// ed25519 key ("whsk_", "whpk_"), which is refused. Empty: no
	// webhook-signature header (warned at construction). A key shorter
	// than 24 bytes is warned of too.
	Secret string
	// Endpoints finds the endpoint a notification names, on every attempt:
	// such a notification goes to the endpoint's URL, signed with the
	// endpoint's secrets instead of Secret. nil: no endpoints, and a
	// notification naming one fails permanently.
	Endpoints endpoint.Lookup
	httpsend.Common
}

// Sender delivers webhooks. It is safe for concurrent use, and keeps
// connections alive between attempts.
type Sender struct {
	*httpsend.Base
	// hmac signs with the configured secret; nil when there is none.
	hmac      *endpoint.HMAC
	endpoints endpoint.Lookup
}

var _ notify.Sender = (*Sender)(nil)

// New returns a Sender for cfg, or an error for a secret that is not valid
// base64 after "whsec_" or a bad allow_networks entry.
func New(cfg *Config) (*Sender, error) {
	key, err := ParseSecret(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhook: secret: %w", err)
	}
	switch log := httpsend.LoggerOrDefault(cfg.HTTP.Logger); {
	case len(key) == 0:
		// Endpoints sign with their own secrets; only a notification with a
		// target of its own is signed with this one.
		log.Warn("webhook: senders.webhook.secret is empty; webhooks to a target, rather than an endpoint, go out unsigned")
	case len(key) < minKeySize:
		// Anyone who sees one signed request can guess a short key
		// offline, and then sign what they like.
		log.Warn("webhook: senders.webhook.secret's key is shorter than the 24 to 64 random bytes of Standard Webhooks, "+
			"which endpoints' keys must be; use whsec_$(openssl rand -base64 32)", "key_bytes", len(key))
	}
	base, err := httpsend.NewBase(&cfg.Common)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	s := &Sender{Base: base, endpoints: cfg.Endpoints}
	if len(key) > 0 {
		s.hmac = endpoint.NewHMAC(key)
	}
	return s, nil
}

// ParseSecret returns the signing key of a secret: the base64-decoded rest
// of a "whsec_" secret, or the bytes of any other string but an ed25519 key
// ("whsk_", "whpk_"), which only an endpoint with signing: ed25519 signs
// with: taken for a raw hmac key, it would sign what no receiver verifies.
func ParseSecret(secret string) ([]byte, error) {
	if strings.HasPrefix(secret, endpoint.PrefixSecretKey) || strings.HasPrefix(secret, endpoint.PrefixPublicKey) {
		return nil, fmt.Errorf("an ed25519 key signs only for an endpoint with signing: ed25519; this secret is an hmac one, %s followed by the key in base64 or a raw key", SecretPrefix)
	}
	rest, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("a %s secret must be followed by the key in base64", SecretPrefix)
	}
	return key, nil
}

// Send makes one attempt to deliver n to n.Target; see the package doc for
// the request and how its outcome is classified.
func (s *Sender) Send(ctx context.Context, n *notify.Notification) (notify.Response, error) {
	r := s.Rules(n)
	body, contentType, err := s.Templates.Body(n)
	if err != nil {
		return notify.Response{}, notify.Permanent(fmt.Errorf("webhook: %w", err))
	}
	target, ep, err := s.destination(ctx, n)
	if err != nil {
		return notify.Response{}, err
	}
	ctx, cancel := s.Begin(ctx, &r)
	defer cancel()

	now := s.Now()
	timestamp := strconv.FormatInt(now.Unix(), 10)
	req := httpsend.NewRequest(http.MethodPost, target)
	req.Body = body
	// Receivers de-duplicate by webhook-id, so a request cut off on a
	// connection the receiver closed can go again within the attempt.
	req.Replayable = true
	req.SetNotificationHeaders(n.Headers, HeaderID, HeaderTimestamp, HeaderSignature, HeaderAttempt)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set(HeaderAttempt, strconv.Itoa(n.Attempts))
	// Standard Webhooks spells its headers in lower case; some receivers
	// look them up as spelt.
	req.Header[HeaderID] = []string{n.ID}
	req.Header[HeaderTimestamp] = []string{timestamp}
	switch {
	case ep != nil:
		sig := ep.Sign(now, n.ID, timestamp, body)
		if sig == "" && len(ep.Secrets) > 0 {
			// The receiver expects signed requests: an unsigned one would
			// be refused, or worse, accepted. Retried, so that a secret
			// added meanwhile signs the next attempt.
			return notify.Response{}, fmt.Errorf("webhook: endpoint %q: every signing secret has expired; add a new one", n.Endpoint)
		}
		if sig != "" {
			req.Header[HeaderSignature] = []string{sig}
		}
	case s.hmac != nil:
		req.Header[HeaderSignature] = []string{s.hmac.Sign(n.ID, timestamp, body)}
	}

	res, err := s.Client.Do(ctx, req)
	if err != nil {
		return notify.Response{}, httpsend.ClassifyError(&r, fmt.Errorf("webhook: %w", err))
	}
	resp := res.Response()
	if err := httpsend.ClassifyStatus(&r, res, s.Now()); err != nil {
		return resp, fmt.Errorf("webhook: %w", err)
	}
	if err := httpsend.CheckSuccessBody(&r, res); err != nil {
		return resp, fmt.Errorf("webhook: %w", err)
	}
	return resp, nil
}

// destination returns where an attempt of n goes: n's target, or the URL of
// the endpoint n names, with that endpoint. An endpoint that no longer
// exists is permanent (an operator removed it; a replay after re-adding it
// delivers); one that cannot be looked up now is retried.
func (s *Sender) destination(ctx context.Context, n *notify.Notification) (string, *endpoint.Endpoint, error) {
	if n.Endpoint == "" {
		return n.Target, nil, nil
	}
	if s.endpoints == nil {
		return "", nil, notify.Permanent(fmt.Errorf("webhook: endpoint %q: no endpoints configured", n.Endpoint))
	}
	ep, err := s.endpoints.Endpoint(ctx, n.Endpoint)
	switch {
	case errors.Is(err, endpoint.ErrNotFound):
		return "", nil, notify.Permanent(fmt.Errorf("webhook: endpoint %q: %w", n.Endpoint, err))
	case err != nil:
		return "", nil, fmt.Errorf("webhook: endpoint %q: %w", n.Endpoint, err)
	}
	return ep.URL, ep, nil
}
