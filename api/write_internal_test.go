package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWriteJSONUnencodable: an answer JSON cannot hold (here a time past
// year 9999) is a 500 that says why, not the intended status with an empty
// body.
func TestWriteJSONUnencodable(t *testing.T) {
	w := httptest.NewRecorder()
	writeJSON(w, http.StatusOK, map[string]time.Time{"at": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.Equal(t, http.StatusInternalServerError, w.Code)
	var body errorBody
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	require.Equal(t, CodeInternal, body.Error.Code)
	require.Contains(t, body.Error.Message, "year outside of range")
}
