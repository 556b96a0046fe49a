// Package endpoint holds registered endpoints: named receivers, usually one
// merchant each, with their own URL, signing secrets, limits and health.
//
// A notification that names an endpoint instead of a target is delivered to
// the endpoint's URL and signed with the endpoint's secrets, both looked up
// on every attempt, so a secret rotated or a URL moved applies to the next
// attempt of every scheduled notification.
//
// # Signing
//
// Signing follows Standard Webhooks. An hmac endpoint's secrets are
// "whsec_<base64 key>" (24 to 64 bytes of key) and sign "v1,<base64
// HMAC-SHA256 of id.timestamp.body>"; an ed25519 endpoint's secrets are
// "whsk_<base64 key>" (the 32-byte seed or the 64-byte private key) and sign
// "v1a,<base64 ed25519 signature of id.timestamp.body>", which receivers
// verify with the public key, "whpk_<base64>", that PublicKey derives and
// the API publishes. Each secret may expire; every secret not yet expired
// signs, and the webhook-signature header carries all their signatures,
// space-separated, so a receiver verifying with either the old or the new
// secret accepts the request while a rotation overlaps.
//
// # Sources
//
// Endpoints come from the policies file (its endpoints: section, reloaded
// with it) and from the API (stored in Redis). A Registry serves both; the
// file wins on a name clash.
package endpoint

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/heraldhq/herald/notify"
)

// Signing schemes.
const (
	// SigningHMAC signs with HMAC-SHA256 (Standard Webhooks "v1"), the
	// default.
	SigningHMAC = "hmac"
	// SigningEd25519 signs with ed25519 (Standard Webhooks "v1a").
	SigningEd25519 = "ed25519"
)

// ErrNotFound means no endpoint has the given name.
var ErrNotFound = errors.New("endpoint not found")

// Endpoint is a named receiver. Its zero limits mean "no limit".
type Endpoint struct {
	// URL receives the notifications: http or https. Required.
	URL string `koanf:"url" json:"url"`
	// Secrets sign each request; see the package doc. Empty: requests go
	// out unsigned.
	Secrets []Secret `koanf:"secrets" json:"secrets,omitempty"`
	// Signing is hmac (the default) or ed25519.
	Signing string `koanf:"signing" json:"signing,omitempty"`
	// MaxInFlight bounds the attempts to this endpoint running at once,
	// across every dispatcher. 0: no bound.
	MaxInFlight int `koanf:"max_in_flight" json:"max_in_flight,omitempty"`
	// Rate bounds the attempts started per second, across every dispatcher:
	// 0 (no bound), or from MinRate to MaxRate.
	Rate float64 `koanf:"rate" json:"rate,omitempty"`
	// DisableAfter disables the endpoint once every attempt to it has failed
	// for this long: its notifications wait, unburnt, until it is enabled.
	// 0: never disabled.
	DisableAfter notify.Duration `koanf:"disable_after" json:"disable_after,omitempty"`
}

// Secret is one signing secret. Its value is never returned by the API nor
// written to a log or an error.
type Secret struct {
	// Value is the secret: "whsec_..." for hmac, "whsk_..." for ed25519.
	Value string `koanf:"value" json:"value"`
	// ExpiresAt, when set, is when the secret stops signing: give the old
	// secret of a rotation an expiry and add the new one, and both sign
	// until then.
	ExpiresAt *time.Time `koanf:"expires_at" json:"expires_at,omitempty"`
}

// Limits bounding an endpoint's fields.
const (
	// MaxSecrets is the most secrets an endpoint may hold at once.
	MaxSecrets = 10
	// MaxURLLen is the longest URL accepted.
	MaxURLLen = 2048
	// MinRate and MaxRate bound a rate other than 0, in requests per
	// second. MinRate is one request every 11.6 days; far slower rates
	// overflow the limiter's arithmetic (in Redis, and in Go durations),
	// so that every limit check would fail and the endpoint's
	// notifications would wait for ever.
	MinRate = 1e-6
	MaxRate = 1e6
)

// ValidName reports whether name is an acceptable endpoint name: shaped as
// a notification id, [A-Za-z0-9._:-]{1,128}.
func ValidName(name string) bool { return notify.ValidID(name) }

// Validate checks e and returns a *notify.FieldError naming the offending
// field ("secrets[1].value"). A secret's value is never part of the error.
func (e *Endpoint) Validate() error {
	switch {
	case len(e.URL) > MaxURLLen:
		return notify.Errorf("url", "is longer than %d bytes", MaxURLLen)
	case !notify.ValidHTTPURL(e.URL):
		return notify.Errorf("url", "must be an http or https URL (port 1 to 65535)")
	case e.Signing != "" && e.Signing != SigningHMAC && e.Signing != SigningEd25519:
		return notify.Errorf("signing", "must be hmac or ed25519")
	case len(e.Secrets) > MaxSecrets:
		return notify.Errorf("secrets", "has %d entries, more than %d", len(e.Secrets), MaxSecrets)
	case e.MaxInFlight < 0:
		return notify.Errorf("max_in_flight", "must not be negative (0: no limit)")
	case e.Rate != 0 && !(e.Rate >= MinRate && e.Rate <= MaxRate): // NaN fails both
		return notify.Errorf("rate", "must be 0 (no limit) or between %s and %s requests per second",
			strconv.FormatFloat(MinRate, 'f', -1, 64), strconv.FormatFloat(MaxRate, 'f', -1, 64))
	case e.DisableAfter < 0:
		return notify.Errorf("disable_after", "must not be negative (0: never)")
	}
	for i, s := range e.Secrets {
		if _, err := parseKey(e.signing(), s.Value); err != nil {
			return notify.Errorf(fmt.Sprintf("secrets[%d].value", i), "%v", err)
		}
	}
	return nil
}

// signing returns the signing scheme, hmac when unset.
func (e *Endpoint) signing() string {
	if e.Signing == "" {
		return SigningHMAC
	}
	return e.Signing
}

// Valid returns the secrets that sign at now: those without an expiry or
// expiring after now.
func (e *Endpoint) Valid(now time.Time) []Secret {
	var out []Secret
	for _, s := range e.Secrets {
		if s.ExpiresAt == nil || s.ExpiresAt.After(now) {
			out = append(out, s)
		}
	}
	return out
}
