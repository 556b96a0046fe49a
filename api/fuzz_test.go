package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// offlineServer is an API whose Redis can never be reached: fuzzing drives
// every decoding and validation path, and a request that passes them all
// ends in a prompt 503 rather than in Redis.
func offlineServer(f *testing.F) *api.Server {
	f.Helper()
	rdb := redis.NewClient(&redis.Options{
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no redis while fuzzing")
		},
		MaxRetries:    -1,
		DialerRetries: 1,
	})
	f.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(&store.Config{Client: rdb, Namespace: "fuzz", Shards: 2})
	if err != nil {
		f.Fatal(err)
	}
	set := testPolicies(f)
	srv, err := api.New(&api.Config{Store: st, PoliciesFunc: func() *policy.Set { return set }, MaxBody: 4096,
		Hosts:  []string{"example.com"}, // httptest.NewRequest's
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = srv.Close() })
	return srv
}

// serveFuzz posts body to path and checks the answer: a known status, and
// for an error the documented error body.
func serveFuzz(t *testing.T, srv *api.Server, path string, body []byte) (int, []byte) {
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	out := rec.Body.Bytes()
	switch rec.Code {
	case http.StatusOK, http.StatusCreated:
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable:
		var e apiError
		if err := json.Unmarshal(out, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("status %d with a body that is not an API error: %q", rec.Code, out)
		}
		if rec.Code == http.StatusBadRequest && e.Error.Code != api.CodeInvalidArgument {
			t.Fatalf("400 with code %q", e.Error.Code)
		}
	default:
		t.Fatalf("unexpected status %d: %q", rec.Code, out)
	}
	return rec.Code, out
}

var enqueueSeeds = []string{
	`{"topic":"jobs"}`,
	`{"id":"order-1","topic":"orders","payload":{"order":1},"send_at":"2030-01-01T00:00:00Z","headers":{"X-Shop":"42"}}`,
	`{"topic":"jobs","backoff":["0s",2,"1h30m",0.5],"ttr":"30s","delay":"1m"}`,
	`{"topic":"jobs","backoff":["1s","x"]}`,
	`{"topic":"new","channel":"sms","target":"+14155550100","replace":true}`,
	`{"topic":5}`,
	`{"topic":"jobs","headers":{"a b":1}}`,
	`{"topic":"jobs","send_at":"tomorrow","delay":{}}`,
	`{"topic":"jobs","payload":` + "\"\xff\"" + `}`,
	`{"topic":"jobs"} trailing`,
	`[{"topic":"jobs"}]`,
	`null`,
	``,
	`{"topic":"jobs","delay":1e300,"ttr":"-1s"}`,
	`{"topic":"jobs", "headers" : {"X":"}\\\"","x":"2","X":"3"} ,"Topic":"a","payload":[{"a":1,"a":[]}]}`,
	`{"\u0074opic":"jobs","backoff":[ 1 ,"2s" ],"topic":"x"}`,
}

// FuzzDecodeEnqueue feeds arbitrary bodies to POST /v1/notifications: none
// may crash the server or get an answer outside the documented ones.
func FuzzDecodeEnqueue(f *testing.F) {
	for _, s := range enqueueSeeds {
		f.Add([]byte(s))
	}
	srv := offlineServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		status, _ := serveFuzz(t, srv, "/v1/notifications", body)
		if status == http.StatusOK || status == http.StatusCreated {
			t.Fatalf("stored without a store: %q", body)
		}
	})
}

// FuzzDecodeBatch feeds arbitrary bodies to POST /v1/notifications/batch: a
// 200 (every item refused before the store) must carry one documented
// result per item.
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"notifications":[]}`))
	f.Add([]byte(`{"notifications":null}`))
	f.Add([]byte(`{"items":[]}`))
	for _, s := range enqueueSeeds {
		f.Add([]byte(`{"notifications":[` + s + `]}`))
		f.Add([]byte(`{"notifications":[` + s + `,{"topic":"x"},"str",7]}`))
	}
	srv := offlineServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		status, out := serveFuzz(t, srv, "/v1/notifications/batch", body)
		if status != http.StatusOK {
			return
		}
		var res batchResults
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("200 with a body that is not batch results: %q", out)
		}
		for i, r := range res.Results {
			if r.Status != http.StatusBadRequest || r.Error == nil || r.Error.Code != api.CodeInvalidArgument {
				t.Fatalf("item %d answered %d %+v without a store", i, r.Status, r.Error)
			}
		}
	})
}
