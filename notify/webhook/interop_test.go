package webhook_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/httpsend/httpsendtest"
	"github.com/heraldhq/herald/notify/webhook"
)

// TestStandardWebhooksVerifies delivers webhooks to a loopback receiver and
// checks them as a receiver would, with the official Standard Webhooks Go
// library: a "whsec_" secret is handed to it as it is, and a raw secret as
// its bytes (NewWebhookRaw), as the package doc tells receivers.
func TestStandardWebhooksVerifies(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name   string
		secret string
		// verifier builds the receiver's side from the secret.
		verifier func(secret string) (*standardwebhooks.Webhook, error)
	}{
		{name: "WhsecSecret", secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", verifier: standardwebhooks.NewWebhook},
		{name: "RawSecret", secret: "a raw secret, not base64!", verifier: func(secret string) (*standardwebhooks.Webhook, error) {
			return standardwebhooks.NewWebhookRaw([]byte(secret))
		}},
		{name: "RawSecretAsWhsec", secret: "a raw secret, not base64!", verifier: func(secret string) (*standardwebhooks.Webhook, error) {
			return standardwebhooks.NewWebhook(webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte(secret)))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(204, ""))
			sender, err := webhook.New(&webhook.Config{Secret: tt.secret, Common: httpsend.Common{HTTP: httpsend.Config{
				AllowNetworks: []string{"127.0.0.0/8"},
				Logger:        heraldtest.Logger(t),
			}}})
			require.NoError(t, err)
			// Several sends, at once, from one sender: each is signed on
			// its own, whatever the sender reuses between them.
			const sends = 4
			var wg sync.WaitGroup
			for i := range sends {
				wg.Go(func() {
					_, err := sender.Send(context.Background(), &notify.Notification{
						ID:       fmt.Sprintf("evt_2KWPBgLlAfxdpx2AI54pPJ85f4W%d", i),
						Topic:    "order-notify",
						Channel:  notify.ChannelWebhook,
						Target:   rec.URL() + "/hooks",
						Attempts: 2,
						Payload:  json.RawMessage(fmt.Sprintf(`{"out_trade_no":"T-%d","trade_status":"TRADE_SUCCESS","note":"caf\u00e9 \u2603"}`, i)),
					})
					assert.NoError(t, err)
				})
			}
			wg.Wait()

			reqs := rec.Requests()
			require.Len(t, reqs, sends)
			wh, err := tt.verifier(tt.secret)
			require.NoError(t, err)
			for _, req := range reqs {
				require.NoError(t, wh.Verify(req.Body, req.Header), "the official library refuses Herald's signature")
			}

			tampered := append([]byte(nil), reqs[0].Body...)
			tampered[len(tampered)-2] ^= 1
			require.Error(t, wh.Verify(tampered, reqs[0].Header), "a changed body must not verify")
		})
	}
}

// TestStandardWebhooksVerifiesEndpoints delivers to endpoints and checks the
// requests as their receivers would: while a rotation overlaps, both hmac
// secrets' signatures travel and the official library accepts either
// secret; an expired secret signs no more; an ed25519 endpoint's v1a
// signature verifies with the public key Herald publishes, over
// "id.timestamp.body" as Standard Webhooks defines it. An endpoint whose
// every secret has expired gets nothing rather than an unsigned request.
func TestStandardWebhooksVerifiesEndpoints(t *testing.T) {
	t.Parallel()

	secret := func(t *testing.T, n int) string {
		t.Helper()
		key := make([]byte, n)
		_, err := rand.Read(key)
		require.NoError(t, err)
		return endpoint.PrefixHMAC + base64.StdEncoding.EncodeToString(key)
	}
	seed := make([]byte, ed25519.SeedSize)
	_, err := rand.Read(seed)
	require.NoError(t, err)
	edSecret := endpoint.Secret{Value: endpoint.PrefixSecretKey + base64.StdEncoding.EncodeToString(seed)}

	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	old, current := secret(t, 32), secret(t, 24)
	rec := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(204, ""))
	endpoints := endpoint.Map{
		"rotating": {URL: rec.URL() + "/rotating", Secrets: []endpoint.Secret{{Value: old, ExpiresAt: &future}, {Value: current}}},
		"rotated":  {URL: rec.URL() + "/rotated", Secrets: []endpoint.Secret{{Value: old, ExpiresAt: &past}, {Value: current}}},
		"ed25519":  {URL: rec.URL() + "/ed25519", Signing: endpoint.SigningEd25519, Secrets: []endpoint.Secret{edSecret}},
		"lapsed":   {URL: rec.URL() + "/lapsed", Secrets: []endpoint.Secret{{Value: old, ExpiresAt: &past}}},
	}
	sender, err := webhook.New(&webhook.Config{Endpoints: endpoints, Common: httpsend.Common{HTTP: httpsend.Config{
		AllowNetworks: []string{"127.0.0.0/8"},
		Logger:        heraldtest.Logger(t),
	}}})
	require.NoError(t, err)

	send := func(t *testing.T, name string) httpsendtest.Request {
		t.Helper()
		_, err := sender.Send(context.Background(), &notify.Notification{
			ID: "evt_" + name, Topic: "order-notify", Channel: notify.ChannelWebhook, Endpoint: name,
			Payload: json.RawMessage(`{"out_trade_no":"T-1","note":"caf\u00e9"}`),
		})
		require.NoError(t, err)
		for _, r := range rec.Requests() {
			if r.Path == "/"+name {
				return r
			}
		}
		require.FailNow(t, "no request reached /"+name)
		return httpsendtest.Request{}
	}
	verifier := func(t *testing.T, secret string) *standardwebhooks.Webhook {
		t.Helper()
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		return wh
	}

	t.Run("RotationOverlaps", func(t *testing.T) {
		req := send(t, "rotating")
		require.Len(t, strings.Fields(req.Header.Get(webhook.HeaderSignature)), 2)
		require.NoError(t, verifier(t, old).Verify(req.Body, req.Header), "the old secret no longer verifies")
		require.NoError(t, verifier(t, current).Verify(req.Body, req.Header), "the new secret does not verify")
	})

	t.Run("ExpiredSecretSignsNoMore", func(t *testing.T) {
		req := send(t, "rotated")
		require.Len(t, strings.Fields(req.Header.Get(webhook.HeaderSignature)), 1)
		require.Error(t, verifier(t, old).Verify(req.Body, req.Header))
		require.NoError(t, verifier(t, current).Verify(req.Body, req.Header))
	})

	t.Run("Ed25519WithThePublishedKey", func(t *testing.T) {
		req := send(t, "ed25519")
		e := endpoints["ed25519"]
		published, ok := strings.CutPrefix(e.PublicKey(edSecret), endpoint.PrefixPublicKey)
		require.True(t, ok, "the public key is whpk_<base64>")
		pub, err := base64.StdEncoding.DecodeString(published)
		require.NoError(t, err)
		require.Len(t, pub, ed25519.PublicKeySize)

		sig, ok := strings.CutPrefix(req.Header.Get(webhook.HeaderSignature), "v1a,")
		require.True(t, ok, "signature %q", req.Header.Get(webhook.HeaderSignature))
		raw, err := base64.StdEncoding.DecodeString(sig)
		require.NoError(t, err)
		signed := req.Header.Get(webhook.HeaderID) + "." + req.Header.Get(webhook.HeaderTimestamp) + "." + string(req.Body)
		require.True(t, ed25519.Verify(pub, []byte(signed), raw), "the published key refuses the signature")
		require.False(t, ed25519.Verify(pub, append([]byte(signed), ' '), raw), "a changed body verified")
	})

	t.Run("EverySecretExpired", func(t *testing.T) {
		_, err := sender.Send(context.Background(), &notify.Notification{
			ID: "evt_lapsed", Topic: "order-notify", Channel: notify.ChannelWebhook, Endpoint: "lapsed",
			Payload: json.RawMessage(`{"out_trade_no":"T-1"}`),
		})
		require.ErrorContains(t, err, `endpoint "lapsed"`)
		require.ErrorContains(t, err, "expired")
		var perm *notify.PermanentError
		require.False(t, errors.As(err, &perm), "retried, so that a secret added meanwhile signs the next attempt: %v", err)
		for _, r := range rec.Requests() {
			require.NotEqual(t, "/lapsed", r.Path, "sent unsigned, with signing secrets configured")
		}
	})
}
