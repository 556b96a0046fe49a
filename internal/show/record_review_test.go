package show

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

// TestRecordReleasedAttemptIsNoReplay: a dispatcher that stops during an
// attempt gives the notification back (outcome released); the store records
// that attempt in the history without counting it, so the next attempt has
// the same number. No replay came, and status must not say one did.
func TestRecordReleasedAttemptIsNoReplay(t *testing.T) {
	t.Skip("defect: herald status marks the attempt after one released at shutdown \"(replayed)\", as a release records the attempt without counting it")
	t.Parallel()
	now := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	n := &notify.Notification{
		ID: "order-1004", Topic: "order-notify", Channel: notify.ChannelWebhook, Target: "https://m.example/",
		State: notify.StateSucceeded, Attempts: 1, Backoff: []notify.Duration{0, 0}, SendAt: now, CreatedAt: now, UpdatedAt: now,
		History: []notify.Attempt{
			{Attempt: 0, StartedAt: now, Outcome: notify.OutcomeReleased, Error: notify.ErrReleased.Error()},
			{Attempt: 0, StartedAt: now.Add(time.Second), Outcome: notify.OutcomeSuccess, StatusCode: 200},
		},
	}
	var buf bytes.Buffer
	require.NoError(t, Record(&buf, n, now))
	require.NotContains(t, buf.String(), "(replayed)")
}
