package endpoint_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/endpoint"
)

// FuzzEndpoint decodes an endpoint as PUT /v1/endpoints/{name} does and
// checks it: no panic, no secret in an error, and a valid one signs and
// shows without its secrets.
func FuzzEndpoint(f *testing.F) {
	for _, seed := range []string{
		`{"url":"https://m.example","secrets":[{"value":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw4mH1ZwYAXcs="}]}`,
		`{"url":"https://m.example","signing":"ed25519","secrets":[{"value":"whsk_bm90IGEgcmVhbCBrZXksIGp1c3QgYSB0ZXN0IHNlZWQ="}]}`,
		`{"url":"https://m.example","secrets":[{"value":"whsec_c2hvcnQ="}],"rate":-1}`,
		`{"url":"http://m.example","max_in_flight":3,"rate":0.5,"disable_after":"72h"}`,
		`{"url":"https://m.example","signing":"ed25519","secrets":[{"value":"whsk_` + strings.Repeat("A", 86) + `=="}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var e endpoint.Endpoint
		if json.Unmarshal(data, &e) != nil {
			return
		}
		if err := e.Validate(); err != nil {
			for _, s := range e.Secrets {
				if len(s.Value) > 12 && strings.Contains(err.Error(), s.Value) {
					t.Fatalf("the error %q holds a secret", err)
				}
			}
			return
		}
		now := time.Now()
		_ = e.Sign(now, "id", "1700000000", data)
		b, _ := json.Marshal(e.View("m", endpoint.SourceAPI, now))
		for _, s := range e.Secrets {
			if len(s.Value) > 12 && strings.Contains(string(b), s.Value) {
				t.Fatalf("the view %s holds a secret", b)
			}
		}
	})
}
