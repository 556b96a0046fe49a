// Package chaos runs Herald the way it is deployed, as real `herald serve`
// processes sharing one Redis, and breaks it on purpose: dispatchers are
// SIGKILLed and restarted, Redis is killed and restarted, a Sentinel master
// dies under load. Its tests keep a ledger of what was acknowledged and
// what a loopback receiver saw, and fail on anything lost, any two attempts
// of one notification at once, and any duplicate no kill explains.
//
// The package holds tests only. `go test ./internal/chaos` runs the short
// versions (part of `make test`); `make chaos` runs the long one.
package chaos
