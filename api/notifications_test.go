package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

func TestEnqueueRecordFields(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	sendAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	body := map[string]any{
		"id": "order-1", "topic": "orders", "payload": map[string]any{"order": 1, "status": "paid"},
		"send_at": sendAt.Format(time.RFC3339), "headers": map[string]string{"X-Shop": "42"},
	}
	rec := must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications", body)
	for _, field := range []string{"id", "topic", "channel", "target", "state", "attempts", "backoff", "payload",
		"send_at", "next_attempt_at", "created_at", "updated_at", "history"} {
		require.Contains(t, rec, field)
	}
	require.NotContains(t, rec, "receipt")
	require.Equal(t, "order-1", rec["id"])
	require.Equal(t, "webhook", rec["channel"], "the topic's channel")
	require.Equal(t, "https://merchant.test/notify", rec["target"], "the topic's target")
	require.Equal(t, "scheduled", rec["state"])
	require.EqualValues(t, 0, rec["attempts"])
	require.Equal(t, []any{"0s", "0s", "2m", "10m", "10m", "1h", "2h", "6h", "15h"}, rec["backoff"],
		"the default policy's array, as duration strings")
	require.Equal(t, map[string]any{"order": float64(1), "status": "paid"}, rec["payload"])
	require.Equal(t, sendAt.Format(time.RFC3339), rec["send_at"])
	require.Equal(t, sendAt.Format(time.RFC3339), rec["next_attempt_at"], "attempt 0 is due at send_at + backoff[0]")
	require.Equal(t, []any{}, rec["history"])

	got := must[map[string]any](t, b, http.StatusOK, "GET", "/v1/notifications/order-1", nil)
	require.Equal(t, rec, got, "GET returns the record the enqueue returned")
}

func TestEnqueueIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	body := map[string]any{"id": "appt-7", "topic": "jobs", "delay": "30m", "payload": map[string]int{"a": 1}}
	first := must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", body)

	t.Run("SameContentIs200", func(t *testing.T) {
		again := must[notify.Notification](t, b, http.StatusOK, "POST", "/v1/notifications", body)
		require.Equal(t, first.CreatedAt, again.CreatedAt)
		require.Equal(t, first.NextAttemptAt, again.NextAttemptAt, "a retried delay request changes nothing")
	})
	t.Run("OtherContentIs409", func(t *testing.T) {
		other := map[string]any{"id": "appt-7", "topic": "jobs", "delay": "45m"}
		b.requireError(t, http.StatusConflict, api.CodeConflict, "", "POST", "/v1/notifications", other)
	})
	t.Run("ReplaceReschedules", func(t *testing.T) {
		moved := map[string]any{"id": "appt-7", "topic": "jobs", "delay": "45m", "replace": true}
		rec := must[notify.Notification](t, b, http.StatusOK, "POST", "/v1/notifications", moved)
		require.True(t, rec.NextAttemptAt.After(*first.NextAttemptAt))
	})
	t.Run("ReplaceOfReservedIs409", func(t *testing.T) {
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "busy", "topic": "jobs"})
		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?max=10&wait=5s", nil)
		require.Len(t, res.Notifications, 1)
		b.requireError(t, http.StatusConflict, api.CodeReserved, "", "POST", "/v1/notifications",
			map[string]any{"id": "busy", "topic": "jobs", "delay": "1m", "replace": true})
	})
	t.Run("RandomIDWhenNone", func(t *testing.T) {
		rec := must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"topic": "jobs"})
		require.True(t, notify.ValidID(rec.ID))
	})
}

func TestEnqueueValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	tests := []struct {
		name  string
		body  string
		field string
	}{
		{name: "UnknownField", body: `{"topic":"jobs","colour":"red"}`, field: "colour"},
		{name: "WrongType", body: `{"topic":5}`, field: "topic"},
		{name: "BadBackoffEntry", body: `{"topic":"jobs","backoff":["1s","2m","soon"]}`, field: "backoff[2]"},
		{name: "NegativeBackoffEntry", body: `{"topic":"jobs","backoff":[0,-3]}`, field: "backoff[1]"},
		{name: "BadSendAt", body: `{"topic":"jobs","send_at":"tomorrow"}`, field: "send_at"},
		{name: "NumberSendAt", body: `{"topic":"jobs","send_at":1700000000}`, field: "send_at"},
		{name: "BadDelay", body: `{"topic":"jobs","delay":{}}`, field: "delay"},
		{name: "HeaderValueNotString", body: `{"topic":"jobs","headers":{"X-Ok":"1","X-Bad":2}}`, field: "headers.X-Bad"},
		{name: "SendAtAndDelay", body: `{"topic":"jobs","send_at":"2030-01-01T00:00:00Z","delay":"1m"}`, field: "delay"},
		{name: "BadTopic", body: `{"topic":"Bad Topic"}`, field: "topic"},
		{name: "BadID", body: `{"id":"a b","topic":"jobs"}`, field: "id"},
		{name: "BadChannel", body: `{"topic":"new","channel":"pigeon"}`, field: "channel"},
		{name: "NoTarget", body: `{"topic":"new","channel":"webhook"}`, field: "target"},
		{name: "BadPhone", body: `{"topic":"new","channel":"sms","target":"555"}`, field: "target"},
		{name: "UnknownPolicy", body: `{"topic":"jobs","policy":"nope"}`, field: "policy"},
		{name: "ZeroTTR", body: `{"topic":"jobs","ttr":0}`, field: "ttr"},
		{name: "BadHeaderName", body: `{"topic":"jobs","headers":{"a b":"1"}}`, field: "headers"},
		{name: "NotAnObject", body: `[{"topic":"jobs"}]`},
		{name: "Null", body: `null`},
		{name: "Empty", body: ``},
		{name: "Syntax", body: `{"topic":"jobs",}`},
		{name: "Truncated", body: `{"topic":"jo`},
		{name: "TrailingData", body: `{"topic":"jobs"} {"topic":"jobs"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, tt.field, "POST", "/v1/notifications", tt.body)
		})
	}
}

// TestDuplicateMembersRefused: a body that gives a field twice is refused
// naming the field, rather than one of the two values silently winning: an
// id given as "id" and "ID" would store the notification under the second,
// and a batch's "notifications" given twice would enqueue only the second
// list. A payload is the caller's JSON and is kept as given.
func TestDuplicateMembersRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	tests := []struct {
		name, method, path, body, field string
	}{
		{"Topic", "POST", "/v1/notifications", `{"id":"dup-1","topic":"jobs","topic":"orders"}`, "topic"},
		{"IDInOtherCase", "POST", "/v1/notifications", `{"id":"dup-2","topic":"jobs","ID":"dup-3"}`, "id"},
		{"Escaped", "POST", "/v1/notifications", `{"id":"dup-4","topic":"jobs","\u0069d":"dup-5"}`, "id"},
		{"Header", "POST", "/v1/notifications", `{"id":"dup-6","topic":"jobs","headers":{"X-A":"1","X-A":"2"}}`, "headers.X-A"},
		{"BatchEnvelope", "POST", "/v1/notifications/batch", `{"notifications":[{"id":"dup-7","topic":"jobs"}],"notifications":[]}`, "notifications"},
		{"Receipt", "POST", "/v1/notifications/dup-1/ack", `{"receipt":"a","receipt":"b"}`, "receipt"},
		{"ReplayTopic", "POST", "/v1/dead/replay", `{"topic":"jobs","topic":"single"}`, "topic"},
		{"EndpointSecret", "PUT", "/v1/endpoints/dup", `{"url":"https://m.example/n","secrets":[{"value":"x","value":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}]}`, "secrets[0].value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, tt.field, tt.method, tt.path, tt.body)
		})
	}
	for _, id := range []string{"dup-1", "dup-2", "dup-3", "dup-4", "dup-5", "dup-6", "dup-7"} {
		b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "GET", "/v1/notifications/"+id, nil)
	}
	b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "GET", "/v1/endpoints/dup", nil)

	t.Run("BatchItem", func(t *testing.T) {
		res := must[batchResults](t, b, http.StatusOK, "POST", "/v1/notifications/batch",
			`{"notifications":[{"id":"dup-8","topic":"jobs","topic":"orders"},{"id":"dup-9","topic":"jobs"}]}`)
		require.Len(t, res.Results, 2)
		require.Equal(t, http.StatusBadRequest, res.Results[0].Status)
		require.Equal(t, "topic", res.Results[0].Error.Field)
		require.Equal(t, http.StatusCreated, res.Results[1].Status)
	})
	t.Run("PayloadIsKeptAsGiven", func(t *testing.T) {
		rec := must[map[string]any](t, b, http.StatusCreated, "POST", "/v1/notifications",
			`{"id":"dup-10","topic":"jobs","payload":{"a":1,"a":2}}`)
		require.NotNil(t, rec["payload"])
	})
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{MaxBody: 2048, MaxBatchBody: 8192})
	big := strings.Repeat("x", 4096)
	b.requireError(t, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "", "POST", "/v1/notifications",
		map[string]any{"topic": "jobs", "payload": big})

	t.Run("BatchBodyHasItsOwnLimit", func(t *testing.T) {
		items := []map[string]any{}
		for i := range 3 {
			items = append(items, map[string]any{"id": fmt.Sprint(i), "topic": "jobs", "payload": strings.Repeat("y", 1500)})
		}
		res := must[batchResults](t, b, http.StatusOK, "POST", "/v1/notifications/batch", map[string]any{"notifications": items})
		require.Len(t, res.Results, 3)
		for _, item := range items {
			item["payload"] = big
		}
		b.requireError(t, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "", "POST", "/v1/notifications/batch",
			map[string]any{"notifications": items})
	})
	t.Run("BatchItemPayloadHeldToMaxBody", func(t *testing.T) {
		res := must[batchResults](t, b, http.StatusOK, "POST", "/v1/notifications/batch",
			map[string]any{"notifications": []any{map[string]any{"id": "big", "topic": "jobs", "payload": strings.Repeat("z", 3000)}}})
		require.Equal(t, http.StatusBadRequest, res.Results[0].Status)
		require.Equal(t, "payload", res.Results[0].Error.Field)
	})
}

func TestBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "old", "topic": "jobs"})
	body := `{"notifications": [
		{"id": "new", "topic": "jobs"},
		{"id": "old", "topic": "jobs"},
		{"id": "old", "topic": "jobs", "delay": "1h"},
		{"id": "bad", "topic": "jobs", "backoff": ["1s", "x"]},
		{"id": "typo", "topic": "jobs", "paylod": {}},
		{"topic": "jobs"},
		"not an object"
	]}`
	res := must[batchResults](t, b, http.StatusOK, "POST", "/v1/notifications/batch", body)
	require.Len(t, res.Results, 7)
	want := []struct {
		id     string
		status int
		code   string
		field  string
	}{
		{"new", http.StatusCreated, "", ""},
		{"old", http.StatusOK, "", ""},
		{"old", http.StatusConflict, api.CodeConflict, ""},
		{"bad", http.StatusBadRequest, api.CodeInvalidArgument, "backoff[1]"},
		{"typo", http.StatusBadRequest, api.CodeInvalidArgument, "paylod"},
		{"", http.StatusCreated, "", ""},
		{"", http.StatusBadRequest, api.CodeInvalidArgument, ""},
	}
	for i, w := range want {
		got := res.Results[i]
		if w.id != "" {
			require.Equal(t, w.id, got.ID, "item %d", i)
		}
		require.Equal(t, w.status, got.Status, "item %d: %+v", i, got.Error)
		if w.code == "" {
			require.Nil(t, got.Error, "item %d", i)
			continue
		}
		require.Equal(t, w.code, got.Error.Code, "item %d", i)
		require.Equal(t, w.field, got.Error.Field, "item %d", i)
	}
	require.True(t, notify.ValidID(res.Results[5].ID), "a generated id is returned")

	t.Run("Limit", func(t *testing.T) {
		items := make([]map[string]string, store.MaxBatch+1)
		for i := range items {
			items[i] = map[string]string{"topic": "jobs"}
		}
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "notifications", "POST", "/v1/notifications/batch",
			map[string]any{"notifications": items})
	})
	t.Run("Envelope", func(t *testing.T) {
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "notifications", "POST", "/v1/notifications/batch", `{}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "items", "POST", "/v1/notifications/batch", `{"items":[]}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "notifications", "POST", "/v1/notifications/batch",
			`{"notifications":{}}`)
	})
	t.Run("Empty", func(t *testing.T) {
		res := must[batchResults](t, b, http.StatusOK, "POST", "/v1/notifications/batch", `{"notifications":[]}`)
		require.Empty(t, res.Results)
	})
}

// TestBatchMovesWhatItEnqueues: a batch that enqueues a reminder and then
// moves it (a change log replayed in one request) answers each item as it
// would have been answered alone, one after the other, and the reminder is
// due at the time it was moved to; the move was a 409 conflict telling the
// caller to set the replace it had set.
func TestBatchMovesWhatItEnqueues(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	first := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	moved, last := first.Add(time.Hour), first.Add(2*time.Hour)
	item := func(at time.Time, replace bool) map[string]any {
		return map[string]any{"id": "appt-9", "topic": "jobs", "send_at": at.Format(time.RFC3339), "replace": replace}
	}
	// Other reminders around them make a batch as large as a change log's.
	var items []any
	for i := range 20 {
		items = append(items, map[string]any{"id": fmt.Sprintf("appt-%d", 100+i), "topic": "jobs", "delay": "1h"})
	}
	items = append(items, item(first, false), item(moved, true), item(moved, false), item(last, true))
	res := must[batchResults](t, b, http.StatusOK, "POST", "/v1/notifications/batch", map[string]any{"notifications": items})
	require.Len(t, res.Results, len(items))
	for i, want := range []int{http.StatusCreated, http.StatusOK, http.StatusOK, http.StatusOK} {
		got := res.Results[len(items)-4+i]
		require.Equal(t, want, got.Status, "item %d: %+v", i, got.Error)
	}
	rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/appt-9", nil)
	require.Equal(t, last, rec.SendAt)
	require.Equal(t, last, *rec.NextAttemptAt)
}

func TestGetAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "GET", "/v1/notifications/missing", nil)
	b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "DELETE", "/v1/notifications/missing", nil)

	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "sms-1", "topic": "jobs", "delay": "1h"})
	rec := must[notify.Notification](t, b, http.StatusOK, "DELETE", "/v1/notifications/sms-1", nil)
	require.Equal(t, notify.StateCancelled, rec.State)
	require.Nil(t, rec.NextAttemptAt)
	rec = must[notify.Notification](t, b, http.StatusOK, "DELETE", "/v1/notifications/sms-1", nil)
	require.Equal(t, notify.StateCancelled, rec.State, "cancelling twice is harmless")

	t.Run("FinishedIs409", func(t *testing.T) {
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "done", "topic": "jobs"})
		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
		require.Len(t, res.Notifications, 1)
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/done/ack", map[string]string{"receipt": res.Notifications[0].Receipt})
		b.requireError(t, http.StatusConflict, api.CodeFinished, "", "DELETE", "/v1/notifications/done", nil)

		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/done", nil)
		require.Equal(t, notify.StateSucceeded, rec.State)
		require.Len(t, rec.History, 1)
		require.Equal(t, notify.OutcomeSuccess, rec.History[0].Outcome)
	})
	t.Run("ReservedCancelsAndStalesTheReceipt", func(t *testing.T) {
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "held", "topic": "jobs"})
		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
		require.Len(t, res.Notifications, 1)
		got := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/held", nil)
		require.Equal(t, notify.StateReserved, got.State)
		require.Empty(t, got.Receipt, "GET never hands out a reservation's receipt")
		must[notify.Notification](t, b, http.StatusOK, "DELETE", "/v1/notifications/held", nil)
		b.requireError(t, http.StatusConflict, api.CodeStaleReceipt, "", "POST", "/v1/notifications/held/ack",
			map[string]string{"receipt": res.Notifications[0].Receipt})
	})
}

func TestUnmatchedRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "GET", "/v2/anything", nil)
	req, err := http.NewRequest("PUT", b.http.URL+"/v1/notifications", nil)
	require.NoError(t, err)
	resp, err := b.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, "POST", resp.Header.Get("Allow"))
	var e apiError
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.Equal(t, api.CodeMethodNotAllowed, e.Error.Code)
}
