package api

import (
	"net/http"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/store"
)

// pauseList is the answer of GET /v1/pauses.
type pauseList struct {
	Pauses []client.Pause `json:"pauses"`
}

// listPauses handles GET /v1/pauses: every paused topic and endpoint and
// every disabled endpoint, with when it started, so that an operator
// without the dashboard can tell what is held back.
func (s *Server) listPauses(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	ps, err := s.client.Pauses(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, pauseList{Pauses: ps})
}

// pauseAnswer is the answer of a pause or a resume.
type pauseAnswer struct {
	Topic    string `json:"topic,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Paused   bool   `json:"paused"`
	// Resumed counts the notifications a resume made due at once.
	Resumed *int `json:"resumed,omitempty"`
}

func (s *Server) pauseTopic(w http.ResponseWriter, r *http.Request) {
	s.pause(w, r, store.PauseTopic, "topic")
}
func (s *Server) resumeTopic(w http.ResponseWriter, r *http.Request) {
	s.resume(w, r, store.PauseTopic, "topic")
}
func (s *Server) pauseEndpoint(w http.ResponseWriter, r *http.Request) {
	s.pause(w, r, store.PauseEndpoint, "name")
}
func (s *Server) resumeEndpoint(w http.ResponseWriter, r *http.Request) {
	s.resume(w, r, store.PauseEndpoint, "name")
}

// pause handles POST /v1/topics/{topic}/pause and
// /v1/endpoints/{name}/pause: no attempt of their notifications starts until
// the resume; attempts already running finish.
func (s *Server) pause(w http.ResponseWriter, r *http.Request, kind, param string) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	name := r.PathValue(param)
	if err := s.client.Pause(ctx, kind, name); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, answerFor(kind, name, true, nil))
}

// resume handles POST .../resume: what came due while paused starts at once.
func (s *Server) resume(w http.ResponseWriter, r *http.Request, kind, param string) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	name := r.PathValue(param)
	n, err := s.client.Resume(ctx, kind, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, answerFor(kind, name, false, &n))
}

func answerFor(kind, name string, paused bool, resumed *int) pauseAnswer {
	a := pauseAnswer{Paused: paused, Resumed: resumed}
	if kind == store.PauseTopic {
		a.Topic = name
	} else {
		a.Endpoint = name
	}
	return a
}

// enableEndpoint handles POST /v1/endpoints/{name}/enable: an endpoint its
// disable_after disabled is enabled, and its waiting notifications start
// at once.
func (s *Server) enableEndpoint(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	name := r.PathValue("name")
	n, err := s.client.EnableEndpoint(ctx, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, answerFor(store.PauseEndpoint, name, false, &n))
}
