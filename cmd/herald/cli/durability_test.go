package cli

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
)

// TestServeWaitReplicas runs herald serve with redis.wait_replicas 1: an
// enqueue answers 201 while the replica keeps up; with the replica paused
// an enqueue and a cancel answer 503, so the caller knows nothing is done
// and tries again; once the replica is back the same enqueue answers 200,
// the same content already stored, and the cancel goes through.
func TestServeWaitReplicas(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplica(t, master)
	e := newEnv(t, fmt.Sprintf("redis: {addrs: [%q], wait_replicas: 1, wait_timeout: 200ms}", master.Addr))
	s := startServe(t, e.config, "--role", "api")
	body := func(id string) string {
		return fmt.Sprintf(`{"id": %q, "topic": "jobs", "payload": {"n": 1}}`, id)
	}

	require.Equal(t, http.StatusCreated, s.call(t, http.MethodPost, "/v1/notifications", body("w-1"), nil))

	replica.Pause()
	t.Cleanup(replica.Resume)
	var fail struct {
		Error struct{ Code string } `json:"error"`
	}
	require.Equal(t, http.StatusServiceUnavailable, s.call(t, http.MethodPost, "/v1/notifications", body("w-2"), &fail))
	require.Equal(t, "unavailable", fail.Error.Code)
	require.Equal(t, http.StatusServiceUnavailable, s.call(t, http.MethodDelete, "/v1/notifications/w-1", "", nil))

	replica.Resume()
	require.Equal(t, http.StatusOK, s.call(t, http.MethodPost, "/v1/notifications", body("w-2"), nil),
		"the retried enqueue finds the same content")
	var n notify.Notification
	require.Equal(t, http.StatusOK, s.call(t, http.MethodDelete, "/v1/notifications/w-1", "", &n))
	require.Equal(t, notify.StateCancelled, n.State)
	require.NoError(t, s.stop())
}
