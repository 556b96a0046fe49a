// Package httpsend is the HTTP plumbing that the webhook, sms and poll
// senders share, so that each of them gets the same guarantees:
//
//   - an SSRF guard in the dialer (Guard) that refuses, after DNS
//     resolution, every address the IANA special-purpose registries mark
//     not globally reachable (loopback, private, link-local, carrier-grade
//     NAT, benchmarking, documentation, reserved and the like), multicast,
//     and IPv6 addresses that carry such an IPv4 address (NAT64, 6to4,
//     Teredo, IPv4-compatible, SIIT), unless the configuration allows their
//     networks;
//   - no proxy from the environment (it would hide the real destination from
//     the guard), no cookie jar (cookies must not travel between
//     notifications), no redirects followed, and keep-alive connections
//     reused across attempts (a Replayable request cut off on one that the
//     receiver closed goes again at once on a new one);
//   - "Accept: */*" unless the sender asks for a type, whatever the body's
//     type;
//   - a response read capped at ReadLimit: its headers, and the first
//     ReadLimit bytes of its body;
//   - what the history keeps of an answer (Result.Response, StatusError)
//     shows "[redacted]" where the receiver echoed the request's
//     credentials, which the API never shows;
//   - one classification of outcomes under a notification's notify.Rules:
//     ClassifyError for transport failures and ClassifyStatus for HTTP
//     statuses.
package httpsend

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/go-resty/resty/v2"

	"github.com/heraldhq/herald/notify"
)

// Defaults and limits of the client.
const (
	// ReadLimit is how much of a response body is read; the rest is
	// dropped with the connection. A response whose headers alone are
	// larger is an error.
	ReadLimit = 64 << 10
	// UserAgentDefault is the User-Agent when the config names none.
	UserAgentDefault = "herald"
	// MaxIdleConnsPerHostDefault is how many idle keep-alive connections are
	// kept per receiver: enough for a dispatcher's workers to reuse
	// connections to one busy merchant instead of opening one per attempt.
	MaxIdleConnsPerHostDefault = 64

	keepAlive   = 30 * time.Second
	idleTimeout = 90 * time.Second
)

// Config configures a Client. Each sender's config carries one as its HTTP
// field, so one value built from senders.webhook.allow_networks can serve
// them all. The zero value is usable and refuses every internal network.
type Config struct {
	// AllowNetworks lists the CIDRs the SSRF guard lets through although
	// they are loopback, private or otherwise internal, such as
	// "127.0.0.0/8" for a receiver on the same machine. Default: none.
	AllowNetworks []string
	// Resolver resolves target host names. Default: net.DefaultResolver.
	Resolver Resolver
	// DialFunc connects to a checked address. Default: a net.Dialer.
	DialFunc DialFunc
	// UserAgent is sent with every request. Default: UserAgentDefault.
	UserAgent string
	// Logger receives the HTTP library's own warnings. Default: a
	// warn-level text handler on stderr.
	Logger *slog.Logger
}

// Client sends requests through the guard and reads their responses. It is
// safe for concurrent use; build one per sender and keep it, so connections
// are reused.
type Client struct {
	rc *resty.Client
}

// NewClient returns a client for cfg, or an error naming a bad
// allow_networks entry.
func NewClient(cfg *Config) (*Client, error) {
	allow, err := ParsePrefixes(cfg.AllowNetworks)
	if err != nil {
		return nil, err
	}
	guard := NewGuard(allow, cfg.Resolver, cfg.DialFunc)
	transport := &http.Transport{
		// No proxy, not even from the environment: the guard would check
		// the proxy's address instead of the receiver's.
		Proxy:                 nil,
		DialContext:           guard.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4 * MaxIdleConnsPerHostDefault,
		MaxIdleConnsPerHost:   MaxIdleConnsPerHostDefault,
		IdleConnTimeout:       idleTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// net/http would read up to 10 MiB of headers from a receiver
		// for each attempt; no acknowledgement needs more than the body
		// is allowed.
		MaxResponseHeaderBytes: ReadLimit,
	}
	hc := &http.Client{
		Transport: transport,
		// Returning the 3xx itself lets the policy classify it; following it
		// would send the notification somewhere its producer did not name.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	rc := resty.NewWithClient(hc).
		SetLogger(restyLogger{LoggerOrDefault(cfg.Logger)}).
		SetHeader("User-Agent", cmp.Or(cfg.UserAgent, UserAgentDefault)).
		SetDoNotParseResponse(true)
	return &Client{rc: rc}, nil
}

// LoggerOrDefault returns l, or the house default (warn level, text, on
// stderr) when l is nil.
func LoggerOrDefault(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Request is one HTTP request of an attempt, as a sender builds it: the
// client adds the User-Agent, sends it through the SSRF guard and reads the
// answer (Client.Do). It keeps the HTTP library out of the senders' code.
type Request struct {
	// Method is the HTTP method, such as http.MethodPost.
	Method string
	// URL is the target; Do refuses anything but an http or https URL.
	URL string
	// Header holds the request's headers. Set canonicalizes names; assign
	// Header[name] directly to send a name as it is spelt ("webhook-id").
	// Do adds the client's own (User-Agent, Accept, Content-Type) to it.
	Header http.Header
	// Body is sent as it is; nil sends none. Without a Content-Type header,
	// the body's type is sniffed (http.DetectContentType).
	Body []byte
	// Replayable says the receiver takes the request twice as it takes it
	// once, as a webhook's receiver de-duplicates by webhook-id. Such a
	// request, cut off without an answer on a kept-alive connection that
	// the receiver closed as it went out, is sent again at once on a new
	// connection, as a GET is, rather than failing its attempt with an EOF.
	// Leave it unset where a second request does a second thing (an SMS).
	Replayable bool
}

// headerRoom is how many headers a new request has room for, a signed
// webhook's and the client's own: the most a map holds in one allocation.
const headerRoom = 8

// NewRequest returns a request of method to url with no headers and no body.
func NewRequest(method, url string) *Request {
	return &Request{Method: method, URL: url, Header: make(http.Header, headerRoom)}
}

// clientHeaders are the headers the client sets itself or that would break
// the request's framing, which a notification's own headers cannot set.
// Accept-Encoding is net/http's: set by anyone else, it leaves a compressed
// answer compressed, and a receiver's "success" unreadable.
var clientHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Content-Type", "User-Agent", "Accept-Encoding"}

// SetNotificationHeaders sets a notification's own headers on r, except the
// client's own (Host, Content-Length, Transfer-Encoding, Connection,
// Content-Type, User-Agent, Accept-Encoding) and those named in reserved,
// which the sender sets. Names compare case-insensitively.
func (r *Request) SetNotificationHeaders(headers map[string]string, reserved ...string) {
	for k, v := range headers {
		ck := http.CanonicalHeaderKey(k)
		if slices.Contains(clientHeaders, ck) || slices.ContainsFunc(reserved, func(r string) bool { return http.CanonicalHeaderKey(r) == ck }) {
			continue
		}
		r.Header.Set(k, v)
	}
}

// Result is what a receiver answered: its status, headers and the first
// ReadLimit bytes of its body.
type Result struct {
	StatusCode int
	Header     http.Header
	Body       []byte
	// credentials are the secrets the request carried (credentialsOf), which
	// what the history keeps of the answer hides where the receiver echoed
	// them.
	credentials []string
}

// Do sends req, bound to ctx, and reads the response: of a 2xx whose body
// broke off, what arrived. The error is the
// transport's (a refused address, a refused connection, a timeout), or a
// permanent one for a target that is not an http or https URL or a header
// that no request can carry; classify it with ClassifyError, and the Result
// with ClassifyStatus.
func (c *Client) Do(ctx context.Context, req *Request) (*Result, error) {
	if !notify.ValidHTTPURL(req.URL) {
		return nil, notify.Permanent(fmt.Errorf("target %q is not an http or https URL", notify.RedactedURL(req.URL)))
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			if !notify.ValidHeaderName(k) || !notify.ValidHeaderValue(v) {
				// net/http would refuse the request the same way on every
				// attempt, so it is not worth retrying.
				return nil, notify.Permanent(fmt.Errorf("header %q: invalid name or value (control characters)", k))
			}
		}
	}
	if req.Header == nil {
		req.Header = make(http.Header, headerRoom)
	}
	rr := c.rc.R().SetContext(ctx)
	// The request's own map, not a copy: resty clones it into the HTTP
	// request anyway.
	rr.Header = req.Header
	if _, ok := rr.Header["Idempotency-Key"]; req.Replayable && !ok {
		// net/http resends only requests it knows to be idempotent; a nil
		// value says so without sending the header.
		rr.Header["Idempotency-Key"] = nil
	}
	if rr.Header.Get("Accept") == "" {
		// Any answer will do: receivers acknowledge in text as often as in
		// JSON. Without this, resty would copy a JSON or XML Content-Type
		// here, and a receiver that cannot answer in that type may refuse
		// the request (406 Not Acceptable).
		rr.Header.Set("Accept", "*/*")
	}
	if req.Body != nil {
		// A reader, not the bytes: resty copies a []byte body three times
		// (into its buffer, into the request, and again for GetBody), while
		// net/http sizes a *bytes.Reader and rewinds it itself. Resty would
		// call any reader JSON, so the sniffing it does for bytes is done
		// here.
		if rr.Header.Get("Content-Type") == "" {
			rr.Header.Set("Content-Type", http.DetectContentType(req.Body))
		}
		rr.SetBody(bytes.NewReader(req.Body))
	} else if req.Method != http.MethodGet && req.Method != http.MethodHead {
		// Resty sends an empty body chunked unless told its length; some
		// receivers refuse a chunked request (411 Length Required).
		rr.SetContentLength(true)
	}
	resp, err := rr.Execute(req.Method, req.URL)
	if err != nil {
		if resp != nil && resp.RawResponse != nil {
			resp.RawResponse.Body.Close()
		}
		return nil, redactURLError(err, req.URL)
	}
	raw := resp.RawBody()
	defer raw.Close()
	length := resp.RawResponse.ContentLength
	if raw == http.NoBody {
		// The answer to a HEAD announces the length of a body it does
		// not carry.
		length = 0
	}
	body, err := readBody(raw, length)
	if code := resp.StatusCode(); err != nil && (code < 200 || code > 299) {
		return nil, fmt.Errorf("read response: %w", err)
	}
	// A 2xx whose body broke off (the connection dropped, the attempt's
	// timeout) has been taken: retried as a network error it would be
	// delivered twice. A success_body, or a poll's condition, is judged
	// on what arrived, and asks again where that does not hold it.
	// Draining a short remainder lets the connection be reused; a longer
	// one is cheaper to drop with the connection.
	_, _ = io.CopyN(io.Discard, raw, 4<<10)
	return &Result{StatusCode: resp.StatusCode(), Header: resp.Header(), Body: body, credentials: credentialsOf(req)}, nil
}

// redactURLError names target in a transport error as answers show it
// (notify.RedactedURL): net/http hides a URL's password but not a token in
// the user's place, and the error goes to the history, which the API and
// the UI show.
func redactURLError(err error, target string) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return &url.Error{Op: ue.Op, URL: notify.RedactedURL(target), Err: ue.Err}
}

// readBody reads the first ReadLimit bytes of a response body of length
// bytes (-1: unknown), and on an error what it read. A known length is read into a buffer of its size,
// where io.ReadAll would start at 512 bytes for answers that are mostly a
// word.
func readBody(r io.Reader, length int64) ([]byte, error) {
	if length < 0 || length > ReadLimit {
		return io.ReadAll(io.LimitReader(r, ReadLimit))
	}
	b := make([]byte, length)
	n, err := io.ReadFull(r, b)
	return b[:n], err
}

// Response returns what the history keeps of r: the status and the body cut
// to notify.MaxErrorLen bytes, with the request's credentials hidden.
func (r *Result) Response() notify.Response {
	return notify.Response{StatusCode: r.StatusCode, Body: r.Recorded(r.Body)}
}

// Recorded returns part of r's answer as the history keeps it: cut to
// notify.MaxErrorLen bytes, and with "[redacted]" for each credential of
// the request that the receiver echoed, as a server in debug mode does.
// The API never shows those values in a record; nor does its history. A
// sender that quotes the answer in its error passes the quote through it
// too.
func (r *Result) Recorded(b []byte) string {
	return notify.CutError(notify.HideCredentials(string(b), r.credentials))
}

// credentialsOf returns what req carries that is secret
// (notify.Credentials).
func credentialsOf(req *Request) []string {
	return notify.Credentials(req.URL, req.Header)
}

// restyLogger sends the HTTP library's messages to slog.
type restyLogger struct{ l *slog.Logger }

func (r restyLogger) Errorf(format string, v ...any) {
	r.l.Error("httpsend: " + fmt.Sprintf(format, v...))
}

func (r restyLogger) Warnf(format string, v ...any) {
	r.l.Warn("httpsend: " + fmt.Sprintf(format, v...))
}

func (r restyLogger) Debugf(format string, v ...any) {
	r.l.Debug("httpsend: " + fmt.Sprintf(format, v...))
}
