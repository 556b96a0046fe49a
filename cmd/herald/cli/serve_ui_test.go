package cli

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

// TestServeDashboard: serve answers /ui/ on the API's address, and says
// when no tokens guard it.
func TestServeDashboard(t *testing.T) {
	t.Parallel()
	s := startServe(t, newEnv(t, "").config)
	require.Contains(t, s.out.String(), "dashboard on "+s.url+"/ui/")
	res, err := http.Get(s.url + "/ui/")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Contains(t, string(body), "No API tokens are configured")
	require.NoError(t, s.stop())
}

// TestServeTracing: with otel.endpoint set, an enqueue that carries a
// traceparent and its attempt are exported to the collector in the caller's
// trace, and the webhook carries that trace.
func TestServeTracing(t *testing.T) {
	t.Parallel()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	var mu sync.Mutex
	var exported [][]byte
	var seen []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.URL.Path == "/v1/traces" {
			exported = append(exported, b)
		}
		mu.Unlock()
	}))
	t.Cleanup(collector.Close)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("traceparent"))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(rcv.Close)

	// Credentials in the collector's URL are never logged.
	endpoint := strings.Replace(collector.URL, "://", "://herald:collector-pw@", 1) + "/?api_key=collector-key"
	e := newEnv(t, fmt.Sprintf("redis: {addrs: [%q]}\notel: {endpoint: %q}", server.Addr, endpoint))
	s := startServe(t, e.config, "--log-level", "info")
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/notifications",
		strings.NewReader(fmt.Sprintf(`{"id": "traced-1", "topic": "merchant-notify", "target": %q, "payload": {}}`, rcv.URL)))
	require.NoError(t, err)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	waitFor(t, 10*time.Second, "the delivery", func() bool {
		var n notify.Notification
		s.call(t, http.MethodGet, "/v1/notifications/traced-1", "", &n)
		return n.State == notify.StateSucceeded
	})
	require.NoError(t, s.stop(), "a clean shutdown flushes the spans")
	require.Contains(t, s.logs.String(), "herald: tracing")
	require.NotContains(t, s.logs.String(), "collector-pw")
	require.NotContains(t, s.logs.String(), "collector-key")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 1)
	require.True(t, strings.HasPrefix(seen[0], "00-"+traceID+"-"), seen[0])
	raw, err := hex.DecodeString(traceID)
	require.NoError(t, err)
	var found bool
	for _, b := range exported {
		found = found || bytes.Contains(b, raw)
	}
	require.True(t, found, "the collector received the caller's trace (%d exports)", len(exported))
}
