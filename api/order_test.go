package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/notify"
)

// TestOrderKey checks ordered delivery as an HTTP client sees it: a bad
// order_key is a 400 naming it, and the record of a notification waiting
// behind an earlier one of its key names that one.
func TestOrderKey(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})

	for _, tt := range []struct{ name, key string }{
		{"TooLong", strings.Repeat("k", 129)},
		{"BadCharacters", "trade 42/refund"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "order_key", "POST", "/v1/notifications",
				map[string]any{"topic": "jobs", "order_key": tt.key})
		})
	}

	t.Run("ReplaceIntoAnotherShard", func(t *testing.T) {
		// A plain notification given an order key by a replace: on this
		// store of 4 shards most such keys lead to another shard than the
		// id's, and the 409 says why rather than asking for the replace
		// the request already set.
		refused := 0
		for i := range 8 {
			body := map[string]any{"id": fmt.Sprint("plain-", i), "topic": "jobs", "delay": "1h"}
			must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", body)
			body["order_key"], body["replace"] = fmt.Sprint("key-", i), true
			status, out := b.do(t, "POST", "/v1/notifications", body)
			if status == http.StatusOK {
				continue
			}
			require.Equal(t, http.StatusConflict, status, "%s", out)
			require.Contains(t, string(out), "a replace cannot move it there")
			require.NotContains(t, string(out), "set replace")
			refused++
		}
		require.Positive(t, refused)
	})

	t.Run("RecordNamesWhatItWaitsBehind", func(t *testing.T) {
		paid := must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"id": "trade-42.paid", "topic": "jobs", "order_key": "trade-42"})
		require.Equal(t, "trade-42", paid.OrderKey)
		require.Empty(t, paid.WaitingFor, "the first of its key waits for nothing")
		refunded := must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"id": "trade-42.refunded", "topic": "jobs", "order_key": "trade-42"})
		require.Equal(t, "trade-42", refunded.OrderKey)
		require.Equal(t, "trade-42.paid", refunded.WaitingFor, "the answer names what it waits behind")
		got := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/trade-42.refunded", nil)
		require.Equal(t, "trade-42.paid", got.WaitingFor)

		b.requireError(t, http.StatusConflict, api.CodeOrdered, "", "POST", "/v1/notifications",
			map[string]any{"id": "trade-42.refunded", "topic": "jobs", "order_key": "trade-42", "delay": "1m", "replace": true})

		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=10&wait=1s", nil)
		require.Len(t, res.Notifications, 1, "only the head of the line is due")
		require.Equal(t, "trade-42.paid", res.Notifications[0].ID)
	})
}
