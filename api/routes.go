package api

import "net/http"

// route is one operation of the API. The mux is built from routes, and a
// test checks the table against openapi.yaml, so the document cannot drift
// from what is served.
type route struct {
	method string
	// path is the mux path and the OpenAPI path: both write a path
	// parameter as {name}.
	path string
	// open routes skip the bearer token check: probes and Prometheus call
	// them without credentials.
	open   bool
	handle func(s *Server, w http.ResponseWriter, r *http.Request)
}

func (rt route) pattern() string { return rt.method + " " + rt.path }

// routes is every operation of the API, as DESIGN.md's HTTP API table lists
// them.
var routes = []route{
	{method: http.MethodPost, path: "/v1/notifications", handle: (*Server).enqueue},
	{method: http.MethodPost, path: "/v1/notifications/batch", handle: (*Server).enqueueBatch},
	{method: http.MethodGet, path: "/v1/notifications/{id}", handle: (*Server).get},
	{method: http.MethodDelete, path: "/v1/notifications/{id}", handle: (*Server).cancel},
	{method: http.MethodPost, path: "/v1/topics/{topic}/reserve", handle: (*Server).reserve},
	{method: http.MethodPost, path: "/v1/notifications/{id}/ack", handle: (*Server).ack},
	{method: http.MethodPost, path: "/v1/notifications/{id}/nack", handle: (*Server).nack},
	{method: http.MethodPost, path: "/v1/notifications/{id}/release", handle: (*Server).release},
	{method: http.MethodGet, path: "/v1/dead", handle: (*Server).listDead},
	{method: http.MethodPost, path: "/v1/dead/replay", handle: (*Server).replay},
	{method: http.MethodDelete, path: "/v1/dead", handle: (*Server).purge},
	{method: http.MethodGet, path: "/v1/stats", handle: (*Server).stats},
	{method: http.MethodGet, path: "/v1/endpoints", handle: (*Server).listEndpoints},
	{method: http.MethodPut, path: "/v1/endpoints/{name}", handle: (*Server).putEndpoint},
	{method: http.MethodGet, path: "/v1/endpoints/{name}", handle: (*Server).getEndpoint},
	{method: http.MethodDelete, path: "/v1/endpoints/{name}", handle: (*Server).deleteEndpoint},
	{method: http.MethodPost, path: "/v1/endpoints/{name}/enable", handle: (*Server).enableEndpoint},
	{method: http.MethodPost, path: "/v1/endpoints/{name}/pause", handle: (*Server).pauseEndpoint},
	{method: http.MethodPost, path: "/v1/endpoints/{name}/resume", handle: (*Server).resumeEndpoint},
	{method: http.MethodGet, path: "/v1/pauses", handle: (*Server).listPauses},
	{method: http.MethodPost, path: "/v1/topics/{topic}/pause", handle: (*Server).pauseTopic},
	{method: http.MethodPost, path: "/v1/topics/{topic}/resume", handle: (*Server).resumeTopic},
	{method: http.MethodGet, path: "/healthz", open: true, handle: func(s *Server, w http.ResponseWriter, r *http.Request) { s.probes.healthz(w, r) }},
	{method: http.MethodGet, path: "/readyz", open: true, handle: func(s *Server, w http.ResponseWriter, r *http.Request) { s.probes.readyz(w, r) }},
	{method: http.MethodGet, path: "/metrics", open: true, handle: func(s *Server, w http.ResponseWriter, r *http.Request) { s.probes.metrics(w, r) }},
}
