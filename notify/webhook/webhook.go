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
//	webhook-signature  v1,<base64 HMAC-SHA256 of "id.timestamp.body">
//	Herald-Attempt     the 0-based attempt index, as in the history
//
// plus the notification's own headers (which cannot replace the ones above,
// Content-Type or User-Agent) and a User-Agent.
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
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
)

// SecretPrefix marks a Standard Webhooks secret, whose rest is the key in
// base64.
const SecretPrefix = "whsec_"

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
	// issues them, or any other string used as the key's bytes. Empty: no
	// webhook-signature header (warned at construction).
	Secret string
	httpsend.Common
}

// Sender delivers webhooks. It is safe for concurrent use, and keeps
// connections alive between attempts.
type Sender struct {
	*httpsend.Base
	key []byte
}

var _ notify.Sender = (*Sender)(nil)

// New returns a Sender for cfg, or an error for a secret that is not valid
// base64 after "whsec_" or a bad allow_networks entry.
func New(cfg *Config) (*Sender, error) {
	key, err := ParseSecret(cfg.Secret)
	if err != nil {
		return nil, err
	}
	if len(key) == 0 {
		httpsend.LoggerOrDefault(cfg.HTTP.Logger).Warn("webhook: no secret configured; requests go out unsigned")
	}
	base, err := httpsend.NewBase(&cfg.Common)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	return &Sender{Base: base, key: key}, nil
}

// ParseSecret returns the signing key of a secret: the base64-decoded rest
// of a "whsec_" secret, or the bytes of any other string.
func ParseSecret(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("webhook: secret: a %s secret must be followed by the key in base64", SecretPrefix)
	}
	return key, nil
}

// Send makes one attempt to deliver n to n.Target; see the package doc for
// the request and how its outcome is classified.
func (s *Sender) Send(ctx context.Context, n *notify.Notification) (notify.Response, error) {
	p := s.Policies().PolicyFor(n)
	body, contentType, err := s.Templates.Body(n)
	if err != nil {
		return notify.Response{}, notify.Permanent(fmt.Errorf("webhook: %w", err))
	}
	ctx, cancel := s.Begin(ctx, &p)
	defer cancel()

	timestamp := strconv.FormatInt(s.Now().Unix(), 10)
	req := s.Client.Request(ctx).SetBody(body)
	httpsend.SetHeaders(req, n.Headers, HeaderID, HeaderTimestamp, HeaderSignature, HeaderAttempt)
	req.SetHeader("Content-Type", contentType).
		SetHeaderVerbatim(HeaderID, n.ID).
		SetHeaderVerbatim(HeaderTimestamp, timestamp).
		SetHeader(HeaderAttempt, strconv.Itoa(n.Attempts))
	if len(s.key) > 0 {
		req.SetHeaderVerbatim(HeaderSignature, "v1,"+sign(s.key, n.ID, timestamp, body))
	}

	res, err := s.Client.Do(req, http.MethodPost, n.Target)
	if err != nil {
		return notify.Response{}, httpsend.ClassifyError(&p, fmt.Errorf("webhook: %w", err))
	}
	resp := res.Response()
	if err := httpsend.ClassifyStatus(&p, res, s.Now()); err != nil {
		return resp, fmt.Errorf("webhook: %w", err)
	}
	if !successBodyMatches(p.SuccessBody, res.Body) {
		return resp, fmt.Errorf("webhook: status %d without the success_body %q: %q", res.StatusCode, p.SuccessBody, resp.Body)
	}
	return resp, nil
}

// sign is the Standard Webhooks signature: base64 of HMAC-SHA256 over
// "id.timestamp.body".
func sign(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// successBodyMatches reports whether a response body acknowledges the
// delivery: always when want is empty; otherwise when the trimmed body
// equals want, or when both are JSON and decode to the same value.
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
	return reflect.DeepEqual(w, g)
}
