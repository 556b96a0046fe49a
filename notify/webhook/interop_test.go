package webhook_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
