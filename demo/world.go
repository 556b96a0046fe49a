package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/heraldhq/herald/notify/webhook"
)

// Paths of the demo's receivers.
const (
	smsPath      = "/sms/messages"
	notifyPath   = "/merchant/notify"
	resultPath   = "/merchant/payment-result"
	brokenPath   = "/merchant/broken"
	queryPath    = "/provider/trade/query"
	pollsToFinal = 3 // the provider reports the trade final on this poll
)

// world is everyone the demo talks to, faked on one loopback HTTP
// server: an SMS provider (the http provider's JSON POST), a merchant
// whose notify endpoint checks each request's Standard Webhooks signature
// and fails twice before answering "success", a payment provider whose
// trade query reports TRADE_SUCCESS on the third poll, the merchant's
// endpoint for on_done webhooks, and a merchant endpoint that answers 503
// until it is fixed.
type world struct {
	srv *http.Server
	url string
	tl  *timeline
	// verifier checks signatures with the demo's secret; nil when
	// webhooks go out unsigned.
	verifier *standardwebhooks.Webhook

	// mu guards seen and fixed, which the handlers write.
	mu   sync.Mutex
	seen seenSoFar
	// fixed makes the broken endpoint answer "success".
	fixed bool
}

// seenSoFar is what the receivers saw.
type seenSoFar struct {
	// texts counts the SMS the gateway accepted, by recipient.
	texts map[string]int
	// signatures says what the merchant's notify endpoint made of the
	// signatures: all verified, unsigned, or which one failed.
	signatures string
	// notifyAnswers are the notify endpoint's answers, in order.
	notifyAnswers []string
	// trades are the trade statuses the provider's query answered.
	trades []string
	// results are the trade statuses of the on_done webhooks received.
	results []string
	// brokenCalls counts requests to the broken endpoint.
	brokenCalls int
}

// snapshot returns a copy of what the receivers saw so far.
func (w *world) snapshot() seenSoFar {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seen
	s.texts, s.notifyAnswers = maps.Clone(s.texts), slices.Clone(s.notifyAnswers)
	s.trades, s.results = slices.Clone(s.trades), slices.Clone(s.results)
	return s
}

// startWorld starts the receivers on 127.0.0.1, the only network the
// demo's SSRF guard lets through; the merchant checks signatures with
// secret, a webhook secret as senders.webhook.secret takes it. Close it
// when done.
func startWorld(tl *timeline, secret string) (*world, error) {
	w := &world{tl: tl, seen: seenSoFar{texts: map[string]int{}, signatures: "webhooks unsigned (senders.webhook.secret is empty)"}}
	if secret != "" {
		key, err := webhook.ParseSecret(secret)
		if err != nil {
			return nil, err
		}
		if w.verifier, err = standardwebhooks.NewWebhookRaw(key); err != nil {
			return nil, fmt.Errorf("demo merchant: %w", err)
		}
		w.seen.signatures = "every signature verified"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo receivers: %w", err)
	}
	w.url = "http://" + l.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+smsPath, w.sms)
	mux.HandleFunc("POST "+notifyPath, w.notify)
	mux.HandleFunc("POST "+resultPath, w.result)
	mux.HandleFunc("POST "+brokenPath, w.broken)
	mux.HandleFunc("GET "+queryPath, w.query)
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = w.srv.Serve(l) }()
	return w, nil
}

// close stops the receivers. Connections the senders opened but never
// used (an attempt cancelled at shutdown) do not count as idle for
// Shutdown, so whatever is left after it is closed outright.
func (w *world) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
	_ = w.srv.Close()
}

// sms is the SMS provider: it accepts every message.
func (w *world) sms(rw http.ResponseWriter, r *http.Request) {
	var msg struct{ To, Body string }
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
		http.Error(rw, "not JSON", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.seen.texts[msg.To]++
	w.mu.Unlock()
	w.tl.note("SMS provider", "text to %s: %q", msg.To, msg.Body)
	rw.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(rw, `{"id":"SM0001","status":"queued"}`)
}

// notifyAnswers are the notify endpoint's answers to its first,
// second and later requests: busy, then a body that is not Alipay's
// "success" (a failure whatever the status), then "success".
var notifyAnswers = []struct {
	code int
	body string
}{{http.StatusInternalServerError, "busy"}, {http.StatusOK, "fail"}, {http.StatusOK, "success"}}

// notify is the merchant's payment notification endpoint. It checks the
// signature first, as a receiver must, and refuses a request whose
// signature does not verify.
func (w *world) notify(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err == nil && w.verifier != nil {
		err = w.verifier.Verify(body, r.Header)
	}
	attempt := r.Header.Get("Herald-Attempt")
	if err != nil {
		w.mu.Lock()
		w.seen.signatures = fmt.Sprintf("attempt %s's signature failed: %v", attempt, err)
		w.seen.notifyAnswers = append(w.seen.notifyAnswers, "401")
		w.mu.Unlock()
		w.tl.note("merchant", "webhook-id %s, Herald-Attempt %s: signature check failed (%v)", r.Header.Get("webhook-id"), attempt, err)
		http.Error(rw, "bad signature", http.StatusUnauthorized)
		return
	}
	w.mu.Lock()
	a := notifyAnswers[min(len(w.seen.notifyAnswers), len(notifyAnswers)-1)]
	w.seen.notifyAnswers = append(w.seen.notifyAnswers, fmt.Sprintf("%d %q", a.code, a.body))
	w.mu.Unlock()
	if w.verifier != nil {
		w.tl.note("merchant", "webhook-id %s, Herald-Attempt %s: signature verified", r.Header.Get("webhook-id"), attempt)
	}
	rw.WriteHeader(a.code)
	_, _ = io.WriteString(rw, a.body)
}

// query is the payment provider's trade query: the trade is waiting for
// the buyer until the pollsToFinal-th query.
func (w *world) query(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	status := "WAIT_BUYER_PAY"
	if len(w.seen.trades)+1 >= pollsToFinal {
		status = "TRADE_SUCCESS"
	}
	w.seen.trades = append(w.seen.trades, status)
	n := len(w.seen.trades)
	w.mu.Unlock()
	w.tl.note("payment provider", "query %d for trade %s: %s", n, r.URL.Query().Get("out_trade_no"), status)
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(map[string]string{"out_trade_no": r.URL.Query().Get("out_trade_no"), "trade_status": status})
}

// result is the merchant's endpoint for the poll's on_done webhook.
func (w *world) result(rw http.ResponseWriter, r *http.Request) {
	var body struct{ Value string }
	_ = json.NewDecoder(r.Body).Decode(&body)
	w.mu.Lock()
	w.seen.results = append(w.seen.results, body.Value)
	w.mu.Unlock()
	w.tl.note("merchant", "on_done webhook: the trade is %s", body.Value)
	_, _ = io.WriteString(rw, "success")
}

// broken is a merchant endpoint that is down (503) until fix.
func (w *world) broken(rw http.ResponseWriter, _ *http.Request) {
	w.mu.Lock()
	w.seen.brokenCalls++
	fixed := w.fixed
	w.mu.Unlock()
	if !fixed {
		http.Error(rw, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(rw, "success")
}

// fix brings the broken endpoint back.
func (w *world) fix() {
	w.mu.Lock()
	w.fixed = true
	w.mu.Unlock()
}

// show names a target for the timeline: its path on the receivers, or the
// target itself.
func (w *world) show(target string) string {
	if rest, ok := strings.CutPrefix(target, w.url); ok {
		path, _, _ := strings.Cut(rest, "?")
		return path
	}
	return target
}
