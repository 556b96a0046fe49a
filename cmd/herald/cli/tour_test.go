package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

// TestTour follows the README's five-minute tour, command for command:
// herald serve on the embedded Redis of configs/demo.yaml, then the
// operator's commands against the address it logs, and the curl calls.
func TestTour(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "redis: {addrs: []}")
	s := startServe(t, e.config)
	m := regexp.MustCompile(`HERALD_REDIS_ADDRS=(127\.0\.0\.1:\d+)`).FindStringSubmatch(s.logs.String())
	require.NotNil(t, m)
	// alias herald='HERALD_REDIS_ADDRS=... ./herald --config configs/demo.yaml'
	config := writeConfig(t, strings.Replace(readFile(t, e.config), "redis: {addrs: []}", fmt.Sprintf("redis: {addrs: [%q]}", m[1]), 1))
	herald := func(args ...string) *result {
		t.Helper()
		r := run(t, append([]string{"--config", config}, args...))
		require.NoError(t, r.err, "herald %v", args)
		return r
	}
	recordOf := func(id string) *notify.Notification {
		var n notify.Notification
		require.NoError(t, json.Unmarshal([]byte(herald("status", id, "--json").out), &n))
		return &n
	}

	// A webhook to an address where nothing listens: every attempt fails.
	r := herald("enqueue", "--topic", "merchant-notify", "--id", "order-1001",
		"--target", "http://127.0.0.1:9/notify", "--payload", `{"order":"1001","status":"paid"}`)
	require.Contains(t, r.out, "enqueued order-1001")
	waitFor(t, 10*time.Second, "a retry", func() bool { return len(recordOf("order-1001").History) > 0 })
	r = herald("status", "order-1001")
	require.Regexp(t, `(?m)^0\s+\S+\s+\S+\s+retry\s+-\s+.*connection refused`, r.out)
	waitFor(t, 30*time.Second, "the dead letter", func() bool { return recordOf("order-1001").State == notify.StateDead })
	require.Len(t, recordOf("order-1001").History, 5)
	require.Contains(t, herald("dlq", "list").out, "order-1001")
	require.Equal(t, "1 matched, 1 replayed\n", herald("dlq", "replay", "--ids", "order-1001", "--reset-attempts").out)

	// curl: a job for a pull worker, reserved and acknowledged.
	require.Equal(t, http.StatusCreated, s.call(t, http.MethodPost, "/v1/notifications",
		`{"id":"invoice-42","topic":"jobs","payload":{"invoice":42}}`, nil))
	var reserved struct {
		Notifications []notify.Notification `json:"notifications"`
	}
	require.Equal(t, http.StatusOK, s.call(t, http.MethodPost, "/v1/topics/jobs/reserve?max=10&wait=5s", "", &reserved))
	require.Len(t, reserved.Notifications, 1)
	require.Equal(t, http.StatusNoContent, s.call(t, http.MethodPost, "/v1/notifications/invoice-42/ack",
		fmt.Sprintf(`{"receipt":%q}`, reserved.Notifications[0].Receipt), nil))
	require.Regexp(t, `state\s+succeeded`, herald("status", "invoice-42").out)

	// An SMS reminder, cancelled before it is due.
	herald("enqueue", "--topic", "appointment-reminder", "--id", "appt-42", "--target", "+14155550100",
		"--delay", "30m", "--payload", `{"name":"Ada","with":"Dr. Lee","starts_at":"2026-03-02T10:00:00+01:00"}`)
	require.Contains(t, herald("cancel", "appt-42").out, "cancelled appt-42")

	r = herald("stats")
	require.Regexp(t, `(?m)^jobs\s+0\s+0\s+0\s+0\s+1\s+0\s*$`, r.out)
	require.Regexp(t, `(?m)^appointment-reminder\s+0\s+0\s+0\s+0\s+0\s+0\s*$`, r.out)
}
