package httpsend

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify/httpsend/httpsendtest"
)

// TestDoSendsTheBody checks what a receiver gets of a request's body: the
// bytes, their length, and the content type the sender set, or the sniffed
// one when it set none.
func TestDoSendsTheBody(t *testing.T) {
	var mu sync.Mutex
	var lengths []int64
	rcv := httpsendtest.NewReceiver(t, "tcp4", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/none" {
			mu.Lock()
			lengths = append(lengths, r.ContentLength)
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c, err := NewClient(&Config{AllowNetworks: []string{"127.0.0.0/8"}})
	require.NoError(t, err)

	body := []byte(`{"order":42}`)
	json := NewRequest(http.MethodPost, rcv.URL()+"/json")
	json.Header.Set("Content-Type", "application/json")
	json.Body = body
	plain := NewRequest(http.MethodPost, rcv.URL()+"/plain")
	plain.Body = []byte("hello")
	none := NewRequest(http.MethodPost, rcv.URL()+"/none")
	for _, req := range []*Request{json, plain, none} {
		res, err := c.Do(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, res.StatusCode)
	}
	// The caller's slice is sent, not kept: changing it later changes
	// nothing sent.
	body[2] = 'X'

	got := rcv.Requests()
	require.Len(t, got, 3)
	require.Equal(t, `{"order":42}`, string(got[0].Body))
	require.Equal(t, "application/json", got[0].Header.Get("Content-Type"))
	require.Equal(t, "hello", string(got[1].Body))
	require.Equal(t, "text/plain; charset=utf-8", got[1].Header.Get("Content-Type"))
	require.Empty(t, got[2].Body)
	require.Empty(t, got[2].Header.Get("Content-Type"))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{12, 5}, lengths, "the bodies' Content-Length")
}
