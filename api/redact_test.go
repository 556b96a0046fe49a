package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
)

// TestCredentialHeadersRedacted enqueues a notification that carries its
// receiver's credentials as headers: no API answer shows their values, and
// the other headers are shown as given. (That they are still sent is
// TestServe's CredentialHeadersStillSent.)
func TestCredentialHeadersRedacted(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	headers := map[string]string{
		"Authorization": "Bearer s3cr3t-token", "Cookie": "session=s3cr3t-cookie",
		"proxy-authorization": "Basic s3cr3t-proxy", "Set-Cookie": "a=s3cr3t-set", "X-Shop": "42",
	}
	want := map[string]any{
		"Authorization": "[redacted]", "Cookie": "[redacted]", "proxy-authorization": "[redacted]",
		"Set-Cookie": "[redacted]", "X-Shop": "42",
	}
	type record struct {
		Headers map[string]any `json:"headers"`
	}
	body := map[string]any{"id": "cred-1", "topic": "jobs", "payload": map[string]int{"a": 1}, "headers": headers}
	require.Equal(t, want, must[record](t, b, http.StatusCreated, "POST", "/v1/notifications", body).Headers, "enqueue")
	require.Equal(t, want, must[record](t, b, http.StatusOK, "POST", "/v1/notifications", body).Headers, "enqueue again")
	require.Equal(t, want, must[record](t, b, http.StatusOK, "GET", "/v1/notifications/cred-1", nil).Headers, "get")
	reserved := must[struct{ Notifications []record }](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=1", nil)
	require.Len(t, reserved.Notifications, 1)
	require.Equal(t, want, reserved.Notifications[0].Headers, "reserve")
}
