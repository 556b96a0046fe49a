// Package httpsend is the HTTP plumbing that the webhook, sms and poll
// senders share, so that each of them gets the same guarantees:
//
//   - an SSRF guard in the dialer (Guard) that refuses loopback, private,
//     link-local, multicast, unspecified, carrier-grade NAT and reserved
//     addresses after DNS resolution, unless the configuration allows their
//     networks;
//   - no proxy from the environment (it would hide the real destination from
//     the guard), no cookie jar (cookies must not travel between
//     notifications), no redirects followed, and keep-alive connections
//     reused across attempts;
//   - a response read capped at ReadLimit;
//   - one classification of outcomes under a policy: ClassifyError for
//     transport failures and ClassifyStatus for HTTP statuses.
package httpsend

import (
	"cmp"
	"context"
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
	"github.com/heraldhq/herald/policy"
)

// Defaults and limits of the client.
const (
	// ReadLimit is how much of a response body is read; the rest is
	// dropped with the connection.
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

// policiesOrDefault returns f, or, when f is nil, a function that returns a
// set holding only the default policy: what a sender uses when it is given
// no policies.
func policiesOrDefault(f func() *policy.Set) func() *policy.Set {
	if f != nil {
		return f
	}
	set, err := policy.NewSet(nil, nil)
	if err != nil {
		panic(fmt.Sprintf("httpsend: the default policy set is invalid: %v", err))
	}
	return func() *policy.Set { return set }
}

// Request starts a request bound to ctx. Set its headers and body, then pass
// it to Do.
func (c *Client) Request(ctx context.Context) *resty.Request {
	return c.rc.R().SetContext(ctx)
}

// clientHeaders are the headers the client sets itself or that would break
// the request's framing, which a notification's own headers cannot set.
var clientHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Content-Type", "User-Agent"}

// SetHeaders sets a notification's own headers on req, except the client's
// own (Host, Content-Length, Transfer-Encoding, Connection, Content-Type,
// User-Agent) and those named in reserved, which the sender sets. Names
// compare case-insensitively.
func SetHeaders(req *resty.Request, headers map[string]string, reserved ...string) {
	for k, v := range headers {
		ck := http.CanonicalHeaderKey(k)
		if slices.Contains(clientHeaders, ck) || slices.ContainsFunc(reserved, func(r string) bool { return http.CanonicalHeaderKey(r) == ck }) {
			continue
		}
		req.SetHeader(k, v)
	}
}

// Result is what a receiver answered: its status, headers and the first
// ReadLimit bytes of its body.
type Result struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

// Do sends req with method to target and reads the response. The error is
// the transport's (a refused address, a refused connection, a timeout), or a
// permanent one for a target that is not an http or https URL; classify it
// with ClassifyError, and the Result with ClassifyStatus.
func (c *Client) Do(req *resty.Request, method, target string) (*Result, error) {
	if u, err := url.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, notify.Permanent(fmt.Errorf("target %q is not an http or https URL", target))
	}
	resp, err := req.Execute(method, target)
	if err != nil {
		if resp != nil && resp.RawResponse != nil {
			resp.RawResponse.Body.Close()
		}
		return nil, err
	}
	raw := resp.RawBody()
	defer raw.Close()
	body, err := io.ReadAll(io.LimitReader(raw, ReadLimit))
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	// Draining a short remainder lets the connection be reused; a longer
	// one is cheaper to drop with the connection.
	_, _ = io.CopyN(io.Discard, raw, 4<<10)
	return &Result{StatusCode: resp.StatusCode(), Header: resp.Header(), Body: body}, nil
}

// Response returns what the history keeps of r: the status and the body cut
// to notify.MaxErrorLen bytes.
func (r *Result) Response() notify.Response {
	return notify.Response{StatusCode: r.StatusCode, Body: notify.CutError(string(r.Body))}
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
