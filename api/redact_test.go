package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// TestCredentialHeadersRedacted enqueues a notification that carries its
// receiver's credentials as headers: no API answer shows their values, and
// the other headers are shown as given. (That they are still sent is
// TestServe's CredentialHeadersStillSent.)
func TestCredentialHeadersRedacted(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	headers := map[string]string{
		"Authorization": "Bearer s3cr3t-token", "Cookie": "session=s3cr3t-cookie",
		"proxy-authorization": "Basic s3cr3t-proxy", "Set-Cookie": "a=s3cr3t-set", "X-Shop": "42",
		"x-api-key": "s3cr3t-key", "Api-Key": "s3cr3t-key2", "X-Auth-Token": "s3cr3t-auth", "x-access-token": "s3cr3t-access",
		// Receivers name their own: these say what they hold.
		"X-Gitlab-Token": "s3cr3t-gitlab", "Private-Token": "s3cr3t-private", "X-Webhook-Secret": "s3cr3t-hook",
		"X-Signature-Key": "s3cr3t-sigkey", "X-Merchant-Password": "s3cr3t-pass", "Idempotency-Key": "order-42",
	}
	want := map[string]any{
		"Authorization": "[redacted]", "Cookie": "[redacted]", "proxy-authorization": "[redacted]",
		"Set-Cookie": "[redacted]", "X-Shop": "42",
		"x-api-key": "[redacted]", "Api-Key": "[redacted]", "X-Auth-Token": "[redacted]", "x-access-token": "[redacted]",
		"X-Gitlab-Token": "[redacted]", "Private-Token": "[redacted]", "X-Webhook-Secret": "[redacted]",
		"X-Signature-Key": "[redacted]", "X-Merchant-Password": "[redacted]", "Idempotency-Key": "order-42",
	}
	type record struct {
		Headers map[string]any `json:"headers"`
	}
	body := map[string]any{"id": "cred-1", "topic": "jobs", "payload": map[string]int{"a": 1}, "headers": headers}
	require.Equal(t, want, must[record](t, b, http.StatusCreated, "POST", "/v1/notifications", body).Headers, "enqueue")
	require.Equal(t, want, must[record](t, b, http.StatusOK, "POST", "/v1/notifications", body).Headers, "enqueue again")
	require.Equal(t, want, must[record](t, b, http.StatusOK, "GET", "/v1/notifications/cred-1", nil).Headers, "get")
	reserved := must[struct{ Notifications []record }](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=1", nil)
	require.Len(t, reserved.Notifications, 1)
	require.Equal(t, want, reserved.Notifications[0].Headers, "reserve")
}

// TestCredentialURLsRedacted: credentials written into a URL, a webhook's
// target or an endpoint's, in its user information or its query, are not
// shown either.
func TestCredentialURLsRedacted(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	type record struct {
		Target string `json:"target"`
		URL    string `json:"url"`
	}
	body := map[string]any{"id": "cred-url", "topic": "orders", "target": "https://shop:s3cr3t@merchant.example/notify"}
	got := must[record](t, b, http.StatusCreated, "POST", "/v1/notifications", body)
	require.Equal(t, "https://xxxxx@merchant.example/notify", got.Target)
	got = must[record](t, b, http.StatusOK, "GET", "/v1/notifications/cred-url", nil)
	require.Equal(t, "https://xxxxx@merchant.example/notify", got.Target)
	got = must[record](t, b, http.StatusCreated, "PUT", "/v1/endpoints/m", map[string]any{"url": "https://s3cr3t-token@m.example/hook"})
	require.Equal(t, "https://xxxxx@m.example/hook", got.URL)

	body = map[string]any{"id": "cred-query", "topic": "orders", "target": "https://merchant.example/notify?shop=42&access_token=s3cr3t"}
	got = must[record](t, b, http.StatusCreated, "POST", "/v1/notifications", body)
	require.Equal(t, "https://merchant.example/notify?shop=42&access_token=xxxxx", got.Target)
	got = must[record](t, b, http.StatusOK, "GET", "/v1/notifications/cred-query", nil)
	require.Equal(t, "https://merchant.example/notify?shop=42&access_token=xxxxx", got.Target)
	got = must[record](t, b, http.StatusCreated, "PUT", "/v1/endpoints/q", map[string]any{"url": "https://m.example/hook?sig=s3cr3t"})
	require.Equal(t, "https://m.example/hook?sig=xxxxx", got.URL)
	got = must[record](t, b, http.StatusOK, "GET", "/v1/endpoints/q", nil)
	require.Equal(t, "https://m.example/hook?sig=xxxxx", got.URL)
}

// TestAnswersAreNotCached: the API's answers carry payloads (phone
// numbers, names, what a receiver answered), which no cache between the
// API and its caller, nor a browser, may keep: each says no-store, an
// error too.
func TestAnswersAreNotCached(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Tokens: []string{"t0ken-of-thirty-two-characters-xx"}})
	must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications",
		map[string]any{"id": "cache-1", "topic": "jobs", "payload": map[string]string{"phone": "+14155550100"}})
	for _, id := range []string{"cache-2", "cache-3"} {
		must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": id, "topic": "acks", "channel": "pull"})
	}
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/acks/reserve?max=2&wait=5s", nil)
	require.Len(t, res.Notifications, 2)
	receipt := func(i int) string { return `{"receipt":"` + res.Notifications[i].Receipt + `"}` }
	for _, tt := range []struct{ method, path, body string }{
		{"GET", "/v1/notifications/cache-1", ""},
		{"GET", "/v1/notifications/nope", ""},
		{"GET", "/v1/dead", ""},
		{"POST", "/v1/topics/jobs/reserve?max=1", ""},
		{"GET", "/v1/stats", ""},
		// 204s too.
		{"POST", "/v1/notifications/" + res.Notifications[0].ID + "/ack", receipt(0)},
		{"POST", "/v1/notifications/" + res.Notifications[1].ID + "/release", receipt(1)},
	} {
		req, err := http.NewRequest(tt.method, b.http.URL+tt.path, strings.NewReader(tt.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+b.token)
		resp, err := b.http.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "%s %s", tt.method, tt.path)
	}
}

// TestHistoryHidesCredentials: an attempt's error recorded with the
// notification's own credentials in it, as a handler of a Go worker may
// write one or as an older Herald recorded a refused webhook's target, is
// shown with "[redacted]" in their place, as the record's target and
// headers are.
func TestHistoryHidesCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	const (
		target = "https://merchant.example/notify?shop=42&access_token=s3cr3t-query-token"
		bearer = "s3cr3t-bearer-token"
	)
	must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{
		"id": "cred-hist", "topic": "orders", "target": target,
		"headers": map[string]string{"Authorization": "Bearer " + bearer},
	})
	ctx := context.Background()
	var reserved []*notify.Notification
	require.Eventually(t, func() bool {
		var err error
		reserved, _, err = b.store.Reserve(ctx, store.QueuePush, []int{0, 1, 2, 3}, 1)
		require.NoError(t, err)
		return len(reserved) == 1
	}, 5*time.Second, 10*time.Millisecond)
	n := reserved[0]
	now := time.Now()
	failed := fmt.Errorf("webhook: Post %q (Authorization: Bearer %s): dial tcp: connection refused", target, bearer)
	_, err := b.store.Finish(ctx, []store.Finish{{
		Notification: n, Action: notify.ActionRetry, NextAt: now.Add(time.Hour),
		Attempt: notify.NewAttempt(n, now, now, notify.Response{}, failed, notify.OutcomeRetry),
	}})
	require.NoError(t, err)

	rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/cred-hist", nil)
	require.Len(t, rec.History, 1)
	require.Equal(t, `webhook: Post "https://merchant.example/notify?shop=42&access_token=[redacted]" (Authorization: [redacted]): dial tcp: connection refused`,
		rec.History[0].Error)
	stored, err := b.store.Get(ctx, "cred-hist")
	require.NoError(t, err)
	require.Contains(t, stored.History[0].Error, bearer, "the store keeps what was recorded")
}
