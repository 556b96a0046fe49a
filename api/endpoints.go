package api

import (
	"net/http"

	"github.com/heraldhq/herald/endpoint"
)

// endpointList is the answer of GET /v1/endpoints.
type endpointList struct {
	Endpoints []endpoint.View `json:"endpoints"`
}

// putEndpoint handles PUT /v1/endpoints/{name}: 201 with the new endpoint,
// 200 with a replaced one; secrets are never in the answer. A name the
// policies file defines is 409, since the file wins.
func (s *Server) putEndpoint(w http.ResponseWriter, r *http.Request) {
	var e endpoint.Endpoint
	if err := readJSON(w, r, s.cfg.MaxBody, &e); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	v, created, err := s.client.PutEndpoint(ctx, r.PathValue("name"), &e)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, v)
}

// getEndpoint handles GET /v1/endpoints/{name}: the endpoint in force, with
// its source, its secrets' ids and expiries and, for ed25519, their public
// keys.
func (s *Server) getEndpoint(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	v, err := s.client.GetEndpoint(ctx, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// listEndpoints handles GET /v1/endpoints: the file's and the API's, in
// name order.
func (s *Server) listEndpoints(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	vs, err := s.client.ListEndpoints(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, endpointList{Endpoints: vs})
}

// deleteEndpoint handles DELETE /v1/endpoints/{name}: 204, 404 for an
// unknown name, 409 for one only the policies file defines.
func (s *Server) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	if err := s.client.DeleteEndpoint(ctx, r.PathValue("name")); err != nil {
		s.fail(w, r, err)
		return
	}
	noContent(w)
}
