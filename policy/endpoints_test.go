package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
)

// A Standard Webhooks secret of 32 bytes, for these tests only.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw4mH1ZwYAXcs="

func TestParseEndpoints(t *testing.T) {
	t.Parallel()

	t.Run("Loaded", func(t *testing.T) {
		t.Parallel()
		s, err := parse([]byte(`
endpoints:
  merchant-42:
    url: https://merchant42.example/notify
    secrets: [{value: "` + testSecret + `", expires_at: "2026-12-01T00:00:00Z"}, {value: "` + testSecret + `"}]
    signing: hmac
    max_in_flight: 8
    rate: 50
    disable_after: 72h
topics:
  order-notify: {endpoint: merchant-42}
`))
		require.NoError(t, err)
		e := s.Endpoints["merchant-42"]
		require.Equal(t, "https://merchant42.example/notify", e.URL)
		require.Len(t, e.Secrets, 2)
		require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), e.Secrets[0].ExpiresAt.UTC())
		require.Nil(t, e.Secrets[1].ExpiresAt)
		require.Equal(t, 8, e.MaxInFlight)
		require.InDelta(t, 50.0, e.Rate, 0)
		require.Equal(t, notify.Duration(72*time.Hour), e.DisableAfter)

		n, err := s.Resolve(&notify.Request{Topic: "order-notify"}, time.Now(), 0)
		require.NoError(t, err)
		require.Equal(t, "merchant-42", n.Endpoint, "the topic's default endpoint")
		require.Equal(t, notify.ChannelWebhook, n.Channel)
		require.Empty(t, n.Target)

		n, err = s.Resolve(&notify.Request{Topic: "order-notify", Target: "https://other.example"}, time.Now(), 0)
		require.NoError(t, err)
		require.Empty(t, n.Endpoint, "a request's target replaces its topic's endpoint")
	})

	for _, tt := range []struct {
		name, yaml, wantField string
	}{
		{"MalformedSecret", `endpoints: {m: {url: "https://m.example", secrets: [{value: "whsec_not base64!"}]}}`, "endpoints.m.secrets[0].value"},
		{"NegativeRate", `endpoints: {m: {url: "https://m.example", rate: -1}}`, "endpoints.m.rate"},
		{"UnknownSigning", `endpoints: {m: {url: "https://m.example", signing: rsa}}`, "endpoints.m.signing"},
		{"BadExpiry", `endpoints: {m: {url: "https://m.example", secrets: [{value: "` + testSecret + `", expires_at: "next week"}]}}`, "endpoints.m.secrets[0].expires_at"},
		{"UnknownKey", `endpoints: {m: {url: "https://m.example", secret: x}}`, "endpoints.m.secret"},
		{"BadName", `endpoints: {"m/1": {url: "https://m.example"}}`, "endpoints.m/1"},
		{"TopicEndpointAndTarget", `topics: {t: {endpoint: m, target: "https://m.example"}}`, "topics.t.endpoint"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse([]byte(tt.yaml))
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.wantField, fe.Field)
			require.NotContains(t, err.Error(), strings.TrimPrefix(testSecret, "whsec_"))
		})
	}
}

func TestResolveEndpoint(t *testing.T) {
	t.Parallel()
	s, err := NewSet(nil, nil)
	require.NoError(t, err)
	s, err = s.WithEndpoints(map[string]endpoint.Endpoint{"m": {URL: "https://m.example"}})
	require.NoError(t, err)

	_, err = s.Resolve(&notify.Request{Topic: "t", Endpoint: "m", Target: "https://m.example"}, time.Now(), 0)
	var fe *notify.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "endpoint", fe.Field)

	_, err = s.Resolve(&notify.Request{Topic: "t", Endpoint: "m", Channel: notify.ChannelSMS}, time.Now(), 0)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "endpoint", fe.Field)

	n, err := s.Resolve(&notify.Request{Topic: "t", Endpoint: "m"}, time.Now(), 0)
	require.NoError(t, err)
	require.Equal(t, "m", n.Endpoint)
	other, err := s.Resolve(&notify.Request{Topic: "t", Endpoint: "m2"}, time.Now(), 0)
	require.NoError(t, err)
	require.NotEqual(t, n.ComputeDigest("now"), other.ComputeDigest("now"), "the endpoint is part of the content")
}
