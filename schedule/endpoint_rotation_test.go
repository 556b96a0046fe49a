package schedule_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
)

// TestRotationExpiryAtTheAttempt: while a rotation overlaps, a request
// carries both signatures; from the old secret's expires_at on, only the
// new one, though the endpoint, registered over the API, is still the one
// the dispatchers read and cached before the expiry.
func TestRotationExpiryAtTheAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rcv := newReceiver(t, func(_ int, w http.ResponseWriter) { _, _ = io.WriteString(w, "ok") })
	expires := time.Now().Add(1500 * time.Millisecond)
	_, err := b.store.PutEndpoint(ctx, "m", &endpoint.Endpoint{URL: rcv.URL,
		Secrets: []endpoint.Secret{{Value: secretA, ExpiresAt: &expires}, {Value: secretNew}}})
	require.NoError(t, err)
	b.startLimited(t, 2, schedule.Config{})

	b.enqueueEndpoint(t, "overlap", "m")
	b.waitState(t, "overlap", notify.StateSucceeded)
	time.Sleep(time.Until(expires))
	b.enqueueEndpoint(t, "expired", "m")
	b.waitState(t, "expired", notify.StateSucceeded)

	reqs := rcv.requests()
	require.Len(t, reqs, 2)
	for _, r := range reqs {
		id, sigs := r.headers.Get("webhook-id"), strings.Fields(r.headers.Get("webhook-signature"))
		require.NoError(t, verifyWith(t, secretNew, r), "%s: the new secret does not verify", id)
		switch id {
		case "overlap":
			require.True(t, r.at.Before(expires))
			require.Len(t, sigs, 2, "both secrets sign while the rotation overlaps")
			require.NoError(t, verifyWith(t, secretA, r), "the old secret does not verify before its expiry")
		case "expired":
			require.False(t, r.at.Before(expires))
			require.Len(t, sigs, 1, "the old secret signed after its expiry")
			require.Error(t, verifyWith(t, secretA, r), "the old secret verifies after its expiry")
		}
	}
}
