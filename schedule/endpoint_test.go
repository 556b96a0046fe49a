package schedule_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// Standard Webhooks secrets for these tests only.
const (
	secretA   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw4mH1ZwYAXcs="
	secretB   = "whsec_dGhpcyBpcyBhbm90aGVyIHNlY3JldCBvZiAzMiBieXRlcw=="
	secretNew = "whsec_YSB0aGlyZCBzZWNyZXQsIHRoZSByb3RhdGVkIG9uZSEh"
	// edSeed is an ed25519 seed (32 bytes).
	edSeed = "whsk_bm90IGEgcmVhbCBrZXksIGp1c3QgYSB0ZXN0IHNlZWQ="
)

// startEndpoints runs a dispatcher whose webhook sender delivers to the
// endpoints of b.policies.
func (b *testBundle) startEndpoints(t *testing.T) {
	t.Helper()
	policies := func() *policy.Set { return b.policies }
	hook, err := webhook.New(&webhook.Config{
		Endpoints: endpoint.NewRegistry(&endpoint.RegistryConfig{
			FileFunc: func() map[string]endpoint.Endpoint { return b.policies.Endpoints }, Source: b.store}),
		Common: httpsend.Common{Rules: policy.CurrentRules(policies), HTTP: httpsend.Config{
			AllowNetworks: []string{"127.0.0.0/8"}, Logger: heraldtest.Logger(t)}},
	})
	require.NoError(t, err)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: hook}})
}

func verifyWith(t *testing.T, secret string, r received) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	return wh.Verify(r.body, r.headers)
}

func (b *testBundle) enqueueEndpoint(t *testing.T, id, name string) {
	t.Helper()
	_, _, err := b.store.Enqueue(context.Background(), b.endpointNotification(t, id, name), false)
	require.NoError(t, err)
}

// enqueueEndpointBatch enqueues prefix0..prefix{count-1}, all to endpoint
// name, in one call.
func (b *testBundle) enqueueEndpointBatch(t *testing.T, prefix, name string, count int) {
	t.Helper()
	reqs := make([]store.EnqueueRequest, count)
	for i := range reqs {
		reqs[i].Notification = b.endpointNotification(t, fmt.Sprint(prefix, i), name)
	}
	res, err := b.store.EnqueueBatch(context.Background(), reqs)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
}

// endpointNotification resolves id, addressed to endpoint name, under the
// "fast" policy.
func (b *testBundle) endpointNotification(t *testing.T, id, name string) *notify.Notification {
	t.Helper()
	n, err := b.policies.Resolve(&notify.Request{ID: id, Topic: "orders", Endpoint: name, Policy: "fast",
		Payload: json.RawMessage(`{"order":1}`)}, time.Now(), 0)
	require.NoError(t, err)
	return n
}

func TestEndpointSigning(t *testing.T) {
	t.Parallel()
	ok := func(_ int, w http.ResponseWriter) { _, _ = io.WriteString(w, "ok") }
	// Each receiver's requests are verified after delivery with the
	// official Standard Webhooks library, as the receiver would.

	t.Run("EachReceiverVerifiesWithItsOwnSecret", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rcvA, rcvB := newReceiver(t, ok), newReceiver(t, ok)
		var err error
		b.policies, err = b.policies.WithEndpoints(map[string]endpoint.Endpoint{
			"merchant-a": {URL: rcvA.URL, Secrets: []endpoint.Secret{{Value: secretA}}},
			"merchant-b": {URL: rcvB.URL, Secrets: []endpoint.Secret{{Value: secretB}}},
		})
		require.NoError(t, err)
		b.startEndpoints(t)
		b.enqueueEndpoint(t, "to-a", "merchant-a")
		b.enqueueEndpoint(t, "to-b", "merchant-b")
		b.waitState(t, "to-a", notify.StateSucceeded)
		b.waitState(t, "to-b", notify.StateSucceeded)

		a, bb := rcvA.requests(), rcvB.requests()
		require.Len(t, a, 1)
		require.Len(t, bb, 1)
		require.Equal(t, "to-a", a[0].headers.Get("webhook-id"))
		require.NoError(t, verifyWith(t, secretA, a[0]))
		require.Error(t, verifyWith(t, secretB, a[0]), "merchant b's secret verifies merchant a's webhook")
		require.NoError(t, verifyWith(t, secretB, bb[0]))
		require.Error(t, verifyWith(t, secretA, bb[0]), "merchant a's secret verifies merchant b's webhook")
	})

	t.Run("RotationOverlapCarriesBothSignatures", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rcv := newReceiver(t, ok)
		later := time.Now().Add(time.Hour)
		var err error
		b.policies, err = b.policies.WithEndpoints(map[string]endpoint.Endpoint{
			"merchant": {URL: rcv.URL, Secrets: []endpoint.Secret{{Value: secretA, ExpiresAt: &later}, {Value: secretNew}}},
		})
		require.NoError(t, err)
		b.startEndpoints(t)
		b.enqueueEndpoint(t, "rotating", "merchant")
		b.waitState(t, "rotating", notify.StateSucceeded)

		reqs := rcv.requests()
		require.Len(t, reqs, 1)
		sigs := strings.Split(reqs[0].headers.Get("webhook-signature"), " ")
		require.Len(t, sigs, 2)
		require.NoError(t, verifyWith(t, secretA, reqs[0]), "the old secret does not verify")
		require.NoError(t, verifyWith(t, secretNew, reqs[0]), "the new secret does not verify")
	})

	t.Run("Ed25519VerifiesWithThePublishedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rcv := newReceiver(t, ok)
		ep := endpoint.Endpoint{URL: rcv.URL, Signing: endpoint.SigningEd25519, Secrets: []endpoint.Secret{{Value: edSeed}}}
		var err error
		b.policies, err = b.policies.WithEndpoints(map[string]endpoint.Endpoint{"merchant": ep})
		require.NoError(t, err)
		b.startEndpoints(t)
		b.enqueueEndpoint(t, "asym", "merchant")
		b.waitState(t, "asym", notify.StateSucceeded)

		reqs := rcv.requests()
		require.Len(t, reqs, 1)
		pub, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(ep.PublicKey(ep.Secrets[0]), endpoint.PrefixPublicKey))
		require.NoError(t, err)
		sig, found := strings.CutPrefix(reqs[0].headers.Get("webhook-signature"), "v1a,")
		require.True(t, found)
		raw, err := base64.StdEncoding.DecodeString(sig)
		require.NoError(t, err)
		h := reqs[0].headers
		msg := h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "." + string(reqs[0].body)
		require.True(t, ed25519.Verify(pub, []byte(msg), raw), "the published key does not verify the signature")
	})

	t.Run("RegisteredOverTheAPI", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rcv := newReceiver(t, ok)
		_, err := b.store.PutEndpoint(context.Background(), "stored", &endpoint.Endpoint{URL: rcv.URL, Secrets: []endpoint.Secret{{Value: secretB}}})
		require.NoError(t, err)
		b.startEndpoints(t)
		b.enqueueEndpoint(t, "via-api", "stored")
		b.waitState(t, "via-api", notify.StateSucceeded)
		reqs := rcv.requests()
		require.Len(t, reqs, 1)
		require.NoError(t, verifyWith(t, secretB, reqs[0]))
	})

	t.Run("RemovedEndpointIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var err error
		b.policies, err = b.policies.WithEndpoints(map[string]endpoint.Endpoint{"gone": {URL: "https://gone.example"}})
		require.NoError(t, err)
		b.enqueueEndpoint(t, "orphan", "gone")
		b.policies, err = b.policies.WithEndpoints(nil)
		require.NoError(t, err)
		b.startEndpoints(t)
		rec := b.waitState(t, "orphan", notify.StateDead)
		require.Len(t, rec.History, 1)
		require.Contains(t, rec.History[0].Error, `endpoint "gone"`)
	})
}
