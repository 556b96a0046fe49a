package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
)

// Error codes of the API's error body; each goes with one HTTP status.
const (
	CodeInvalidArgument  = "invalid_argument"   // 400
	CodeUnauthenticated  = "unauthenticated"    // 401
	CodeForbidden        = "forbidden"          // 403: a browser's request from another origin
	CodeHostNotAllowed   = "host_not_allowed"   // 403: a host name answered only with tokens (Config.Hosts)
	CodeNotFound         = "not_found"          // 404
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeConflict         = "conflict"           // 409: the id exists with other content
	CodeReserved         = "reserved"           // 409: a replace of a reserved notification
	CodeFinished         = "finished"           // 409: a cancel of a succeeded or dead notification
	CodeStaleReceipt     = "stale_receipt"      // 409: an ack or nack whose reservation has ended
	CodeOrdered          = "ordered"            // 409: a replace that would reorder its order key's line
	CodeTooLarge         = "too_large"          // 413
	CodeInternal         = "internal"           // 500
	CodeUnavailable      = "unavailable"        // 503: Redis is unreachable or too slow
)

// Error is the body of every error response, under "error", and the error
// of a failed item in a batch's results.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the offending field, as "backoff[2]", when there is one.
	Field string `json:"field,omitempty"`
}

// errorBody wraps Error as {"error": ...}.
type errorBody struct {
	Error Error `json:"error"`
}

// classify maps an error to its status and body: validation errors to 400
// with their field, the notify sentinels to 404 and 409, an oversized body
// to 413, a change not confirmed by replicas or refused by a full Redis to
// 503 saying so. Anything
// else comes from failing to reach Redis in time and is 503, which tells a
// client to try again; its detail is logged, not returned.
func classify(err error) (int, Error) {
	var fe *notify.FieldError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &fe):
		msg := fe.Message
		if fe.Field != "" {
			msg = fe.Error()
		}
		return http.StatusBadRequest, Error{Code: CodeInvalidArgument, Message: msg, Field: fe.Field}
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, Error{Code: CodeTooLarge, Message: fmt.Sprintf("body is larger than the limit of %d bytes", tooLarge.Limit)}
	case errors.Is(err, notify.ErrNotFound):
		return http.StatusNotFound, Error{Code: CodeNotFound, Message: err.Error()}
	case errors.Is(err, notify.ErrOtherShard):
		return http.StatusConflict, Error{Code: CodeConflict, Message: err.Error()}
	case errors.Is(err, notify.ErrConflict):
		return http.StatusConflict, Error{Code: CodeConflict, Message: err.Error() + "; set replace to reschedule it"}
	case errors.Is(err, notify.ErrReserved):
		return http.StatusConflict, Error{Code: CodeReserved, Message: err.Error() + "; try again after its attempt"}
	case errors.Is(err, notify.ErrFinished):
		return http.StatusConflict, Error{Code: CodeFinished, Message: err.Error()}
	case errors.Is(err, errLargeBodies):
		return http.StatusServiceUnavailable, Error{Code: CodeUnavailable, Message: "too many large batches are being read at once; try again"}
	case errors.Is(err, endpoint.ErrNotFound):
		return http.StatusNotFound, Error{Code: CodeNotFound, Message: err.Error()}
	case errors.Is(err, endpoint.ErrInFile):
		return http.StatusConflict, Error{Code: CodeConflict, Message: err.Error(), Field: "name"}
	case errors.Is(err, notify.ErrStaleReceipt):
		return http.StatusConflict, Error{Code: CodeStaleReceipt, Message: err.Error()}
	case errors.Is(err, notify.ErrNotReplicated):
		return http.StatusServiceUnavailable, Error{Code: CodeUnavailable, Message: "the change reached Redis but not enough replicas " +
			"in time (redis.wait_replicas): it may be lost if the master fails; read it back before trying again"}
	case errors.Is(err, notify.ErrOutOfMemory):
		return http.StatusServiceUnavailable, Error{Code: CodeUnavailable, Message: "Redis is out of memory (maxmemory reached) and refused the change; " +
			"send the same request again once memory is freed (" + notify.FreeingMemory + ")"}
	case errors.Is(err, notify.ErrOrdered):
		return http.StatusConflict, Error{Code: CodeOrdered, Message: err.Error() + "; cancel it and enqueue anew to go to the back of its line"}
	}
	return http.StatusServiceUnavailable, Error{Code: CodeUnavailable, Message: "the store is unavailable; try again"}
}

// fail writes err's response and logs what a client does not see; a
// client that has gone away is not a store failure and is not logged. A
// write a full Redis refused goes to the refusals' log, which summarises
// them, and its request line drops to info: while Redis is full every
// enqueue is refused, and a warning each would flood the log.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, body := classify(err)
	switch {
	case status < http.StatusInternalServerError || r.Context().Err() != nil:
	case errors.Is(err, notify.ErrOutOfMemory):
		s.refusals.refused(r, err)
		quietRequest(w)
	default:
		s.log.WarnContext(r.Context(), "api: store call failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeJSON(w, status, errorBody{body})
}

// writeError writes an error response that no Go error stands behind.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Error{Code: code, Message: message}})
}

// noContent answers 204, which no cache may keep either, as every other
// answer says.
func noContent(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// writeJSON writes v as the response body with status. v is encoded before
// the status goes out, so that one JSON cannot hold is a 500 saying so, not
// the status with an empty body. A failure to write means the client has
// gone, which nothing can be told about. No cache may keep the answer: a
// record carries its payload and what its receiver answered.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(errorBody{Error{Code: CodeInternal, Message: "encode the answer: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
