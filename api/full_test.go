package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/redistest"
)

// TestWhenRedisIsFull: with Redis at maxmemory (noeviction), an enqueue,
// single or batch, is a 503 that names the cause and asks for the same
// request again, not a generic unavailable store; the pull routes, a
// cancel and a purge of dead letters, which is how an operator makes room,
// still work.
// Once the limit is lifted the refused enqueue succeeds.
func TestWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t, redistest.Options{}).Client(t)
	b := setupOn(t, rdb, api.Config{})
	b.kill(t, "d", 3)
	b.enqueueJobs(t, 2)
	must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "later", "topic": "jobs", "delay": "1h"})

	// Full: maxmemory below what Redis holds, as when writes have filled
	// it (store's TestEnqueueWhenRedisIsFull fills one to the limit).
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "1").Err())

	one := map[string]any{"id": "new", "topic": "jobs"}
	e := b.requireError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "", "POST", "/v1/notifications", one)
	require.Contains(t, e.Message, "out of memory")
	e = b.requireError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "", "POST", "/v1/notifications/batch",
		map[string]any{"notifications": []any{one, map[string]any{"id": "new2", "topic": "jobs"}}})
	require.Contains(t, e.Message, "out of memory")

	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=10", nil)
	require.Len(t, res.Notifications, 2)
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/"+res.Notifications[0].ID+"/ack",
		map[string]string{"receipt": res.Notifications[0].Receipt})
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/"+res.Notifications[1].ID+"/nack",
		map[string]string{"receipt": res.Notifications[1].Receipt, "error": "busy"})
	must[map[string]any](t, b, http.StatusOK, "DELETE", "/v1/notifications/later", nil)
	purged := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead?topic=single", nil)
	require.Equal(t, 3, purged.Purged)

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications", one)
}
