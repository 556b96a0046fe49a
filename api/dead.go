package api

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// DeadPage is the answer of GET /v1/dead, and what herald dlq list --json
// prints.
type DeadPage struct {
	Notifications []*notify.Notification `json:"notifications"`
	// NextCursor fetches the next page; empty on the last.
	NextCursor string `json:"next_cursor"`
}

// listDead handles GET /v1/dead?topic=&limit=&cursor=: a page of dead
// notifications (every topic when none is given), ListLimitDefault at a
// time unless limit says otherwise (at most store.MaxBatch).
func (s *Server) listDead(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "topic", "limit", "cursor")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := ListLimitDefault
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > store.MaxBatch {
			s.fail(w, r, notify.Errorf("limit", "must be an integer between 1 and %d", store.MaxBatch))
			return
		}
	}
	topic := q.Get("topic")
	if topic != "" && !notify.ValidTopic(topic) {
		s.fail(w, r, notify.Errorf("topic", "must match [a-z0-9._-]{1,64}"))
		return
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	items, next, err := s.client.ListDead(ctx, topic, limit, q.Get("cursor"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewDeadPage(items, next))
}

// NewDeadPage returns the answer for a page of dead notifications, their
// credential headers hidden (see Redacted).
func NewDeadPage(items []*notify.Notification, next string) *DeadPage {
	return &DeadPage{Notifications: redactedAll(items), NextCursor: next}
}

// replayRequest is the body of POST /v1/dead/replay, and without
// reset_attempts of DELETE /v1/dead: ids, or a topic with an optional window
// of the time of death (since inclusive, until exclusive).
type replayRequest struct {
	IDs   []string   `json:"ids,omitempty"`
	Topic string     `json:"topic,omitempty"`
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	// ResetAttempts runs the whole backoff array again; without it each
	// notification goes on where its array stopped (store.DeadOptions).
	ResetAttempts bool `json:"reset_attempts,omitempty"`
	// DryRun counts what would be replayed and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// isZero reports whether req sets no field: no filter, no option.
func (req *replayRequest) isZero() bool {
	return len(req.IDs) == 0 && req.Topic == "" && req.Since == nil && req.Until == nil && !req.ResetAttempts && !req.DryRun
}

// filter is the store's filter for the ids, or the topic and window, of
// req; the store checks it.
func (req *replayRequest) filter() store.DeadFilter {
	return store.DeadFilter{IDs: req.IDs, Topic: req.Topic, Since: req.Since, Until: req.Until}
}

// ReplayResult is the answer of POST /v1/dead/replay. NotDead names the
// ids given that were not dead, and so not replayed, with their states.
type ReplayResult struct {
	Matched  int              `json:"matched"`
	Replayed int              `json:"replayed"`
	NotDead  []client.IDState `json:"not_dead,omitempty"`
}

// PurgeResult is the answer of DELETE /v1/dead. NotDead names the ids
// given that were not dead, and so not purged, with their states.
type PurgeResult struct {
	Matched int              `json:"matched"`
	Purged  int              `json:"purged"`
	NotDead []client.IDState `json:"not_dead,omitempty"`
}

// replay handles POST /v1/dead/replay.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	if err := readJSON(w, r, s.cfg.MaxBody, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	f := req.filter()
	ctx, cancel := s.storeContext(r)
	defer cancel()
	// Looked up before the replay, which would make the ids it replays
	// not dead.
	notDead, err := s.notDead(ctx, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	matched, replayed, err := s.client.Replay(ctx, f, store.DeadOptions{Reset: req.ResetAttempts, DryRun: req.DryRun})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ReplayResult{Matched: matched, Replayed: replayed, NotDead: notDead})
}

// purge handles DELETE /v1/dead?ids=&topic=&since=&until=&dry_run=: the
// replay filters, as query parameters or, as for a replay, as the body;
// not both, so that no filter given is ignored. A body that sets no field
// ({}, null, blank) counts as none. In the query ids may repeat or be
// comma-separated (ids never contain a comma).
func (s *Server) purge(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "ids", "topic", "since", "until", "dry_run")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body, err := readBody(w, r, s.cfg.MaxBody)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req replayRequest
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if err := decodeJSON(body, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	// Many clients send {} with every request: a body that sets nothing
	// is no body.
	if !req.isZero() {
		if len(q) > 0 {
			s.fail(w, r, notify.Errorf(slices.Sorted(maps.Keys(q))[0], "give the filters in the query or in the body, not both"))
			return
		}
		if req.ResetAttempts {
			s.fail(w, r, notify.Errorf("reset_attempts", "is for a replay; a purge deletes"))
			return
		}
		s.purgeDead(w, r, req.filter(), req.DryRun)
		return
	}
	// A parameter given empty comes from an unset variable: taken for
	// none, an empty dry_run would delete where a count was asked for, and
	// an empty bound would widen what is deleted.
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.ContainsFunc(q[k], func(v string) bool { return v != "" }) {
			s.fail(w, r, notify.Errorf(k, "is empty: give a value or leave it out"))
			return
		}
	}
	f := store.DeadFilter{Topic: q.Get("topic")}
	for _, v := range q["ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id != "" {
				f.IDs = append(f.IDs, id)
			}
		}
	}
	var dryRun bool
	if v := q.Get("dry_run"); v != "" {
		if dryRun, err = strconv.ParseBool(v); err != nil {
			s.fail(w, r, notify.Errorf("dry_run", "must be true or false"))
			return
		}
	}
	if f.Since, err = queryTime(q, "since"); err == nil {
		f.Until, err = queryTime(q, "until")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.purgeDead(w, r, f, dryRun)
}

// purgeDead purges what f selects and answers with the counts.
func (s *Server) purgeDead(w http.ResponseWriter, r *http.Request, f store.DeadFilter, dryRun bool) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	notDead, err := s.notDead(ctx, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	matched, purged, err := s.client.Purge(ctx, f, store.DeadOptions{DryRun: dryRun})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, PurgeResult{Matched: matched, Purged: purged, NotDead: notDead})
}

// notDead names the ids f gives that are not dead, for an operator who
// mistyped one: a filter the client refuses is left for the replay or
// purge to refuse.
func (s *Server) notDead(ctx context.Context, f store.DeadFilter) ([]client.IDState, error) {
	states, err := s.client.NotDead(ctx, f)
	var fe *notify.FieldError
	if errors.As(err, &fe) {
		return nil, nil
	}
	return states, err
}

// queryTime reads an RFC 3339 bound of the window; absent is nil.
func queryTime(q url.Values, name string) (*time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, notify.Errorf(name, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
	}
	return &t, nil
}

// Stats is the answer of GET /v1/stats.
type Stats struct {
	Topics map[string]store.TopicStats `json:"topics"`
	// Totals sums the topics.
	Totals store.TopicStats `json:"totals"`
}

// NewStats returns the answer for the store's per-topic counts.
func NewStats(topics map[string]store.TopicStats) *Stats {
	st := &Stats{Topics: topics}
	for _, t := range topics {
		st.Totals.Add(t)
	}
	return st
}

// stats handles GET /v1/stats.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeContext(r)
	defer cancel()
	topics, err := s.client.Stats(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewStats(topics))
}
