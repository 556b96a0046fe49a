package endpoint_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
)

// hmacSecret returns a fresh Standard Webhooks secret.
func hmacSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return endpoint.PrefixHMAC + base64.StdEncoding.EncodeToString(key)
}

// ed25519Secret returns a fresh ed25519 secret key (its seed).
func ed25519Secret(t *testing.T) string {
	t.Helper()
	seed := make([]byte, ed25519.SeedSize)
	_, _ = rand.Read(seed)
	return endpoint.PrefixSecretKey + base64.StdEncoding.EncodeToString(seed)
}

// verifyHMAC verifies a signed request with the official Standard Webhooks
// library, as a receiver holding secret would.
func verifyHMAC(t *testing.T, secret, id, ts, sig string, body []byte) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", sig)
	return wh.Verify(body, h)
}

// verifyEd25519 verifies the v1a signatures of a header with a published
// whpk_ key: the official Go library knows only v1, so this follows the
// Standard Webhooks specification (ed25519 over "id.timestamp.body").
func verifyEd25519(t *testing.T, publicKey, id, ts, header string, body []byte) bool {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(publicKey, endpoint.PrefixPublicKey))
	require.NoError(t, err)
	require.Len(t, raw, ed25519.PublicKeySize)
	for _, s := range strings.Split(header, " ") {
		sig, ok := strings.CutPrefix(s, "v1a,")
		if !ok {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && ed25519.Verify(raw, []byte(id+"."+ts+"."+string(body)), b) {
			return true
		}
	}
	return false
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := hmacSecret(t)
	tests := []struct {
		name      string
		endpoint  endpoint.Endpoint
		wantField string
	}{
		{"Good", endpoint.Endpoint{URL: "https://m.example/n", Secrets: []endpoint.Secret{{Value: good}}, MaxInFlight: 8, Rate: 50}, ""},
		{"Unsigned", endpoint.Endpoint{URL: "http://m.example/n"}, ""},
		{"NoURL", endpoint.Endpoint{}, "url"},
		{"FTPURL", endpoint.Endpoint{URL: "ftp://m.example/n"}, "url"},
		{"PortOutOfRange", endpoint.Endpoint{URL: "https://m.example:80800/n"}, "url"},
		{"PortZero", endpoint.Endpoint{URL: "https://m.example:0/n"}, "url"},
		{"DefaultPortSpelledEmpty", endpoint.Endpoint{URL: "https://m.example:/n"}, ""},
		{"UnknownSigning", endpoint.Endpoint{URL: "https://m.example", Signing: "rsa"}, "signing"},
		{"NegativeRate", endpoint.Endpoint{URL: "https://m.example", Rate: -1}, "rate"},
		{"NegativeMaxInFlight", endpoint.Endpoint{URL: "https://m.example", MaxInFlight: -1}, "max_in_flight"},
		{"NegativeDisableAfter", endpoint.Endpoint{URL: "https://m.example", DisableAfter: -1}, "disable_after"},
		{"NoPrefix", endpoint.Endpoint{URL: "https://m.example", Secrets: []endpoint.Secret{{Value: good}, {Value: "hunter2-hunter2-hunter2-hunter2"}}}, "secrets[1].value"},
		{"NotBase64", endpoint.Endpoint{URL: "https://m.example", Secrets: []endpoint.Secret{{Value: "whsec_hunter2!!"}}}, "secrets[0].value"},
		{"ShortKey", endpoint.Endpoint{URL: "https://m.example", Secrets: []endpoint.Secret{{Value: "whsec_aHVudGVyMg=="}}}, "secrets[0].value"},
		{"HMACSecretForEd25519", endpoint.Endpoint{URL: "https://m.example", Signing: endpoint.SigningEd25519, Secrets: []endpoint.Secret{{Value: good}}}, "secrets[0].value"},
		{"Ed25519", endpoint.Endpoint{URL: "https://m.example", Signing: endpoint.SigningEd25519, Secrets: []endpoint.Secret{{Value: ed25519Secret(t)}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.endpoint.Validate()
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.wantField, fe.Field)
			for _, s := range tt.endpoint.Secrets {
				require.NotContains(t, err.Error(), strings.TrimPrefix(s.Value, "whsec_"), "the error echoes a secret")
			}
		})
	}
}

func TestSign(t *testing.T) {
	t.Parallel()
	now := time.Now()
	body := []byte(`{"order":42}`)
	ts := "1700000000"

	t.Run("HMACVerifiesWithTheStandardLibrary", func(t *testing.T) {
		t.Parallel()
		secret := hmacSecret(t)
		e := endpoint.Endpoint{URL: "https://m.example", Secrets: []endpoint.Secret{{Value: secret}}}
		require.NoError(t, e.Validate())
		sig := e.Sign(now, "msg-1", ts, body)
		require.True(t, strings.HasPrefix(sig, "v1,"))
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		want, err := wh.Sign("msg-1", time.Unix(1700000000, 0), body)
		require.NoError(t, err)
		require.Equal(t, want, sig)
		require.Error(t, verifyHMAC(t, hmacSecret(t), "msg-1", ts, sig, body), "another secret verified it")
	})

	t.Run("RotationSignsWithEveryValidSecret", func(t *testing.T) {
		t.Parallel()
		old, fresh, gone := hmacSecret(t), hmacSecret(t), hmacSecret(t)
		later, earlier := now.Add(time.Hour), now.Add(-time.Second)
		e := endpoint.Endpoint{URL: "https://m.example", Secrets: []endpoint.Secret{
			{Value: gone, ExpiresAt: &earlier}, {Value: old, ExpiresAt: &later}, {Value: fresh},
		}}
		require.NoError(t, e.Validate())
		stamp := strconv.FormatInt(time.Now().Unix(), 10) // the library checks it is recent
		sig := e.Sign(now, "msg-2", stamp, body)
		require.Len(t, strings.Split(sig, " "), 2, "one signature per valid secret")
		require.NoError(t, verifyHMAC(t, old, "msg-2", stamp, sig, body))
		require.NoError(t, verifyHMAC(t, fresh, "msg-2", stamp, sig, body))
		require.Error(t, verifyHMAC(t, gone, "msg-2", stamp, sig, body), "an expired secret still signs")

		// Once the old secret has expired, only the new one signs.
		sig = e.Sign(later, "msg-2", stamp, body)
		require.Len(t, strings.Split(sig, " "), 1)
		require.Error(t, verifyHMAC(t, old, "msg-2", stamp, sig, body))
		require.NoError(t, verifyHMAC(t, fresh, "msg-2", stamp, sig, body))
	})

	t.Run("Ed25519VerifiesWithThePublishedKey", func(t *testing.T) {
		t.Parallel()
		e := endpoint.Endpoint{URL: "https://m.example", Signing: endpoint.SigningEd25519,
			Secrets: []endpoint.Secret{{Value: ed25519Secret(t)}}}
		require.NoError(t, e.Validate())
		pub := e.PublicKey(e.Secrets[0])
		require.True(t, strings.HasPrefix(pub, endpoint.PrefixPublicKey))
		sig := e.Sign(now, "msg-3", ts, body)
		require.True(t, strings.HasPrefix(sig, "v1a,"))
		require.True(t, verifyEd25519(t, pub, "msg-3", ts, sig, body))
		require.False(t, verifyEd25519(t, pub, "msg-3", ts, sig, []byte(`{"order":43}`)), "a changed body verified")

		other := endpoint.Endpoint{Signing: endpoint.SigningEd25519, Secrets: []endpoint.Secret{{Value: ed25519Secret(t)}}}
		require.False(t, verifyEd25519(t, other.PublicKey(other.Secrets[0]), "msg-3", ts, sig, body), "another key verified")

		// During a rotation both keys sign, and each signature verifies
		// with its own published key.
		rotating := endpoint.Endpoint{URL: "https://m.example", Signing: endpoint.SigningEd25519,
			Secrets: []endpoint.Secret{{Value: ed25519Secret(t)}, {Value: ed25519Secret(t)}}}
		require.NoError(t, rotating.Validate())
		both := rotating.Sign(now, "msg-5", ts, body)
		require.Len(t, strings.Split(both, " "), 2)
		for _, sec := range rotating.Secrets {
			require.True(t, verifyEd25519(t, rotating.PublicKey(sec), "msg-5", ts, both, body))
		}
	})

	t.Run("NoValidSecretNoSignature", func(t *testing.T) {
		t.Parallel()
		earlier := now.Add(-time.Minute)
		e := endpoint.Endpoint{URL: "https://m.example", Secrets: []endpoint.Secret{{Value: hmacSecret(t), ExpiresAt: &earlier}}}
		require.Empty(t, e.Sign(now, "msg-4", ts, body))
	})
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := map[string]endpoint.Endpoint{"m1": {URL: "https://file.example"}}
	var asked int
	source := endpoint.LookupFunc(func(_ context.Context, name string) (*endpoint.Endpoint, error) {
		asked++
		switch name {
		case "m1":
			return &endpoint.Endpoint{URL: "https://api.example/m1"}, nil
		case "m2":
			return &endpoint.Endpoint{URL: "https://api.example/m2"}, nil
		}
		return nil, endpoint.ErrNotFound
	})
	r := endpoint.NewRegistry(&endpoint.RegistryConfig{FileFunc: func() map[string]endpoint.Endpoint { return file }, Source: source, CacheTTL: time.Hour})

	e, err := r.Endpoint(ctx, "m1")
	require.NoError(t, err)
	require.Equal(t, "https://file.example", e.URL, "the file wins on a name clash")
	require.True(t, r.InFile("m1"))

	for range 3 {
		e, err = r.Endpoint(ctx, "m2")
		require.NoError(t, err)
		require.Equal(t, "https://api.example/m2", e.URL)
	}
	require.Equal(t, 1, asked, "a stored endpoint is read once per CacheTTL")

	_, err = r.Endpoint(ctx, "m3")
	require.True(t, errors.Is(err, endpoint.ErrNotFound))
	_, err = r.Endpoint(ctx, "m3")
	require.ErrorIs(t, err, endpoint.ErrNotFound)
	require.Equal(t, 3, asked, "an unknown name is asked again every time")
}
