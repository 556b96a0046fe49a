package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// Secrets for these tests only: an hmac key of 32 bytes and an ed25519 seed.
const (
	apiSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw4mH1ZwYAXcs="
	apiSeed   = "whsk_bm90IGEgcmVhbCBrZXksIGp1c3QgYSB0ZXN0IHNlZWQ="
)

type endpointList struct {
	Endpoints []endpoint.View `json:"endpoints"`
}

func TestEndpoints(t *testing.T) {
	t.Parallel()

	t.Run("PutGetListDelete", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		body := map[string]any{"url": "https://m42.example/notify", "max_in_flight": 8, "rate": 50, "disable_after": "72h",
			"secrets": []map[string]any{{"value": apiSecret, "expires_at": "2030-01-01T00:00:00Z"}, {"value": apiSecret}}}
		status, raw := b.do(t, http.MethodPut, "/v1/endpoints/merchant-42", body)
		require.Equal(t, http.StatusCreated, status, "%s", raw)
		require.NotContains(t, string(raw), strings.TrimPrefix(apiSecret, "whsec_"), "a secret was returned")
		v := must[endpoint.View](t, b, http.StatusOK, http.MethodPut, "/v1/endpoints/merchant-42", body)
		require.Equal(t, endpoint.SourceAPI, v.Source)
		require.Equal(t, 8, v.MaxInFlight)
		require.Len(t, v.Secrets, 2)
		require.True(t, strings.HasPrefix(v.Secrets[0].ID, "sec_"))
		require.NotNil(t, v.Secrets[0].ExpiresAt)
		require.Empty(t, v.Secrets[0].PublicKey)

		status, raw = b.do(t, http.MethodGet, "/v1/endpoints/merchant-42", nil)
		require.Equal(t, http.StatusOK, status)
		require.NotContains(t, string(raw), strings.TrimPrefix(apiSecret, "whsec_"))
		require.Equal(t, "https://m42.example/notify", must[endpoint.View](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints/merchant-42", nil).URL)

		list := must[endpointList](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints", nil)
		require.Len(t, list.Endpoints, 1)

		// A notification may name it at once, and one naming no endpoint is
		// refused.
		must[notify.Notification](t, b, http.StatusCreated, http.MethodPost, "/v1/notifications",
			map[string]any{"topic": "orders", "endpoint": "merchant-42"})
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "endpoint", http.MethodPost, "/v1/notifications",
			map[string]any{"topic": "orders", "endpoint": "merchant-43"})
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "endpoint", http.MethodPost, "/v1/notifications",
			map[string]any{"topic": "orders", "endpoint": "merchant-42", "target": "https://m42.example"})

		status, _ = b.do(t, http.MethodDelete, "/v1/endpoints/merchant-42", nil)
		require.Equal(t, http.StatusNoContent, status)
		b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", http.MethodGet, "/v1/endpoints/merchant-42", nil)
		b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", http.MethodDelete, "/v1/endpoints/merchant-42", nil)
	})

	t.Run("Ed25519PublishesItsPublicKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		v := must[endpoint.View](t, b, http.StatusCreated, http.MethodPut, "/v1/endpoints/m",
			map[string]any{"url": "https://m.example", "signing": "ed25519", "secrets": []map[string]any{{"value": apiSeed}}})
		want := endpoint.Endpoint{Signing: endpoint.SigningEd25519}
		require.Equal(t, want.PublicKey(endpoint.Secret{Value: apiSeed}), v.Secrets[0].PublicKey)
		require.True(t, strings.HasPrefix(v.Secrets[0].PublicKey, endpoint.PrefixPublicKey))
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		for _, tt := range []struct {
			name, path, field string
			body              any
		}{
			{"MalformedSecret", "/v1/endpoints/m", "secrets[0].value", map[string]any{"url": "https://m.example", "secrets": []map[string]any{{"value": "whsec_hunter2 is not base64"}}}},
			{"NegativeRate", "/v1/endpoints/m", "rate", map[string]any{"url": "https://m.example", "rate": -1}},
			{"UnknownSigning", "/v1/endpoints/m", "signing", map[string]any{"url": "https://m.example", "signing": "rsa"}},
			{"NoURL", "/v1/endpoints/m", "url", map[string]any{"rate": 1}},
			{"UnknownField", "/v1/endpoints/m", "secret", map[string]any{"url": "https://m.example", "secret": "x"}},
			{"BadName", "/v1/endpoints/m%20n", "name", map[string]any{"url": "https://m.example"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				e := b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, tt.field, http.MethodPut, tt.path, tt.body)
				require.NotContains(t, e.Message, "hunter2", "the secret was echoed")
			})
		}
		require.Empty(t, must[endpointList](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints", nil).Endpoints, "a refused endpoint was stored")
	})

	t.Run("TheFileWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		// Registered over the API first, then the file defines the name too.
		must[endpoint.View](t, b, http.StatusCreated, http.MethodPut, "/v1/endpoints/m", map[string]any{"url": "https://api.example"})
		var err error
		b.policies, err = b.policies.WithEndpoints(map[string]endpoint.Endpoint{"m": {URL: "https://file.example"}})
		require.NoError(t, err)

		require.Equal(t, endpoint.SourceFile, must[endpoint.View](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints/m", nil).Source)
		e := b.requireError(t, http.StatusConflict, api.CodeConflict, "name", http.MethodPut, "/v1/endpoints/m", map[string]any{"url": "https://api.example"})
		require.Contains(t, e.Message, "policies file")
		list := must[endpointList](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints", nil).Endpoints
		require.Len(t, list, 2)
		require.Equal(t, endpoint.SourceFile, list[0].Source)
		require.False(t, list[0].Shadowed)
		require.Equal(t, endpoint.SourceAPI, list[1].Source)
		require.True(t, list[1].Shadowed, "the API's endpoint is not marked as shadowed by the file")

		// The stored one can still be removed; then only the file's is left,
		// which the API cannot remove.
		status, _ := b.do(t, http.MethodDelete, "/v1/endpoints/m", nil)
		require.Equal(t, http.StatusNoContent, status)
		b.requireError(t, http.StatusConflict, api.CodeConflict, "name", http.MethodDelete, "/v1/endpoints/m", nil)
	})
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	type answer struct {
		Topic, Endpoint string
		Paused          bool
		Resumed         *int
	}
	a := must[answer](t, b, http.StatusOK, http.MethodPost, "/v1/topics/orders/pause", nil)
	require.True(t, a.Paused)
	require.Equal(t, "orders", a.Topic)

	// A notification due while its topic is paused is shown as paused once
	// a dispatcher has parked it; until then it is just scheduled.
	body := map[string]any{"id": "parked", "topic": "orders"}
	n := must[notify.Notification](t, b, http.StatusCreated, http.MethodPost, "/v1/notifications", body)
	require.False(t, n.Paused)
	var items []*notify.Notification
	require.Eventually(t, func() bool { // due within the millisecond it is rounded up to
		var err error
		items, _, err = b.store.Reserve(t.Context(), store.QueuePush, heraldtest.AllShards(t, b.store), 10)
		require.NoError(t, err)
		return len(items) == 1
	}, 5*time.Second, time.Millisecond)
	_, err := b.store.Finish(t.Context(), []store.Finish{{Notification: items[0], Action: notify.ActionRelease,
		NextAt: store.ParkAt(store.PauseTopic, "orders")}}) // as a dispatcher parks it
	require.NoError(t, err)
	for _, parked := range []notify.Notification{
		must[notify.Notification](t, b, http.StatusOK, http.MethodGet, "/v1/notifications/parked", nil),
		must[notify.Notification](t, b, http.StatusOK, http.MethodPost, "/v1/notifications", body), // sent again
	} {
		require.True(t, parked.Paused)
		require.Nil(t, parked.NextAttemptAt)
	}

	a = must[answer](t, b, http.StatusOK, http.MethodPost, "/v1/topics/orders/resume", nil)
	require.False(t, a.Paused)
	require.NotNil(t, a.Resumed)

	b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", http.MethodPost, "/v1/endpoints/nobody/pause", nil)
	b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topic", http.MethodPost, "/v1/topics/Not%20A%20Topic/pause", nil)
	must[endpoint.View](t, b, http.StatusCreated, http.MethodPut, "/v1/endpoints/m", map[string]any{"url": "https://m.example"})
	a = must[answer](t, b, http.StatusOK, http.MethodPost, "/v1/endpoints/m/pause", nil)
	require.Equal(t, "m", a.Endpoint)
	require.True(t, must[endpoint.View](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints/m", nil).Paused)
	must[answer](t, b, http.StatusOK, http.MethodPost, "/v1/endpoints/m/resume", nil)
	require.False(t, must[endpoint.View](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints/m", nil).Paused)

	// An endpoint its disable_after disabled says so, and enable resumes it.
	require.Eventually(t, func() bool {
		disabled, err := b.store.EndpointFailed(t.Context(), "m", time.Millisecond)
		return err == nil && disabled
	}, 5*time.Second, 2*time.Millisecond)
	v := must[endpoint.View](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints/m", nil)
	require.True(t, v.Disabled)
	require.NotNil(t, v.DisabledAt)
	require.True(t, must[endpointList](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints", nil).Endpoints[0].Disabled)
	a = must[answer](t, b, http.StatusOK, http.MethodPost, "/v1/endpoints/m/enable", nil)
	require.NotNil(t, a.Resumed)
	v = must[endpoint.View](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints/m", nil)
	require.False(t, v.Disabled)
	require.Nil(t, v.FailingSince)
	b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", http.MethodPost, "/v1/endpoints/nobody/enable", nil)
}

// TestPauseHoldsOnceAnswered: once the pause has answered, no attempt of
// the paused topic starts, though a running dispatcher read a moment before
// that nothing was paused; what comes due meanwhile waits parked, and runs
// after the resume.
func TestPauseHoldsOnceAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	var mu sync.Mutex
	sent := map[string]int{}
	d, err := schedule.New(&schedule.Config{
		Store: b.store,
		Senders: map[string]notify.Sender{notify.ChannelWebhook: notify.SenderFunc(func(_ context.Context, n *notify.Notification) (notify.Response, error) {
			mu.Lock()
			defer mu.Unlock()
			sent[n.ID]++
			return notify.Response{StatusCode: http.StatusOK}, nil
		})},
		PoliciesFunc: func() *policy.Set { return b.policies },
		Logger:       testLogger(t),
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(d.Stop)
	sentTo := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return sent[id]
	}
	must[notify.Notification](t, b, http.StatusCreated, http.MethodPost, "/v1/notifications", map[string]any{"id": "before", "topic": "orders"})
	require.Eventually(t, func() bool { return sentTo("before") == 1 }, 5*time.Second, time.Millisecond)

	for round := range 3 {
		must[map[string]any](t, b, http.StatusOK, http.MethodPost, "/v1/topics/orders/pause", nil)
		var ids []string
		for i := range 5 {
			ids = append(ids, fmt.Sprintf("paused-%d-%d", round, i))
			must[notify.Notification](t, b, http.StatusCreated, http.MethodPost, "/v1/notifications", map[string]any{"id": ids[i], "topic": "orders"})
		}
		require.Eventually(t, func() bool {
			for _, id := range ids {
				if sentTo(id) == 0 && !must[notify.Notification](t, b, http.StatusOK, http.MethodGet, "/v1/notifications/"+id, nil).Paused {
					return false
				}
			}
			return true
		}, 5*time.Second, 5*time.Millisecond, "neither parked nor sent")
		for _, id := range ids {
			require.Zero(t, sentTo(id), "%s started after the pause answered", id)
		}
		must[map[string]any](t, b, http.StatusOK, http.MethodPost, "/v1/topics/orders/resume", nil)
		for _, id := range ids {
			require.Eventually(t, func() bool { return sentTo(id) == 1 }, 5*time.Second, time.Millisecond, "sent after the resume")
		}
	}
}

// TestEndpointListShowsHealth: the list of endpoints shows each one's
// health as GET of the one does, so that an operator finds the failing
// ones in one call.
func TestEndpointListShowsHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	for _, name := range []string{"fine", "flaky"} {
		must[endpoint.View](t, b, http.StatusCreated, http.MethodPut, "/v1/endpoints/"+name,
			map[string]any{"url": "https://" + name + ".example", "disable_after": "72h"})
	}
	disabled, err := b.store.EndpointFailed(t.Context(), "flaky", 72*time.Hour)
	require.NoError(t, err)
	require.False(t, disabled)
	one := must[endpoint.View](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints/flaky", nil)
	require.NotNil(t, one.FailingSince)

	list := must[endpointList](t, b, http.StatusOK, http.MethodGet, "/v1/endpoints", nil)
	require.Len(t, list.Endpoints, 2)
	require.Equal(t, "fine", list.Endpoints[0].Name)
	require.Nil(t, list.Endpoints[0].FailingSince)
	require.Equal(t, one, list.Endpoints[1], "the list shows what GET of the one does")
}

// TestListPauses: GET /v1/pauses names every paused topic and endpoint and
// every disabled endpoint, by kind then name, with since when; nothing
// paused is an empty list, and it needs the token as the pauses do.
func TestListPauses(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Tokens: []string{"sesame"}})
	status, out := b.do(t, http.MethodGet, "/v1/pauses", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"pauses": []}`, string(out))

	before := time.Now().Truncate(time.Millisecond)
	must[endpoint.View](t, b, http.StatusCreated, http.MethodPut, "/v1/endpoints/m", map[string]any{"url": "https://m.example"})
	must[map[string]any](t, b, http.StatusOK, http.MethodPost, "/v1/endpoints/m/pause", nil)
	must[map[string]any](t, b, http.StatusOK, http.MethodPost, "/v1/topics/orders/pause", nil)
	require.Eventually(t, func() bool {
		disabled, err := b.store.EndpointFailed(t.Context(), "a", time.Millisecond)
		return err == nil && disabled
	}, 5*time.Second, 2*time.Millisecond)
	after := time.Now()

	type pause struct {
		Kind, Name string
		Since      time.Time
	}
	got := must[struct{ Pauses []pause }](t, b, http.StatusOK, http.MethodGet, "/v1/pauses", nil).Pauses
	require.Len(t, got, 3)
	var kinds []string
	for _, p := range got {
		kinds = append(kinds, p.Kind+" "+p.Name)
		require.False(t, p.Since.Before(before) || p.Since.After(after), "%s %s since %s", p.Kind, p.Name, p.Since)
		require.Equal(t, time.UTC, p.Since.Location())
	}
	require.Equal(t, []string{"disabled a", "endpoint m", "topic orders"}, kinds)

	req, err := http.NewRequest(http.MethodGet, b.http.URL+"/v1/pauses", nil)
	require.NoError(t, err)
	resp, err := b.http.Client().Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// TestPauseHoldsForWhatWasReservedAhead: several dispatchers, each with one
// slow worker and notifications reserved ahead of it, are busy with a
// backlog when the topic is paused. Once the pause has answered, none of
// them may start another attempt, reserved before the pause or not.
func TestPauseHoldsForWhatWasReservedAhead(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	var mu sync.Mutex
	var started []time.Time
	send := notify.SenderFunc(func(ctx context.Context, n *notify.Notification) (notify.Response, error) {
		mu.Lock()
		started = append(started, time.Now())
		mu.Unlock()
		select {
		case <-time.After(40 * time.Millisecond):
		case <-ctx.Done():
		}
		return notify.Response{StatusCode: http.StatusOK}, nil
	})
	for range 3 {
		d, err := schedule.New(&schedule.Config{
			Store:        b.store,
			Senders:      map[string]notify.Sender{notify.ChannelWebhook: send},
			PoliciesFunc: func() *policy.Set { return b.policies },
			Concurrency:  1,
			Prefetch:     20,
			Logger:       testLogger(t),
		})
		require.NoError(t, err)
		require.NoError(t, d.Start(t.Context()))
		t.Cleanup(d.Stop)
	}
	for i := range 200 {
		must[notify.Notification](t, b, http.StatusCreated, http.MethodPost, "/v1/notifications", map[string]any{"id": fmt.Sprintf("n-%d", i), "topic": "orders"})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(started)
	}
	require.Eventually(t, func() bool { return count() >= 10 }, 10*time.Second, time.Millisecond)

	must[map[string]any](t, b, http.StatusOK, http.MethodPost, "/v1/topics/orders/pause", nil)
	answered := time.Now()
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	var late []time.Duration
	for _, at := range started {
		if at.After(answered) {
			late = append(late, at.Sub(answered))
		}
	}
	require.Empty(t, late, "attempts started this long after the pause answered")
}
