package endpoint

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"time"
)

// Prefixes of Standard Webhooks keys.
const (
	// PrefixHMAC starts an hmac secret.
	PrefixHMAC = "whsec_"
	// PrefixSecretKey starts an ed25519 secret (private) key.
	PrefixSecretKey = "whsk_"
	// PrefixPublicKey starts an ed25519 public key.
	PrefixPublicKey = "whpk_"
)

// Bounds of an hmac key, in bytes, as Standard Webhooks recommends.
const (
	minHMACKey = 24
	maxHMACKey = 64
)

// parseKey decodes a secret under a signing scheme: the HMAC key, or the
// ed25519 private key. Its errors never contain the value.
func parseKey(signing, value string) ([]byte, error) {
	prefix := PrefixHMAC
	if signing == SigningEd25519 {
		prefix = PrefixSecretKey
	}
	rest, ok := strings.CutPrefix(value, prefix)
	if !ok {
		return nil, fmt.Errorf("must start with %s followed by the key in base64", prefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("must be %s followed by the key in base64; the rest is not base64", prefix)
	}
	if signing != SigningEd25519 {
		if len(key) < minHMACKey || len(key) > maxHMACKey {
			return nil, fmt.Errorf("must hold a key of %d to %d bytes, not %d", minHMACKey, maxHMACKey, len(key))
		}
		return key, nil
	}
	switch len(key) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(key), nil
	case ed25519.PrivateKeySize:
		priv := ed25519.PrivateKey(key)
		// The second half of a private key is its public key; one that does
		// not match would sign with one key and publish another.
		if !priv.Public().(ed25519.PublicKey).Equal(ed25519.NewKeyFromSeed(priv.Seed()).Public()) {
			return nil, errors.New("is not a consistent ed25519 private key")
		}
		return key, nil
	}
	return nil, fmt.Errorf("must hold a %d-byte ed25519 seed or a %d-byte private key, not %d bytes",
		ed25519.SeedSize, ed25519.PrivateKeySize, len(key))
}

// Sign returns the webhook-signature header of a request to e at now: one
// signature per valid secret, space-separated, "v1,<base64>" for hmac or
// "v1a,<base64>" for ed25519, over "id.timestamp.body". It is empty when no
// secret is valid. e must have passed Validate.
func (e *Endpoint) Sign(now time.Time, id, timestamp string, body []byte) string {
	var sigs []string
	// msg is "id.timestamp.body" whole, which ed25519 needs; built once,
	// however many secrets a rotation leaves valid.
	var msg []byte
	for _, s := range e.Valid(now) {
		key, err := parseKey(e.signing(), s.Value)
		if err != nil {
			continue // refused by Validate; never signs
		}
		if e.signing() == SigningEd25519 {
			if msg == nil {
				msg = make([]byte, 0, len(id)+len(timestamp)+2+len(body))
				msg = append(append(append(append(append(msg, id...), '.'), timestamp...), '.'), body...)
			}
			sigs = append(sigs, "v1a,"+base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg)))
			continue
		}
		sigs = append(sigs, signHMAC(hmac.New(sha256.New, key), id, timestamp, body))
	}
	return strings.Join(sigs, " ")
}

// HMAC signs with one hmac key, reusing the keyed hash between requests
// instead of deriving it from the key for each one. It is safe for
// concurrent use.
type HMAC struct{ macs sync.Pool }

// NewHMAC returns a signer for key, which it copies.
func NewHMAC(key []byte) *HMAC {
	key = bytes.Clone(key)
	h := &HMAC{}
	h.macs.New = func() any { return hmac.New(sha256.New, key) }
	return h
}

// Sign returns the Standard Webhooks "v1,<base64>" signature of
// "id.timestamp.body".
func (h *HMAC) Sign(id, timestamp string, body []byte) string {
	mac := h.macs.Get().(hash.Hash)
	defer h.macs.Put(mac)
	mac.Reset()
	return signHMAC(mac, id, timestamp, body)
}

// signHMAC writes "id.timestamp.body" to a fresh or reset mac piece by
// piece, so that no copy of the body is made, and returns "v1,<base64>".
func signHMAC(mac hash.Hash, id, timestamp string, body []byte) string {
	_, _ = io.WriteString(mac, id)
	_, _ = mac.Write(dot)
	_, _ = io.WriteString(mac, timestamp)
	_, _ = mac.Write(dot)
	_, _ = mac.Write(body)
	var sum [sha256.Size]byte
	var sig [3 + (sha256.Size+2)/3*4]byte
	copy(sig[:], "v1,")
	base64.StdEncoding.Encode(sig[3:], mac.Sum(sum[:0]))
	return string(sig[:])
}

var dot = []byte{'.'}

// PublicKey returns the Standard Webhooks public key ("whpk_<base64>") of an
// ed25519 secret, which receivers verify signatures with, or "" for an hmac
// secret or one that does not parse.
func (e *Endpoint) PublicKey(s Secret) string {
	if e.signing() != SigningEd25519 {
		return ""
	}
	key, err := parseKey(SigningEd25519, s.Value)
	if err != nil {
		return ""
	}
	return PrefixPublicKey + base64.StdEncoding.EncodeToString(ed25519.PrivateKey(key).Public().(ed25519.PublicKey))
}

// SecretID names a secret without revealing it: "sec_" and the start of
// its SHA-256, the same for the same value, so an operator can tell which
// secrets an endpoint holds and which one a rotation replaced.
func SecretID(s Secret) string {
	sum := sha256.Sum256([]byte(s.Value))
	return "sec_" + hex.EncodeToString(sum[:8])
}
