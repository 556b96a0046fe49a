// Package api is Herald's HTTP API: JSON under /v1 for producers, pull
// consumers and operators, plus /healthz, /readyz and /metrics. openapi.yaml
// beside this file documents every route, and a test keeps it equal to the
// route table the server is built from.
//
// The API is a thin layer over package client: enqueue, cancel, get, reserve,
// ack and nack go through the same client a Go service uses without HTTP,
// so both resolve topic and policy defaults and validate identically.
//
// Operators pause and resume topics and endpoints (POST
// /v1/topics/{topic}/pause, /resume, the same under /v1/endpoints/{name})
// and list what is paused or disabled, with since when (GET /v1/pauses).
//
// # Running
//
// New builds a Server, an http.Handler; Serve runs it on a listener until a
// context ends and then shuts down gracefully:
//
//	srv, err := api.New(&api.Config{
//		Store:        st,
//		PoliciesFunc: watcher.Current,
//		Tokens:       cfg.API.Tokens,
//		Metrics:      m.Handler(),
//		Observer:     m,
//	})
//	l, err := net.Listen("tcp", cfg.API.Listen)
//	err = srv.Serve(ctx, l)
//
// A process that serves no API, or none yet, answers the probes with
// NewProbes: herald serve does while it waits for Redis at start-up (503 on
// /readyz and on every other path), and a dispatcher-only process does for
// good. Serve runs any handler with the same timeouts and graceful
// shutdown.
//
// # Limits
//
// A request body over Config.MaxBody is 413, and so is a batch body over
// Config.MaxBatchBody; each notification's payload is held to MaxBody in a
// batch too. A batch holds at most 1000 notifications (400 above). Every
// request's store calls are bounded by Config.Timeout, so a Redis that is
// down or stuck costs a 503, never a hung client. At most
// Config.MaxLargeBodies bodies larger than MaxBody are read and decoded at
// once; another waits up to Timeout for its turn, then gets 503, so a burst
// of 16 MiB batches cannot take the process's memory. A bad field is found
// in one more pass over the body, however long its arrays.
//
// # Host names without tokens
//
// With no Config.Tokens, anyone who reaches the API may call it, and so
// may a web page an operator opens: a page at http://evil.example:8080 can
// point evil.example at 127.0.0.1 (DNS rebinding), and its scripts are
// then same-origin with the API, past the cross-origin check. What tells
// them apart is the Host the browser sends, the page's own name. So /v1
// and /ui/ answer only a Host (port aside) that is an IP address,
// localhost, or a name in Config.Hosts, and refuse others with 403
// (host_not_allowed on /v1, plain text on /ui/) before any handler runs.
// AnyHost ("*") answers every name, for a proxy in front that checks it.
// /healthz, /readyz and /metrics answer any name, so a Prometheus that
// scrapes a service name keeps working. With tokens, the Host does not
// matter: a rebinding page has no token, and the dashboard's SameSite=Strict
// cookie is kept per host.
//
// # Credentials in headers
//
// A notification's headers are sent with every attempt, and may carry the
// receiver's credentials. Answers never show the values of Authorization,
// Proxy-Authorization, Cookie, Set-Cookie, nor of a header named for a
// credential (notify.CredentialHeader: X-Api-Key, X-Gitlab-Token, ...;
// matched in any case): the record in the enqueue, get, cancel, reserve and
// dead-list answers has "[redacted]" in their place (see Redacted), as
// herald status --json does, and so has an attempt's error that quotes
// them. A target's user information and credential query parameters
// (?access_token=) show as "xxxxx". The stored notification keeps them, so
// attempts still send them, and an enqueue repeated with the same headers
// is still the same content (200). Every answer says Cache-Control:
// no-store. The request log records no headers and no query at all.
//
// # Errors
//
// Every error answer has the body
//
//	{"error": {"code": "invalid_argument", "message": "backoff[2]: ...", "field": "backoff[2]"}}
//
// with 400 (invalid_argument: a bad body, query parameter or value, named in
// field), 401 (unauthenticated), 403 (forbidden: a browser's request from
// another origin, such as a page on another site posting to the API;
// programs are not browsers and are not affected; host_not_allowed: a
// host name not answered without tokens, see above), 404 (not_found), 405
// (method_not_allowed), 409 (conflict, reserved, finished, stale_receipt,
// ordered), 413 (too_large), 500 (internal: a fault of the server's own)
// or 503 (unavailable: Redis unreachable, or out of memory and refusing
// writes: try again; or, with
// redis.wait_replicas, a change not confirmed by enough replicas in time,
// which the master has: read it back before trying again).
//
// # A full Redis
//
// While Redis is at maxmemory, the writes it refuses are 503 as above, and
// the log has the first refusal, then a summary of how many followed at
// most every 10 s, not a warning each; their request lines are at info.
// /readyz stays 200, since deliveries and pull workers go on, and with
// Config.RedisMemoryFunc shows under details.memory how full Redis is,
// warning from MemoryWarningRatio (90%) of maxmemory on.
package api
