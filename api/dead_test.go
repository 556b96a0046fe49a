package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
)

type deadPage struct {
	Notifications []notify.Notification `json:"notifications"`
	NextCursor    string                `json:"next_cursor"`
}

type counts struct {
	Matched  int `json:"matched"`
	Replayed int `json:"replayed"`
	Purged   int `json:"purged"`
}

// kill enqueues count notifications of topic single (one attempt) and nacks
// each, so that they are dead. Others of the topic that it reserves on the
// way (ones an earlier test replayed) die too, but only its own count
// towards the ones it waits for.
func (b *testBundle) kill(t *testing.T, prefix string, count int) {
	t.Helper()
	left := map[string]bool{}
	for i := range count {
		id := fmt.Sprintf("%s%d", prefix, i)
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"id": id, "topic": "single"})
		left[id] = true
	}
	for len(left) > 0 {
		res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/single/reserve?max=100&wait=5s", nil)
		for _, n := range res.Notifications {
			must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/"+n.ID+"/nack",
				map[string]string{"receipt": n.Receipt, "error": "merchant gone"})
			delete(left, n.ID)
		}
	}
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.kill(t, "d", 5)

	t.Run("ListPages", func(t *testing.T) {
		seen := map[string]bool{}
		cursor := ""
		for pages := 1; ; pages++ {
			page := must[deadPage](t, b, http.StatusOK, "GET", "/v1/dead?topic=single&limit=2&cursor="+url.QueryEscape(cursor), nil)
			for _, n := range page.Notifications {
				require.Equal(t, notify.StateDead, n.State)
				require.Len(t, n.History, 1)
				require.Equal(t, "merchant gone", n.History[0].Error)
				seen[n.ID] = true
			}
			if page.NextCursor == "" {
				require.Equal(t, 3, pages)
				break
			}
			cursor = page.NextCursor
		}
		require.Len(t, seen, 5)
		all := must[deadPage](t, b, http.StatusOK, "GET", "/v1/dead", nil)
		require.Len(t, all.Notifications, 5, "every topic by default")
		none := must[map[string]any](t, b, http.StatusOK, "GET", "/v1/dead?topic=jobs", nil)
		require.Equal(t, map[string]any{"notifications": []any{}, "next_cursor": ""}, none)
	})
	t.Run("ListArguments", func(t *testing.T) {
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "limit", "GET", "/v1/dead?limit=0", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "limit", "GET", "/v1/dead?limit=1001", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topic", "GET", "/v1/dead?topic=NO", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "cursor", "GET", "/v1/dead?cursor=garbage", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topics", "GET", "/v1/dead?topics=single", nil)
		// A purge of the first topic alone would not be what was asked.
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topic", "DELETE", "/v1/dead?topic=single&topic=jobs&dry_run=true", nil)
		// Nor would a list of every topic, or a purge that is no dry run,
		// for a parameter whose pair the query syntax does not allow.
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topic", "GET", "/v1/dead?topic=single;limit=1", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "dry_run", "DELETE", "/v1/dead?topic=single&dry_run=true;", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "dry_run", "DELETE", "/v1/dead?topic=single&dry_run=%zz", nil)
	})
	t.Run("ReplayByIDs", func(t *testing.T) {
		dry := must[counts](t, b, http.StatusOK, "POST", "/v1/dead/replay", map[string]any{"ids": []string{"d0", "d1", "nope"}, "dry_run": true})
		require.Equal(t, counts{Matched: 2}, dry)
		got := must[counts](t, b, http.StatusOK, "POST", "/v1/dead/replay", map[string]any{"ids": []string{"d0", "d1"}, "reset_attempts": true})
		require.Equal(t, counts{Matched: 2, Replayed: 2}, got)
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/d0", nil)
		require.Equal(t, notify.StateScheduled, rec.State)
		require.Equal(t, 0, rec.Attempts, "reset_attempts runs the array again")
	})
	t.Run("ReplayArguments", func(t *testing.T) {
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topic", "POST", "/v1/dead/replay", `{}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "ids", "POST", "/v1/dead/replay", `{"ids":["a"],"topic":"single"}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "since", "POST", "/v1/dead/replay", `{"topic":"single","since":"yesterday"}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "ids[1]", "POST", "/v1/dead/replay", `{"ids":["a",7]}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "until", "POST", "/v1/dead/replay",
			`{"topic":"single","since":"2030-01-02T00:00:00Z","until":"2030-01-01T00:00:00Z"}`)
	})
	t.Run("PurgeByTopicAndWindow", func(t *testing.T) {
		future := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))
		dry := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead?topic=single&dry_run=true&until="+future, nil)
		require.Equal(t, counts{Matched: 3}, dry)
		none := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead?topic=single&since="+future, nil)
		require.Equal(t, counts{}, none)
		got := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead?ids=d2,d3&ids=d4", nil)
		require.Equal(t, counts{Matched: 3, Purged: 3}, got)
		b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "GET", "/v1/notifications/d2", nil)
	})
	t.Run("WindowIsForATopic", func(t *testing.T) {
		// A window narrows a topic's purge or replay; given with ids it would
		// be ignored, and more done than asked: it is refused.
		b.kill(t, "w", 1)
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "since", "POST", "/v1/dead/replay",
			map[string]any{"ids": []string{"w0"}, "since": future})
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "until", "DELETE", "/v1/dead",
			map[string]any{"ids": []string{"w0"}, "until": future})
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "since", "DELETE", "/v1/dead?ids=w0&since="+url.QueryEscape(future), nil)
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/w0", nil)
		require.Equal(t, notify.StateDead, rec.State, "neither replayed nor purged")
	})
	t.Run("PurgeByBody", func(t *testing.T) {
		// DELETE takes the filters of a replay as its body too: a body is
		// never ignored, least of all for a wider purge than it asked.
		b.kill(t, "pb", 3)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topic", "DELETE", "/v1/dead?topic=single",
			map[string]any{"ids": []string{"pb0"}})
		dry := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead", map[string]any{"ids": []string{"pb0", "pb1", "pb2", "nope"}, "dry_run": true})
		require.Equal(t, counts{Matched: 3}, dry)
		got := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead", map[string]any{"ids": []string{"pb0", "pb1"}})
		require.Equal(t, counts{Matched: 2, Purged: 2}, got)
		b.requireError(t, http.StatusNotFound, api.CodeNotFound, "", "GET", "/v1/notifications/pb0", nil)
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/pb2", nil)
		require.Equal(t, notify.StateDead, rec.State, "only what the body named is purged")
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "reset_attempts", "DELETE", "/v1/dead",
			`{"topic":"single","reset_attempts":true}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "until", "DELETE", "/v1/dead",
			`{"topic":"single","since":"2030-01-02T00:00:00Z","until":"2030-01-01T00:00:00Z"}`)
	})
	t.Run("PurgeWithABodyOfNoFilters", func(t *testing.T) {
		// Many clients send {} with every request: a body that sets nothing
		// leaves the query's filters to do their work.
		b.kill(t, "eb", 2)
		for _, body := range []string{`{}`, `null`, " \n", `{"ids":[],"topic":"","since":null}`} {
			dry := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead?ids=eb0,eb1&dry_run=true", body)
			require.Equal(t, counts{Matched: 2}, dry, "body %q", body)
		}
		got := must[counts](t, b, http.StatusOK, "DELETE", "/v1/dead?ids=eb0", `{}`)
		require.Equal(t, counts{Matched: 1, Purged: 1}, got)
		// A body that does set something is not ignored: a dry run asked
		// for in it must not become a purge.
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "ids", "DELETE", "/v1/dead?ids=eb1", `{"dry_run":true}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "ids", "DELETE", "/v1/dead?ids=eb1", `{"topic":"single"}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "bogus", "DELETE", "/v1/dead?ids=eb1", `{"bogus":1}`)
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/eb1", nil)
		require.Equal(t, notify.StateDead, rec.State)
	})
	t.Run("PurgeArguments", func(t *testing.T) {
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "topic", "DELETE", "/v1/dead", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "dry_run", "DELETE", "/v1/dead?topic=single&dry_run=maybe", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "since", "DELETE", "/v1/dead?topic=single&since=now", nil)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "reset_attempts", "DELETE", "/v1/dead?topic=single&reset_attempts=1", nil)
	})
	t.Run("FiltersThatWouldWidenAPurge", func(t *testing.T) {
		// 0001-01-01T00:00:00Z is the zero time, which the store takes for
		// no bound; an empty parameter comes from an unset variable. Taken
		// as they read, each would purge the whole topic.
		b.kill(t, "wp", 2)
		for _, q := range []string{"until=0001-01-01T00:00:00Z", "since=1969-12-31T23:59:59Z", "dry_run=", "until=", "since="} {
			field, _, _ := strings.Cut(q, "=")
			b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, field, "DELETE", "/v1/dead?topic=single&"+q, nil)
		}
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "until", "DELETE", "/v1/dead", `{"topic":"single","until":"0001-01-01T00:00:00Z"}`)
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "since", "POST", "/v1/dead/replay", `{"topic":"single","since":"0001-01-01T00:00:00Z"}`)
		// With ids, a window is refused, not ignored.
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "until", "POST", "/v1/dead/replay", `{"ids":["wp0"],"until":"0001-01-01T00:00:00Z"}`)
		for _, id := range []string{"wp0", "wp1"} {
			rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/"+id, nil)
			require.Equal(t, notify.StateDead, rec.State, "neither replayed nor purged")
		}
		// A cursor this server never returned, past what a score holds, is
		// the caller's mistake, not a store failure.
		forged := base64.RawURLEncoding.EncodeToString([]byte(`{"c":9223372036854775807,"i":"x"}`))
		b.requireError(t, http.StatusBadRequest, api.CodeInvalidArgument, "cursor", "GET", "/v1/dead?cursor="+forged, nil)
	})
	t.Run("NamesIdsNotDead", func(t *testing.T) {
		// An id mistyped, or not dead, is named with its state, where the
		// answer said only how many matched.
		b.kill(t, "nd", 2)
		type answer struct {
			Matched  int              `json:"matched"`
			Replayed int              `json:"replayed"`
			Purged   int              `json:"purged"`
			NotDead  []client.IDState `json:"not_dead"`
		}
		got := must[answer](t, b, http.StatusOK, "POST", "/v1/dead/replay", map[string]any{"ids": []string{"nd0", "nd0x"}})
		require.Equal(t, answer{Matched: 1, Replayed: 1, NotDead: []client.IDState{{ID: "nd0x", State: client.StateUnknown}}}, got)
		got = must[answer](t, b, http.StatusOK, "DELETE", "/v1/dead?ids=nd0,nd1", nil)
		require.Equal(t, answer{Matched: 1, Purged: 1, NotDead: []client.IDState{{ID: "nd0", State: "scheduled"}}}, got)
		all := must[map[string]any](t, b, http.StatusOK, "POST", "/v1/dead/replay", map[string]any{"topic": "single", "dry_run": true})
		require.NotContains(t, all, "not_dead", "a topic names no ids")
	})
}

func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.kill(t, "x", 2)
	b.enqueueJobs(t, 3)
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"topic": "orders"})
	for range 2 { // the second waits behind the first
		must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications",
			map[string]any{"topic": "orders", "order_key": "k", "delay": "1h"})
	}
	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	require.Len(t, res.Notifications, 1)

	raw := must[map[string]any](t, b, http.StatusOK, "GET", "/v1/stats", nil)
	require.Contains(t, raw, "topics")
	require.Contains(t, raw, "totals")
	stats := must[statsBody](t, b, http.StatusOK, "GET", "/v1/stats", nil)
	require.EqualValues(t, 2, stats.Topics["jobs"].Scheduled)
	require.EqualValues(t, 1, stats.Topics["jobs"].Reserved)
	require.EqualValues(t, 2, stats.Topics["single"].Dead)
	require.EqualValues(t, 2, stats.Topics["single"].FailedAttemptsTotal)
	require.EqualValues(t, 2, stats.Topics["orders"].Scheduled)
	require.EqualValues(t, 1, stats.Topics["orders"].Waiting)
	require.EqualValues(t, 4, stats.Totals.Scheduled)
	require.EqualValues(t, 1, stats.Totals.Waiting)
	require.EqualValues(t, 1, stats.Totals.Reserved)
	require.EqualValues(t, 2, stats.Totals.Dead)
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	require.Equal(t, map[string]string{"status": "ok"}, must[map[string]string](t, b, http.StatusOK, "GET", "/healthz", nil))
	require.Equal(t, map[string]string{"status": "ready"}, must[map[string]string](t, b, http.StatusOK, "GET", "/readyz", nil))

	b.enqueueJobs(t, 2)
	status, body := b.do(t, "GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, status)
	text := string(body)
	require.Contains(t, text, `herald_enqueued_total{result="created",topic="jobs"} 2`)
	require.Contains(t, text, `herald_scheduled_notifications{topic="jobs"} 2`)

	res := must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve?wait=5s", nil)
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/"+res.Notifications[0].ID+"/ack",
		map[string]string{"receipt": res.Notifications[0].Receipt})
	_, body = b.do(t, "GET", "/metrics", nil)
	require.Contains(t, string(body), `herald_attempts_total{channel="pull",outcome="success",topic="jobs"} 1`)
	require.Contains(t, string(body), `herald_lateness_seconds_count{channel="pull",topic="jobs"} 1`)
}

// TestNotReadyKeepsDetails: /readyz says what puts data at risk whether or
// not Redis answers at the moment, as it does while serve waits for Redis.
func TestNotReadyKeepsDetails(t *testing.T) {
	t.Parallel()
	details := map[string]any{"redis": map[string]any{"eviction_ok": false}}
	h := api.NewProbes(&api.ProbeConfig{
		ReadyFunc:   func(context.Context) error { return errors.New("connection refused") },
		DetailsFunc: func() any { return details },
		Logger:      testLogger(t),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b := &testBundle{http: srv}
	e := b.requireError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "", "GET", "/readyz", nil)
	require.NotEmpty(t, e.Message)
	body := must[map[string]any](t, b, http.StatusServiceUnavailable, "GET", "/readyz", nil)
	require.Equal(t, map[string]any{"redis": map[string]any{"eviction_ok": false}}, body["details"])
}

// TestReplayGoesOnWhereTheArrayStopped: a notification that died of a
// permanent failure at its first attempt, replayed without reset_attempts,
// gets the attempts left in its backoff array, as the replay's docs say:
// the operator has fixed what refused it, and a passing outage of the
// receiver must not kill it again at once.
func TestReplayGoesOnWhereTheArrayStopped(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	must[notify.Notification](t, b, http.StatusCreated, "POST", "/v1/notifications", map[string]any{"id": "perm", "topic": "jobs"})
	reserveOne := func() notify.Notification {
		t.Helper()
		var res reserved
		require.Eventually(t, func() bool {
			res = must[reserved](t, b, http.StatusOK, "POST", "/v1/topics/jobs/reserve", nil)
			return len(res.Notifications) == 1
		}, 5*time.Second, 10*time.Millisecond)
		return res.Notifications[0]
	}
	n := reserveOne()
	must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/perm/nack", map[string]any{"receipt": n.Receipt, "permanent": true})
	must[counts](t, b, http.StatusOK, "POST", "/v1/dead/replay", map[string]any{"ids": []string{"perm"}})
	for attempt, want := range []notify.State{notify.StateScheduled, notify.StateDead} {
		n = reserveOne()
		require.Equal(t, attempt+1, n.Attempts)
		must[any](t, b, http.StatusNoContent, "POST", "/v1/notifications/perm/nack", map[string]any{"receipt": n.Receipt, "error": "still down"})
		rec := must[notify.Notification](t, b, http.StatusOK, "GET", "/v1/notifications/perm", nil)
		require.Equal(t, want, rec.State, "after attempt %d of the array's 3", attempt+1)
	}
}
