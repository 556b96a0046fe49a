// Package httpsendtest runs local HTTP receivers for the senders' tests. It
// is test-only: production packages must not import it.
//
// A receiver listens on a loopback address only, so a test that uses one
// never sends traffic off the machine.
package httpsendtest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// MaxRecorded is how many requests a Receiver keeps, so that benchmarks
// stay small.
const MaxRecorded = 100

// Request is one request as the receiver saw it.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Receiver is a local HTTP server that records requests and counts the
// connections opened to it.
type Receiver struct {
	srv   *httptest.Server
	conns atomic.Int64
	mu    sync.Mutex
	// reqs holds the first MaxRecorded requests, guarded by mu.
	reqs []Request
}

// NewReceiver starts a receiver on the loopback address of network ("tcp4":
// 127.0.0.1, "tcp6": ::1) that answers with h, and stops it when the test
// ends.
func NewReceiver(tb testing.TB, network string, h http.HandlerFunc) *Receiver {
	tb.Helper()
	addr := "127.0.0.1:0"
	if network == "tcp6" {
		addr = "[::1]:0"
	}
	l, err := net.Listen(network, addr)
	require.NoError(tb, err)
	r := &Receiver{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		if len(r.reqs) < MaxRecorded {
			r.reqs = append(r.reqs, Request{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Body: body})
		}
		r.mu.Unlock()
		h(w, req)
	}))
	r.srv.Listener.Close()
	r.srv.Listener = l
	r.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.conns.Add(1)
		}
	}
	r.srv.Start()
	tb.Cleanup(r.srv.Close)
	return r
}

// URL is the receiver's base URL, such as http://127.0.0.1:40123.
func (r *Receiver) URL() string { return r.srv.URL }

// Addr is the receiver's host:port.
func (r *Receiver) Addr() string { return r.srv.Listener.Addr().String() }

// Requests returns the requests received so far.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// Conns is how many connections were opened to the receiver.
func (r *Receiver) Conns() int64 { return r.conns.Load() }

// Answer returns a handler that answers with status, body and the header
// pairs (name, value, name, value...).
func Answer(status int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// HangUpOn returns a handler that closes the connection without an answer
// on the nth request it gets (from 1), as a receiver whose keep-alive
// timeout ran out as the request came, and answers the others with h.
func HangUpOn(nth int64, h http.HandlerFunc) http.HandlerFunc {
	var requests atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == nth {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		h(w, r)
	}
}

// Dials records the addresses an SSRF guard let a client dial, and
// connects each of them to a receiver instead, so that a test can resolve
// names to any address, public ones included, and still send nothing off
// the machine.
type Dials struct {
	to string
	mu sync.Mutex
	// dialed holds the addresses dialled, guarded by mu.
	dialed []string
}

// Dials returns a recorder whose Dial connects to r, whatever the address.
func (r *Receiver) Dials() *Dials { return &Dials{to: r.Addr()} }

// Dial is a client's DialFunc: it records address and connects to the
// receiver.
func (d *Dials) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	var dialer net.Dialer
	return dialer.DialContext(ctx, network, d.to)
}

// Addresses returns the addresses dialled so far.
func (d *Dials) Addresses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}
