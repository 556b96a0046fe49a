package httpsend

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend/httpsendtest"
)

// TestDoSendsTheBody checks what a receiver gets of a request's body: the
// bytes, their length, and the content type the sender set, or the sniffed
// one when it set none; a request without a body gets no Content-Type and
// is not chunked.
func TestDoSendsTheBody(t *testing.T) {
	type framing struct {
		length  int64
		chunked bool
	}
	var mu sync.Mutex
	framings := map[string]framing{}
	rcv := httpsendtest.NewReceiver(t, "tcp4", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		framings[r.URL.Path] = framing{r.ContentLength, len(r.TransferEncoding) > 0}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	c := loopbackClient(t)

	body := []byte(`{"order":42}`)
	json := NewRequest(http.MethodPost, rcv.URL()+"/json")
	json.Header.Set("Content-Type", "application/json")
	json.Body = body
	plain := NewRequest(http.MethodPost, rcv.URL()+"/plain")
	plain.Body = []byte("hello")
	none := NewRequest(http.MethodPost, rcv.URL()+"/none")
	get := NewRequest(http.MethodGet, rcv.URL()+"/get")
	del := NewRequest(http.MethodDelete, rcv.URL()+"/delete")
	options := NewRequest(http.MethodOptions, rcv.URL()+"/options")
	for _, req := range []*Request{json, plain, none, get, del, options} {
		res, err := c.Do(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, res.StatusCode)
	}
	// The caller's slice is sent, not kept: changing it now changes
	// nothing sent.
	body[2] = 'X'

	got := rcv.Requests()
	require.Len(t, got, 6)
	require.Equal(t, `{"order":42}`, string(got[0].Body))
	require.Equal(t, "application/json", got[0].Header.Get("Content-Type"))
	require.Equal(t, "hello", string(got[1].Body))
	require.Equal(t, "text/plain; charset=utf-8", got[1].Header.Get("Content-Type"))
	for _, r := range got[2:] {
		require.Empty(t, r.Body, r.Method)
		require.Empty(t, r.Header.Get("Content-Type"), r.Method)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]framing{
		"/json":    {12, false},
		"/plain":   {5, false},
		"/none":    {0, false},
		"/get":     {0, false},
		"/delete":  {0, false},
		"/options": {0, false},
	}, framings)
	require.Empty(t, got[3].Header.Get("Content-Length"), "a GET has no Content-Length")
}

// TestDoAcceptsAnyAnswer checks that a request accepts any type of answer,
// whatever its body's type, unless its sender asked for one.
func TestDoAcceptsAnyAnswer(t *testing.T) {
	rcv := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(http.StatusOK, "success"))
	c := loopbackClient(t)

	json := NewRequest(http.MethodPost, rcv.URL())
	json.Header.Set("Content-Type", "application/json")
	json.Body = []byte(`{"order":42}`)
	xml := NewRequest(http.MethodPost, rcv.URL())
	xml.Header.Set("Content-Type", "application/xml")
	xml.Body = []byte(`<order>42</order>`)
	get := NewRequest(http.MethodGet, rcv.URL())
	asks := NewRequest(http.MethodGet, rcv.URL())
	asks.Header.Set("Accept", "application/json")
	for _, req := range []*Request{json, xml, get, asks} {
		_, err := c.Do(context.Background(), req)
		require.NoError(t, err)
	}
	got := rcv.Requests()
	require.Len(t, got, 4)
	for i, want := range []string{"*/*", "*/*", "*/*", "application/json"} {
		require.Equal(t, []string{want}, got[i].Header.Values("Accept"), "request %d", i)
	}
}

// TestDoReadsTheAnswer checks that Do returns a receiver's answer up to
// ReadLimit bytes, whether its length is announced or not (and none for a
// HEAD), and that a request built without NewRequest's header map is sent
// all the same.
func TestDoReadsTheAnswer(t *testing.T) {
	long := strings.Repeat("x", ReadLimit+10)
	rcv := httpsendtest.NewReceiver(t, "tcp4", func(w http.ResponseWriter, r *http.Request) {
		answer := "success"
		if strings.HasPrefix(r.URL.Path, "/long") {
			answer = long
		}
		if strings.HasSuffix(r.URL.Path, "/chunked") {
			// Two writes with a flush between: sent chunked, of no
			// announced length.
			_, _ = io.WriteString(w, answer[:3])
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, answer[3:])
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		_, _ = io.WriteString(w, answer)
	})
	c := loopbackClient(t)
	for path, want := range map[string]string{
		"/short":         "success",
		"/short/chunked": "success",
		"/long":          long[:ReadLimit],
		"/long/chunked":  long[:ReadLimit],
	} {
		res, err := c.Do(context.Background(), NewRequest(http.MethodGet, rcv.URL()+path))
		require.NoError(t, err, path)
		require.Equal(t, want, string(res.Body), path)
	}
	res, err := c.Do(context.Background(), &Request{Method: http.MethodGet, URL: rcv.URL() + "/short"})
	require.NoError(t, err)
	require.Equal(t, "success", string(res.Body))
	// A HEAD's answer announces a length and carries no body.
	res, err = c.Do(context.Background(), NewRequest(http.MethodHead, rcv.URL()+"/short"))
	require.NoError(t, err)
	require.Empty(t, res.Body)
}

// TestDoKeepsABrokenOffSuccess: a receiver that answered 2xx and dropped
// the connection before the end of its body has taken the request, and
// the result says so with what arrived; any other status whose body broke
// off is the transport's error, as before.
func TestDoKeepsABrokenOffSuccess(t *testing.T) {
	rcv := httpsendtest.NewReceiver(t, "tcp4", func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "succ")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	c := loopbackClient(t)
	res, err := c.Do(context.Background(), NewRequest(http.MethodPost, rcv.URL()+"/200"))
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode)
	require.Equal(t, "succ", string(res.Body))
	_, err = c.Do(context.Background(), NewRequest(http.MethodPost, rcv.URL()+"/503"))
	require.ErrorContains(t, err, "read response")
}

// loopbackClient returns a client allowed to reach the loopback receivers
// of these tests.
func loopbackClient(t *testing.T) *Client {
	t.Helper()
	c, err := NewClient(&Config{AllowNetworks: []string{"127.0.0.0/8"}})
	require.NoError(t, err)
	return c
}

// TestDoErrorsHideURLCredentials checks that the error of a failed request,
// which the history keeps and the API and the UI show, carries none of the
// user information of the target URL (a token in the user's place or a
// password) nor the values of its query's credentials (?access_token=),
// which answers show as "xxxxx".
func TestDoErrorsHideURLCredentials(t *testing.T) {
	hang := httpsendtest.NewReceiver(t, "tcp4", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	refused, err := redistest.FreeAddr()
	require.NoError(t, err)
	c := loopbackClient(t)

	for _, tt := range []struct {
		name    string
		target  string
		timeout time.Duration
		// shown is how the error names the target. Default "xxxxx@".
		shown string
		// check, when set, is what else the error must be.
		check func(t *testing.T, err error)
	}{
		{name: "Refused", target: "http://tok3n-in-user@" + refused + "/hook"},
		{name: "RefusedPassword", target: "http://merchant:s3cret-pass@" + refused + "/hook"},
		{
			name: "Timeout", target: "http://tok3n-in-user:s3cret-pass@" + hang.Addr() + "/hook", timeout: 50 * time.Millisecond,
			check: func(t *testing.T, err error) {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.NotErrorAs(t, ClassifyError(&notify.Rules{}, err), new(*notify.PermanentError), "a timeout is retried")
			},
		},
		{name: "NotHTTP", target: "ftp://tok3n-in-user:s3cret-pass@127.0.0.1/hook"},
		{name: "RefusedQuery", target: "http://" + refused + "/hook?order=42&access_token=tok3n-in-query&sig=s3cret-pass", shown: "?order=42&access_token=xxxxx&sig=xxxxx"},
		{
			name: "TimeoutQuery", target: "http://" + hang.Addr() + "/hook?sign=s3cret-pass&token=tok3n-in-query", timeout: 50 * time.Millisecond,
			shown: "?sign=xxxxx&token=xxxxx",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			_, err := c.Do(ctx, NewRequest(http.MethodPost, tt.target))
			require.Error(t, err)
			require.NotContains(t, err.Error(), "tok3n")
			require.NotContains(t, err.Error(), "s3cret-pass")
			require.NotContains(t, err.Error(), "merchant")
			require.Contains(t, err.Error(), cmp.Or(tt.shown, "xxxxx@"), "the error still names the target")
			if tt.check != nil {
				tt.check(t, err)
			}
		})
	}
}

// resolvingTo returns a Client's config for a test: every name resolves to
// the next of answers (the last one once they run out), and every address
// the guard lets through is dialled to rcv, so that nothing leaves the
// machine; the recorder says which addresses those were.
func resolvingTo(rcv *httpsendtest.Receiver, answers ...netip.Addr) (*Config, *httpsendtest.Dials) {
	var mu sync.Mutex
	dials := rcv.Dials()
	return &Config{
		Resolver: ResolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
			mu.Lock()
			defer mu.Unlock()
			a := answers[0]
			if len(answers) > 1 {
				answers = answers[1:]
			}
			return []netip.Addr{a}, nil
		}),
		DialFunc: dials.Dial,
	}, dials
}

// TestDoRechecksEveryConnection: a name that resolves to a public address
// when one connection is made and to the metadata address when the next
// is (DNS rebinding) gets its second connection refused; each connection
// goes to the very address that was checked.
func TestDoRechecksEveryConnection(t *testing.T) {
	t.Parallel()
	// Connection: close, so that each request needs a connection.
	rcv := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(http.StatusOK, "success", "Connection", "close"))
	cfg, dials := resolvingTo(rcv, netip.MustParseAddr("8.8.4.4"), netip.MustParseAddr("169.254.169.254"))
	c, err := NewClient(cfg)
	require.NoError(t, err)

	res, err := c.Do(context.Background(), NewRequest(http.MethodPost, "http://rebinding.test/hook"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	_, err = c.Do(context.Background(), NewRequest(http.MethodPost, "http://rebinding.test/hook"))
	var blocked *BlockedError
	require.ErrorAs(t, err, &blocked)
	require.Equal(t, "169.254.169.254", blocked.Addr.String())
	require.Equal(t, []string{"8.8.4.4:80"}, dials.Addresses())
	require.Len(t, rcv.Requests(), 1)
}

// TestDoIgnoresProxyEnvironment: with HTTP_PROXY and HTTPS_PROXY set, as
// a host's environment may have them for other programs, a request still
// goes straight to the receiver's checked address; through a proxy, the
// guard would check the proxy's address instead of the receiver's.
func TestDoIgnoresProxyEnvironment(t *testing.T) {
	proxy := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(http.StatusOK, "from the proxy"))
	t.Setenv("HTTP_PROXY", proxy.URL())
	t.Setenv("HTTPS_PROXY", proxy.URL())
	t.Setenv("NO_PROXY", "")
	rcv := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(http.StatusOK, "success"))
	cfg, dials := resolvingTo(rcv, netip.MustParseAddr("8.8.4.4"))
	// Were the proxy used, its loopback address would be let through too.
	cfg.AllowNetworks = []string{"127.0.0.0/8"}
	c, err := NewClient(cfg)
	require.NoError(t, err)

	res, err := c.Do(context.Background(), NewRequest(http.MethodPost, "http://merchant.test/hook"))
	require.NoError(t, err)
	require.Equal(t, "success", string(res.Body))
	require.Equal(t, []string{"8.8.4.4:80"}, dials.Addresses())
	require.Empty(t, proxy.Requests())
}

// BenchmarkCredentialsOf is what every attempt spends finding its
// request's credentials, for the history to hide where a receiver quotes
// them: a signed webhook's headers, one of which (webhook-signature) is
// named like a credential.
func BenchmarkCredentialsOf(b *testing.B) {
	req := &Request{Method: http.MethodPost, URL: "https://merchant.example/notify", Header: http.Header{
		"webhook-id": {"msg_2Kq"}, "webhook-timestamp": {"1764259200"},
		"webhook-signature": {"v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
		"Content-Type":      {"application/json"}, "User-Agent": {"Herald"}, "Accept": {"*/*"}}}
	b.ReportAllocs()
	for b.Loop() {
		_ = credentialsOf(req)
	}
}
