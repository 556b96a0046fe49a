package schedule_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/poll"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
)

const e2eSecret = "a shared webhook secret"

// received is one request a local receiver saw.
type received struct {
	at      time.Time
	headers http.Header
	body    []byte
}

// receiver is a loopback HTTP server answering with answer(n) to its n-th
// request (0-based) and recording each.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter)) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := len(r.reqs)
		r.reqs = append(r.reqs, received{at: time.Now(), headers: req.Header.Clone(), body: body})
		r.mu.Unlock()
		answer(n, w)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.reqs...)
}

// startSenders runs a dispatcher with the real webhook and poll senders,
// allowed to reach loopback receivers.
func (b *testBundle) startSenders(t *testing.T) {
	t.Helper()
	policies := func() *policy.Set { return b.policies }
	hc := httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}, Logger: heraldtest.Logger(t)}
	hook, err := webhook.New(&webhook.Config{Secret: e2eSecret, Common: httpsend.Common{Rules: policy.CurrentRules(policies), HTTP: hc}})
	require.NoError(t, err)
	poller, err := poll.New(&poll.Config{OnDone: hook, Common: httpsend.Common{Rules: policy.CurrentRules(policies), HTTP: hc}})
	require.NoError(t, err)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: hook, notify.ChannelPoll: poller}})
}

func (b *testBundle) enqueueTo(t *testing.T, id, topic, channel, target string) {
	t.Helper()
	n, err := b.policies.Resolve(&notify.Request{ID: id, Topic: topic, Channel: channel, Target: target,
		Payload: json.RawMessage(`{"out_trade_no":"T1001","total_amount":"9.90"}`)}, time.Now(), 0)
	require.NoError(t, err)
	_, _, err = b.store.Enqueue(context.Background(), n, false)
	require.NoError(t, err)
}

func setupE2E(t *testing.T, onDone string) *testBundle {
	t.Helper()
	b := setup(t)
	set, err := policy.NewSet(map[string]policy.Policy{
		"merchant": {Backoff: ms(0, 0, 30, 60), SuccessBody: "success", Timeout: notify.Duration(2 * time.Second)},
		"poll":     {Backoff: ms(0, 20, 20, 20, 20, 20), Timeout: notify.Duration(2 * time.Second)},
	}, map[string]policy.Topic{
		"order-notify": {Channel: notify.ChannelWebhook, Policy: "merchant"},
		"payment-poll": {Channel: notify.ChannelPoll, Policy: "poll", Poll: &policy.Poll{
			Field: "trade_status", Values: []string{"TRADE_SUCCESS", "TRADE_FINISHED", "TRADE_CLOSED"}, OnDone: onDone}},
	})
	require.NoError(t, err)
	b.policies = set
	return b
}

// requireSigned checks a request's Standard Webhooks signature by computing
// it independently.
func requireSigned(t *testing.T, r received) {
	t.Helper()
	mac := hmac.New(sha256.New, []byte(e2eSecret))
	mac.Write([]byte(r.headers.Get("webhook-id") + "." + r.headers.Get("webhook-timestamp") + "." + string(r.body)))
	require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), r.headers.Get("webhook-signature"))
}

func TestEndToEndWebhook(t *testing.T) {
	t.Parallel()

	t.Run("SignedAndSucceeded", func(t *testing.T) {
		t.Parallel()
		b := setupE2E(t, "")
		rcv := newReceiver(t, func(_ int, w http.ResponseWriter) { _, _ = io.WriteString(w, "success") })
		b.startSenders(t)
		b.enqueueTo(t, "order-1", "order-notify", "", rcv.URL)
		got := b.waitState(t, "order-1", notify.StateSucceeded)
		reqs := rcv.requests()
		require.Len(t, reqs, 1)
		requireSigned(t, reqs[0])
		require.Equal(t, "order-1", reqs[0].headers.Get("webhook-id"))
		require.Equal(t, "0", reqs[0].headers.Get("Herald-Attempt"))
		require.JSONEq(t, `{"out_trade_no":"T1001","total_amount":"9.90"}`, string(reqs[0].body))
		require.Equal(t, 200, got.History[0].StatusCode)
	})

	t.Run("FailsTwiceThenSucceedsOnSchedule", func(t *testing.T) {
		t.Parallel()
		b := setupE2E(t, "")
		rcv := newReceiver(t, func(n int, w http.ResponseWriter) {
			if n < 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "success")
		})
		b.startSenders(t)
		b.enqueueTo(t, "order-2", "order-notify", "", rcv.URL)
		got := b.waitState(t, "order-2", notify.StateSucceeded)
		require.Equal(t, 3, got.Attempts)
		require.Equal(t, []int{503, 503, 200}, []int{got.History[0].StatusCode, got.History[1].StatusCode, got.History[2].StatusCode})
		requireOnSchedule(t, got)
		reqs := rcv.requests()
		require.Len(t, reqs, 3)
		for i, r := range reqs {
			requireSigned(t, r)
			require.Equal(t, "order-2", r.headers.Get("webhook-id"), "stable across attempts")
			require.Equal(t, []string{"0", "1", "2"}[i], r.headers.Get("Herald-Attempt"))
		}
	})

	t.Run("AlwaysFailingGoesDead", func(t *testing.T) {
		t.Parallel()
		b := setupE2E(t, "")
		rcv := newReceiver(t, func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) })
		b.startSenders(t)
		b.enqueueTo(t, "order-3", "order-notify", "", rcv.URL)
		got := b.waitState(t, "order-3", notify.StateDead)
		require.Len(t, got.History, 4, "one attempt per backoff entry")
		for _, a := range got.History {
			require.Equal(t, 502, a.StatusCode)
			require.Equal(t, notify.OutcomeRetry, a.Outcome)
		}
		require.Len(t, rcv.requests(), 4)
	})
}

func TestEndToEndPaymentPoll(t *testing.T) {
	t.Parallel()
	merchant := newReceiver(t, func(_ int, w http.ResponseWriter) { _, _ = io.WriteString(w, "ok") })
	provider := newReceiver(t, func(n int, w http.ResponseWriter) {
		status := "WAIT_BUYER_PAY"
		if n >= 3 {
			status = "TRADE_SUCCESS"
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"out_trade_no": "T1001", "trade_status": status})
	})
	b := setupE2E(t, merchant.URL)
	b.startSenders(t)
	b.enqueueTo(t, "trade-T1001", "payment-poll", "", provider.URL+"/query?out_trade_no=T1001")

	got := b.waitState(t, "trade-T1001", notify.StateSucceeded)
	require.Equal(t, 4, got.Attempts, "3 polls not final, the 4th final")
	require.Len(t, provider.requests(), 4)
	requireOnSchedule(t, got)
	done := merchant.requests()
	require.Len(t, done, 1, "one on_done webhook")
	requireSigned(t, done[0])
	var body struct {
		ID       string          `json:"id"`
		Value    string          `json:"value"`
		Response json.RawMessage `json:"response"`
	}
	require.NoError(t, json.Unmarshal(done[0].body, &body))
	require.Equal(t, "trade-T1001", body.ID)
	require.Equal(t, "TRADE_SUCCESS", body.Value)
	require.JSONEq(t, `{"out_trade_no":"T1001","trade_status":"TRADE_SUCCESS"}`, string(body.Response))
}
