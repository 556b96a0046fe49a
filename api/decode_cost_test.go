package api_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
)

// costlyBatch is a batch of n notifications, each with a backoff array of
// size entries whose last one is not a duration.
func costlyBatch(n, size int) []byte {
	backoff := strings.Repeat(`"1s",`, size-1) + `"soon"`
	var b bytes.Buffer
	b.WriteString(`{"notifications":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"c-%d","topic":"jobs","payload":{},"backoff":[%s]}`, i, backoff)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// TestBatchOfBadItems posts notifications whose backoff arrays of 2,600
// entries each end in a bad one: every item's error names the exact entry.
// (TestLocateCostsOneDecode checks what finding it costs.)
func TestBatchOfBadItems(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	status, out := b.do(t, http.MethodPost, "/v1/notifications/batch", costlyBatch(100, 2600))
	require.Equal(t, http.StatusOK, status, "%.300s", out)
	require.Equal(t, 100, strings.Count(string(out), `"field":"backoff[2599]"`))
}

func BenchmarkBatchOfBadItems(b *testing.B) {
	bb := setup(b, api.Config{})
	body := costlyBatch(100, 2600)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		bb.do(b, http.MethodPost, "/v1/notifications/batch", body)
	}
}

// TestLargeBodiesTakeTurns sends a batch larger than MaxBody while
// MaxLargeBodiesDefault others are being read: it waits, and is refused
// with 503 once Timeout passes, so a burst of 16 MiB batches cannot hold
// them all in memory at once. Small requests are not held up.
func TestLargeBodiesTakeTurns(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Timeout: 300 * time.Millisecond})

	// The first ones send 300 KiB of their body, then stall.
	var writers []*io.PipeWriter
	running := 0 // stalled requests not yet answered, as done counts them
	done := make(chan struct{}, 2*api.MaxLargeBodiesDefault)
	stall := func() error {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		running++
		t.Cleanup(func() { _ = pw.Close() }) // before the server's, which waits for it
		go func() {
			defer func() { done <- struct{}{} }()
			req, _ := http.NewRequest(http.MethodPost, b.http.URL+"/v1/notifications/batch", pr)
			req.ContentLength = 1 << 20
			if res, err := http.DefaultClient.Do(req); err == nil {
				_ = res.Body.Close()
			}
		}()
		_, err := pw.Write(append([]byte(`{"notifications":["`), bytes.Repeat([]byte("x"), 300<<10)...))
		return err
	}
	for range api.MaxLargeBodiesDefault {
		require.NoError(t, stall())
	}

	large := `{"notifications":[` + strings.Repeat(`{"topic":"jobs","payload":{"pad":"`+strings.Repeat("y", 1000)+`"}},`, 299) + `{"topic":"jobs"}]}`
	require.Greater(t, len(large), api.MaxBodyDefault)
	// The stalled bodies hold their turns once the server reads them,
	// which a written pipe does not say has happened: ask until it has.
	var status int
	var out []byte
	// A probe read before a stalled body takes a turn, and a stalled body
	// that waited past Timeout for it is answered 503 and holds none: send
	// it again. A 503 of a store call that took longer than Timeout is not
	// the one looked for.
	require.Eventually(t, func() bool {
		select {
		case <-done:
			running--
			if stall() != nil {
				return false
			}
		default:
		}
		status, out = b.do(t, http.MethodPost, "/v1/notifications/batch", large)
		return status == http.StatusServiceUnavailable && strings.Contains(string(out), "large")
	}, 10*time.Second, 10*time.Millisecond, "a third large body was never held back")
	must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"topic": "jobs", "payload": map[string]int{"a": 1}})

	for _, pw := range writers {
		_ = pw.CloseWithError(errors.New("client gave up"))
	}
	for range running {
		<-done
	}
	// The server sees a body end a moment after its client has given up,
	// and a loaded machine can stretch that past Timeout: ask again until
	// the turns are free. Two notifications make this body large: large's
	// 300 enqueues ran past Timeout on every try of a loaded machine (503s
	// after 2.2s and 7.9s), so that no try could tell whether the turns
	// were free.
	pad := strings.Repeat("z", 150<<10)
	two := `{"notifications":[{"topic":"jobs","payload":{"pad":"` + pad + `"}},{"topic":"jobs","payload":{"pad":"` + pad + `"}}]}`
	require.Greater(t, len(two), api.MaxBodyDefault)
	require.Eventually(t, func() bool {
		status, out = b.do(t, http.MethodPost, "/v1/notifications/batch", two)
		return status != http.StatusServiceUnavailable
	}, 30*time.Second, 10*time.Millisecond, "the turns were never given back")
	require.Equal(t, http.StatusOK, status, "once the others are done: %.300s", out)
}
