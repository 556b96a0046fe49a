package api_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
)

// apiSeed2 is a second ed25519 seed, the new key of a rotation.
const apiSeed2 = "whsk_YSBzZWNvbmQgdGVzdCBzZWVkIG9mIDMyIGJ5dGVzISE="

// delivered is what a loopback merchant received.
type delivered struct {
	mu      sync.Mutex
	headers []http.Header
	body    [][]byte
}

// merchant starts a loopback receiver answering 200 after hold.
func merchant(t *testing.T, hold time.Duration) (*httptest.Server, *delivered) {
	t.Helper()
	got := &delivered{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got.mu.Lock()
		got.headers, got.body = append(got.headers, r.Header.Clone()), append(got.body, body)
		got.mu.Unlock()
		time.Sleep(hold)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func (d *delivered) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.headers)
}

// startDispatchers runs count dispatchers of one worker each, reserving up
// to 20 ahead, with the real webhook sender reaching loopback endpoints
// registered over the API; wrap, when not nil, wraps that sender.
func (b *testBundle) startDispatchers(t *testing.T, count int, wrap func(notify.Sender) notify.Sender) {
	t.Helper()
	registry := endpoint.NewRegistry(&endpoint.RegistryConfig{Source: b.store})
	policies := func() *policy.Set { return b.policies }
	hook, err := webhook.New(&webhook.Config{Endpoints: registry, Common: httpsend.Common{Rules: policy.CurrentRules(policies),
		HTTP: httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}, Logger: testLogger(t)}}})
	require.NoError(t, err)
	var sender notify.Sender = hook
	if wrap != nil {
		sender = wrap(hook)
	}
	for range count {
		d, err := schedule.New(&schedule.Config{Store: b.store, Senders: map[string]notify.Sender{notify.ChannelWebhook: sender},
			PoliciesFunc: policies, Endpoints: registry, Concurrency: 1, Prefetch: 20, Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, d.Start(t.Context()))
		t.Cleanup(d.Stop)
	}
}

// TestEd25519KeysFromTheAPIVerifyTheRequest: while an ed25519 rotation
// overlaps, the public keys GET /v1/endpoints/{name} publishes verify the
// request the merchant actually receives, one v1a signature each.
func TestEd25519KeysFromTheAPIVerifyTheRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	srv, got := merchant(t, 0)
	must[endpoint.View](t, b, http.StatusCreated, http.MethodPut, "/v1/endpoints/m", map[string]any{"url": srv.URL,
		"signing": "ed25519", "secrets": []map[string]any{
			{"value": apiSeed, "expires_at": time.Now().Add(time.Hour).Format(time.RFC3339)}, {"value": apiSeed2}}})
	view := must[endpoint.View](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints/m", nil)
	require.Len(t, view.Secrets, 2)
	b.startDispatchers(t, 1, nil)
	must[notify.Notification](t, b, http.StatusCreated, http.MethodPost, "/v1/notifications",
		map[string]any{"id": "signed", "topic": "orders", "endpoint": "m", "payload": map[string]any{"order": 7}})
	require.Eventually(t, func() bool { return got.count() == 1 }, 10*time.Second, 5*time.Millisecond)

	got.mu.Lock()
	h, body := got.headers[0], got.body[0]
	got.mu.Unlock()
	msg := []byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "." + string(body))
	sigs := strings.Fields(h.Get("webhook-signature"))
	require.Len(t, sigs, 2, "both keys of the rotation sign")
	for i, s := range view.Secrets {
		pub, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s.PublicKey, endpoint.PrefixPublicKey))
		require.NoError(t, err)
		verified := 0
		for _, sig := range sigs {
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1a,"))
			require.NoError(t, err)
			if ed25519.Verify(pub, msg, raw) {
				verified++
			}
		}
		require.Equal(t, 1, verified, "published key %d verifies %d of the request's signatures", i, verified)
	}
}

// TestEndpointPauseHoldsForWhatWasReservedAhead: once POST
// /v1/endpoints/{name}/pause has answered, no attempt to the endpoint
// starts on any of three dispatchers, though each has reserved
// notifications ahead and the endpoint's max_in_flight has given some back
// to wait; after the resume every one is delivered, none having lost an
// attempt to the pause.
func TestEndpointPauseHoldsForWhatWasReservedAhead(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	srv, got := merchant(t, 30*time.Millisecond)
	must[endpoint.View](t, b, http.StatusCreated, http.MethodPut, "/v1/endpoints/m", map[string]any{"url": srv.URL, "max_in_flight": 2})
	var mu sync.Mutex
	var started []time.Time
	b.startDispatchers(t, 3, func(next notify.Sender) notify.Sender {
		return notify.SenderFunc(func(ctx context.Context, n *notify.Notification) (notify.Response, error) {
			mu.Lock()
			started = append(started, time.Now())
			mu.Unlock()
			return next.Send(ctx, n)
		})
	})
	const total = 80
	for i := range total {
		must[notify.Notification](t, b, http.StatusCreated, http.MethodPost, "/v1/notifications",
			map[string]any{"id": fmt.Sprint("p", i), "topic": "orders", "endpoint": "m"})
	}
	require.Eventually(t, func() bool { return got.count() >= 10 }, 10*time.Second, 5*time.Millisecond)

	must[map[string]any](t, b, http.StatusOK, http.MethodPost, "/v1/endpoints/m/pause", nil)
	answered := time.Now()
	time.Sleep(time.Second)
	mu.Lock()
	var late []time.Duration
	for _, at := range started {
		if at.After(answered) {
			late = append(late, at.Sub(answered))
		}
	}
	mu.Unlock()
	require.Empty(t, late, "attempts started this long after the pause answered")
	require.Less(t, got.count(), total, "everything was delivered before the pause: nothing tested")

	must[map[string]any](t, b, http.StatusOK, http.MethodPost, "/v1/endpoints/m/resume", nil)
	require.Eventually(t, func() bool { return got.count() >= total }, 20*time.Second, 10*time.Millisecond)
	for i := range total {
		var rec notify.Notification
		require.Eventually(t, func() bool {
			rec = must[notify.Notification](t, b, http.StatusOK, http.MethodGet, fmt.Sprint("/v1/notifications/p", i), nil)
			return rec.State == notify.StateSucceeded
		}, 10*time.Second, 5*time.Millisecond, "p%d never succeeded", i)
		require.Len(t, rec.History, 1, "p%d: the pause cost an attempt", i)
	}
	require.Equal(t, total, got.count(), "a notification delivered twice")
}
