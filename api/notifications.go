package api

import (
	"context"
	"net/http"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// enqueue handles POST /v1/notifications: 201 with the new record, 200 with
// the stored one for the same id and content or a replace, 409 otherwise.
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request) {
	var req notify.Request
	if err := readJSON(w, r, s.cfg.MaxBody, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	n, status, err := s.client.Enqueue(ctx, &req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, enqueueStatus(status), Redacted(n))
}

// enqueueStatus is the HTTP status of a successful enqueue.
func enqueueStatus(status store.EnqueueStatus) int {
	if status == store.Created {
		return http.StatusCreated
	}
	return http.StatusOK
}

// batchResult is one item of a batch's results.
type batchResult struct {
	ID string `json:"id"`
	// Status is the HTTP status the item would have had alone.
	Status int    `json:"status"`
	Error  *Error `json:"error,omitempty"`
}

type batchResponse struct {
	Results []batchResult `json:"results"`
}

// enqueueBatch handles POST /v1/notifications/batch: up to store.MaxBatch
// notifications in one store pipeline, with one result per item in order.
// The batch as a whole fails only for a bad envelope, an oversized body or
// an unreachable store.
func (s *Server) enqueueBatch(w http.ResponseWriter, r *http.Request) {
	body, release, err := s.readLargeBody(w, r, s.cfg.MaxBatchBody)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	reqs, errs, err := decodeBatch(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	results := make([]batchResult, len(reqs))
	valid := make([]*notify.Request, 0, len(reqs))
	index := make([]int, 0, len(reqs))
	for i, req := range reqs {
		results[i].ID = req.ID
		if errs[i] != nil {
			results[i].setError(errs[i])
			continue
		}
		valid = append(valid, req)
		index = append(index, i)
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	stored, err := s.client.EnqueueBatch(ctx, valid)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for j, res := range stored {
		item := &results[index[j]]
		if res.Notification != nil {
			item.ID = res.Notification.ID
		}
		if res.Err != nil {
			item.setError(res.Err)
			continue
		}
		item.Status = enqueueStatus(res.Status)
	}
	writeJSON(w, http.StatusOK, batchResponse{Results: results})
}

func (b *batchResult) setError(err error) {
	status, e := classify(err)
	b.Status, b.Error = status, &e
}

// get handles GET /v1/notifications/{id}: the record with its history.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.answerRecord(w, r, s.client.Get)
}

// cancel handles DELETE /v1/notifications/{id}: 200 with the cancelled
// record, 404 for an unknown id, 409 once it has succeeded or is dead.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	s.answerRecord(w, r, s.client.Cancel)
}

// answerRecord answers with the record that op returns for the path's id.
func (s *Server) answerRecord(w http.ResponseWriter, r *http.Request, op func(context.Context, string) (*notify.Notification, error)) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	n, err := op(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Redacted(n))
}
