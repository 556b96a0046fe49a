package notify

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// validNotification is a webhook notification that passes Validate.
func validNotification() *Notification {
	return &Notification{
		ID:      "n-1",
		Topic:   "order-notify",
		Channel: ChannelWebhook,
		Target:  "https://merchant.example/notify",
		Payload: json.RawMessage(`{"ok":true}`),
		Backoff: []Duration{0, Duration(time.Minute)},
		TTR:     Duration(TTRDefault),
		SendAt:  time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
	}
}

func TestValidateHeaders(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name    string
		headers map[string]string
		field   string // "" when valid
	}{
		{name: "Plain", headers: map[string]string{"X-Merchant": "m-42", "Authorization": "Bearer abc.def"}},
		{name: "TabAndObsText", headers: map[string]string{"X-A": "a\tb caf\xc3\xa9"}},
		{name: "ControlCharacter", headers: map[string]string{"X-A": "a\u0001b"}, field: "headers.X-A"},
		{name: "Delete", headers: map[string]string{"X-A": "a\x7fb"}, field: "headers.X-A"},
		{name: "Escape", headers: map[string]string{"X-A": "\x1b[2J"}, field: "headers.X-A"},
		{name: "NewLine", headers: map[string]string{"X-A": "a\r\nX-Injected: 1"}, field: "headers.X-A"},
		{name: "Nul", headers: map[string]string{"X-A": "a\x00"}, field: "headers.X-A"},
		{name: "NameWithSpace", headers: map[string]string{"X A": "v"}, field: "headers"},
		{name: "NameWithColon", headers: map[string]string{"X-A:": "v"}, field: "headers"},
		{name: "NameWithControl", headers: map[string]string{"X-\x01": "v"}, field: "headers"},
		{name: "EmptyName", headers: map[string]string{"": "v"}, field: "headers"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := validNotification()
			n.Headers = tt.headers
			err := n.Validate(0)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "want a field error, got %v", err)
			require.Equal(t, tt.field, fe.Field)
		})
	}
}

func TestValidateBackoffLength(t *testing.T) {
	t.Parallel()

	n := validNotification()
	n.Backoff = make([]Duration, MaxBackoff)
	require.NoError(t, n.Validate(0))

	n.Backoff = make([]Duration, MaxBackoff+1)
	err := n.Validate(0)
	var fe *FieldError
	require.True(t, errors.As(err, &fe), "want a field error, got %v", err)
	require.Equal(t, "backoff", fe.Field)
	require.True(t, strings.Contains(fe.Message, "100"), fe.Message)
}
