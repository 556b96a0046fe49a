package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// activityWindow is how far back the overview's charts reach.
const activityWindow = time.Hour

// recentWindow is the span the overview's recent counts and lateness p99
// cover: the current minute and the four before it.
const recentWindow = 5 * time.Minute

// topicRow is one topic on the overview.
type topicRow struct {
	Topic string
	store.TopicStats
	activity
	// PausedSince is when the topic was paused; zero when it is not.
	PausedSince time.Time
	Actions     []formAction
}

// activity is what an overview row shows of its attempts, a topic's or an
// endpoint's.
type activity struct {
	// RecentOK and RecentFailed count the attempts of the last five
	// minutes.
	RecentOK, RecentFailed int64
	// HourOK and HourFailed count the attempts of the last hour.
	HourOK, HourFailed int64
	// LatenessP99 is the highest per-minute p99 of the last five minutes.
	LatenessP99 time.Duration
	Chart       chart
}

// newActivity sums the minutes of one topic or endpoint, as of now.
func newActivity(minutes []store.MinuteActivity, now time.Time) activity {
	var a activity
	recent := now.Truncate(time.Minute).Add(-recentWindow + time.Minute)
	for _, m := range minutes {
		a.HourOK += m.Succeeded
		a.HourFailed += m.Failed
		if !m.Minute.Before(recent) {
			a.RecentOK += m.Succeeded
			a.RecentFailed += m.Failed
			a.LatenessP99 = max(a.LatenessP99, m.LatenessP99)
		}
	}
	a.Chart = newChart(minutes, now)
	return a
}

type overviewData struct {
	Topics    []topicRow
	Totals    store.TopicStats
	Endpoints []endpointRow
	// TopicPages and EndpointPages page the two tables.
	TopicPages, EndpointPages pager
	// PausedTopics are every paused topic, whatever its page, with a link
	// to its row; HeldEndpoints every paused or disabled endpoint.
	PausedTopics, HeldEndpoints []pausedLink
	// FailingEndpoints are the first failingListMax endpoints, whatever
	// their page, that fail and are not disabled; FailingMore counts the
	// others.
	FailingEndpoints []failingLink
	FailingMore      int
}

// overviewPageSize bounds the rows of each of the overview's tables, so
// that with thousands of topics or endpoints the page, which refreshes
// every few seconds, stays small; the others are a link away.
const overviewPageSize = 100

// pager is where a page of a table is among all its rows.
type pager struct {
	// First and Last are the 1-based rows shown, of Total.
	First, Last, Total int
	// PrevURL and NextURL link the neighbouring pages; empty at the ends.
	PrevURL, NextURL string
}

// pausedLink names a paused topic or endpoint and the overview page of its
// row.
type pausedLink struct {
	Name, URL string
	// Why is "paused" or "disabled", for an endpoint.
	Why string
}

// pageOf returns the rows of page param of q among total, and its pager;
// a page past the last shows the last. Without param, it is the page of
// row at, when at is not negative: the row a rowURL link names.
func pageOf(q url.Values, param string, total, at int) (lo, hi int, p pager) {
	page, _ := strconv.Atoi(q.Get(param))
	if !q.Has(param) && at >= 0 {
		page = at/overviewPageSize + 1
	}
	page = min(max(page, 1), max((total+overviewPageSize-1)/overviewPageSize, 1))
	lo, hi = (page-1)*overviewPageSize, min(page*overviewPageSize, total)
	p = pager{First: lo + 1, Last: hi, Total: total}
	if page > 1 {
		p.PrevURL = overviewURL(q, param, page-1)
	}
	if hi < total {
		p.NextURL = overviewURL(q, param, page+1)
	}
	return lo, hi, p
}

// overviewURL links the overview as q asks for it, but at page n of the
// table that param pages.
func overviewURL(q url.Values, param string, n int) string {
	v := url.Values{}
	maps.Copy(v, q)
	v.Set(param, strconv.Itoa(n))
	return Prefix + "?" + v.Encode()
}

// rowURL links the row of kind (store.PauseTopic or store.PauseEndpoint)
// name on the overview: ?topic=T or ?endpoint=E opens the page of the
// table that holds it, which with more than a page of rows need not be the
// first.
func rowURL(kind, name string) string {
	return Prefix + "?" + url.Values{kind: {name}}.Encode() + "#" + kind + "-" + name
}

// overview handles GET /ui/.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := h.storeContext(r)
	defer cancel()
	stats, err := h.client.Stats(ctx)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	now := h.store.Now()
	activity, err := h.store.Activity(ctx, now.Add(-activityWindow))
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	paused, err := h.store.Paused(ctx)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	byTopic, byEndpoint := map[string][]store.MinuteActivity{}, map[string][]store.MinuteActivity{}
	for _, a := range activity {
		if a.Endpoint != "" {
			byEndpoint[a.Endpoint] = append(byEndpoint[a.Endpoint], a)
		} else {
			byTopic[a.Topic] = append(byTopic[a.Topic], a)
		}
	}
	var d overviewData
	q, err := api.ParseQuery(r.URL.RawQuery)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	if err = h.endpointRows(ctx, q, paused, byEndpoint, now, &d); err != nil {
		h.fail(w, r, s, err)
		return
	}
	// A paused topic is listed even with nothing stored, so that it can be
	// resumed here.
	topicsPaused := pausedTopics(paused)
	names := slices.Collect(maps.Keys(stats))
	for t := range byTopic {
		names = append(names, t)
	}
	for t := range topicsPaused {
		names = append(names, t)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for i, t := range names {
		d.Totals.Add(stats[t])
		if _, ok := topicsPaused[t]; ok {
			d.PausedTopics = append(d.PausedTopics, pausedLink{Name: t, URL: overviewURL(q, "page", i/overviewPageSize+1) + "#topic-" + t})
		}
	}
	lo, hi, pages := pageOf(q, "page", len(names), slices.Index(names, q.Get(store.PauseTopic)))
	d.TopicPages = pages
	for _, t := range names[lo:hi] {
		since, isPaused := topicsPaused[t]
		d.Topics = append(d.Topics, topicRow{Topic: t, TopicStats: stats[t], activity: newActivity(byTopic[t], now), PausedSince: since,
			Actions: pauseActions(store.PauseTopic, t, isPaused)})
	}
	h.render(w, r, http.StatusOK, "overview", s, &d)
}

// Chart geometry, in SVG user units.
const (
	chartBars   = 60
	chartBarW   = 4
	chartHeight = 32
)

// chart is an SVG bar chart of a topic's attempts per minute, succeeded
// stacked on failed, oldest minute left.
type chart struct {
	Width, Height int
	Bars          []bar
	// Max is the busiest minute's attempts, the chart's full height.
	Max int64
}

type bar struct {
	X, OKY, OKH, FailY, FailH int
	Title                     string
}

func newChart(activity []store.MinuteActivity, now time.Time) chart {
	c := chart{Width: chartBars * chartBarW, Height: chartHeight}
	first := now.Truncate(time.Minute).Add(-(chartBars - 1) * time.Minute)
	counts := make([]store.MinuteActivity, chartBars)
	for _, a := range activity {
		if i := int(a.Minute.Sub(first) / time.Minute); i >= 0 && i < chartBars {
			counts[i] = a
		}
	}
	for _, a := range counts {
		c.Max = max(c.Max, a.Succeeded+a.Failed)
	}
	if c.Max == 0 {
		return c
	}
	for i, a := range counts {
		if a.Succeeded+a.Failed == 0 {
			continue
		}
		failH := int(a.Failed * chartHeight / c.Max)
		okH := int(a.Succeeded * chartHeight / c.Max)
		if a.Failed > 0 {
			failH = max(failH, 1)
		}
		if a.Succeeded > 0 {
			okH = max(okH, 1)
		}
		c.Bars = append(c.Bars, bar{
			X: i * chartBarW, FailY: chartHeight - failH, FailH: failH, OKY: chartHeight - failH - okH, OKH: okH,
			Title: first.Add(time.Duration(i)*time.Minute).UTC().Format("15:04") + " UTC: " +
				strconv.FormatInt(a.Succeeded, 10) + " succeeded, " + strconv.FormatInt(a.Failed, 10) + " failed",
		})
	}
	return c
}

// find handles GET /ui/find?id=: the search box's jump to a notification.
func (h *Handler) find(w http.ResponseWriter, r *http.Request, s *session) {
	q, err := api.ParseQuery(r.URL.RawQuery)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	id := strings.TrimSpace(q.Get("id"))
	if !notify.ValidID(id) {
		h.fail(w, r, s, notify.Errorf("id", "must match [A-Za-z0-9._:-]{1,128}"))
		return
	}
	http.Redirect(w, r, notificationURL(id), http.StatusSeeOther)
}

// notificationURL is the page of notification id.
func notificationURL(id string) string {
	return Prefix + "notifications/" + pathSegment(id)
}

// pathSegment is name as one segment of a dashboard URL. The names "." and
// ".." (valid ids, topics and endpoint names) are spelt %2E, or a browser
// would take them for dot segments and open, or post to, another page.
func pathSegment(name string) string {
	segment := url.PathEscape(name)
	if segment == "." || segment == ".." {
		segment = strings.ReplaceAll(segment, ".", "%2E")
	}
	return segment
}

type notificationData struct {
	N *notify.Notification
	// Payload is the payload, indented when it is JSON.
	Payload string
	// Headers are the notification's headers, sorted by name.
	Headers [][2]string
	// Next is the attempt due next, for a scheduled notification.
	Next *nextAttempt
	// Running is the attempt under way, for a reserved notification.
	Running *runningAttempt
	// Pauses are what holds back a notification parked by a pause (N.Paused):
	// its topic or endpoint, paused or disabled now. None when they have
	// all ended since, until a dispatcher unparks it.
	Pauses []holdingPause
}

// holdingPause is a pause that holds back a parked notification.
type holdingPause struct {
	// Kind is store.PauseTopic, store.PauseEndpoint or store.PauseDisabled.
	Kind, Name string
	Since      time.Time
}

// pausesOf returns what of paused (store.Paused's answer) holds back n.
func pausesOf(n *notify.Notification, paused map[string]time.Time) []holdingPause {
	var out []holdingPause
	for _, p := range []holdingPause{{Kind: store.PauseTopic, Name: n.Topic},
		{Kind: store.PauseEndpoint, Name: n.Endpoint}, {Kind: store.PauseDisabled, Name: n.Endpoint}} {
		if since, ok := paused[store.PauseKey(p.Kind, p.Name)]; ok && p.Name != "" {
			p.Since = since
			out = append(out, p)
		}
	}
	return out
}

type nextAttempt struct {
	Attempt int
	At      time.Time
	In      time.Duration
	// Overdue is how long ago At passed, when that is more than
	// overdueAfter: no dispatcher or consumer has taken it since.
	Overdue time.Duration
}

// overdueAfter is how long past its due time a next attempt shows as
// overdue rather than due now: dispatchers start attempts within
// milliseconds, so a second means none is taking it.
const overdueAfter = time.Second

// runningAttempt is the attempt of a reservation: started when it was
// reserved, it counts as failed unless it ends by Deadline.
type runningAttempt struct {
	Attempt  int
	Since    time.Time
	For      time.Duration
	Deadline time.Time
}

// notification handles GET /ui/notifications/{id}.
func (h *Handler) notification(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := h.storeContext(r)
	defer cancel()
	n, err := h.client.Get(ctx, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	// The page shows what the API answers: a dashboard reader is no more
	// entitled to the receiver's credentials than an API caller.
	n = api.Redacted(n)
	d := notificationData{N: n, Payload: string(n.Payload)}
	var buf bytes.Buffer
	if json.Indent(&buf, n.Payload, "", "  ") == nil {
		d.Payload = buf.String()
	}
	for _, k := range slices.Sorted(maps.Keys(n.Headers)) {
		d.Headers = append(d.Headers, [2]string{k, n.Headers[k]})
	}
	switch {
	case n.State == notify.StateReserved && n.Deadline != nil:
		// Its due time has passed: the attempt is running, not due.
		since := n.Deadline.Add(-time.Duration(n.TTR))
		d.Running = &runningAttempt{Attempt: n.Attempts, Since: since, For: max(h.store.Now().Sub(since), 0), Deadline: *n.Deadline}
	case n.NextAttemptAt != nil && !n.State.Finished():
		d.Next = &nextAttempt{Attempt: n.Attempts, At: *n.NextAttemptAt, In: n.NextAttemptAt.Sub(h.store.Now())}
		// One held behind an earlier one of its order key is not late: it
		// starts once that one ends.
		if -d.Next.In > overdueAfter && n.WaitingFor == "" {
			d.Next.Overdue = -d.Next.In
		}
	}
	if n.Paused {
		// The record says only that a pause holds it back; which one is
		// what the operator must resume.
		paused, err := h.store.Paused(ctx)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		d.Pauses = pausesOf(n, paused)
	}
	h.render(w, r, http.StatusOK, "notification", s, &d)
}

// deadQuery is the dead-letter browser's filter, as its form and links
// carry it.
type deadQuery struct {
	Topic string
	// Since and Until bound the time of death, as the form's
	// datetime-local fields read them (UTC).
	Since, Until string
	since, until *time.Time
	// IDs select single notifications (replay and purge only).
	IDs []string
	// AsOf ends a topic's selection where the confirmation page counted it
	// (RFC 3339, exclusive), so that its form acts on what it counted and
	// not on what died since; empty when nothing was counted.
	AsOf string
	asOf time.Time
}

// parseDeadQuery reads and checks the filter of q.
func parseDeadQuery(q url.Values) (*deadQuery, error) {
	f := &deadQuery{Topic: q.Get("topic"), Since: q.Get("since"), Until: q.Get("until")}
	if f.Topic != "" && !notify.ValidTopic(f.Topic) {
		return nil, notify.Errorf("topic", "must match [a-z0-9._-]{1,64}")
	}
	var err error
	if f.since, err = parseFormTime("since", f.Since); err != nil {
		return nil, err
	}
	if f.until, err = parseFormTime("until", f.Until); err != nil {
		return nil, err
	}
	if f.since != nil && f.until != nil && !f.until.After(*f.since) {
		return nil, notify.Errorf("until", "must be after since")
	}
	if v := q.Get("as_of"); v != "" {
		if f.asOf, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return nil, notify.Errorf("as_of", "must be an RFC 3339 time")
		}
		f.AsOf = v
	}
	for _, v := range q["ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				if !notify.ValidID(id) {
					return nil, notify.Errorf("ids", "%q is not a notification id", id)
				}
				f.IDs = append(f.IDs, id)
			}
		}
	}
	return f, nil
}

// parseFormTime reads a datetime-local value (taken as UTC) or an RFC 3339
// time; empty is nil, no bound.
func parseFormTime(field, v string) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return &t, nil
		}
	}
	return nil, notify.Errorf(field, "must be a time such as 2026-01-02T15:04 (UTC)")
}

// values returns the filter as query parameters.
func (f *deadQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"topic": f.Topic, "since": f.Since, "until": f.Until, "ids": strings.Join(f.IDs, ",")} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// filter returns the store's filter for replay and purge.
func (f *deadQuery) filter() store.DeadFilter {
	until := f.until
	if !f.asOf.IsZero() && len(f.IDs) == 0 && (until == nil || until.After(f.asOf)) && (f.since == nil || f.asOf.After(*f.since)) {
		until = &f.asOf
	}
	return store.DeadFilter{IDs: f.IDs, Topic: f.Topic, Since: f.since, Until: until}
}

// pin ends a topic's selection at now, death times being whole
// milliseconds: what the count sees is what the form acts on.
func (f *deadQuery) pin(now time.Time) {
	if len(f.IDs) > 0 {
		return
	}
	f.asOf = time.UnixMilli(now.UnixMilli() + 1).UTC()
	f.AsOf = f.asOf.Format(time.RFC3339Nano)
}

type deadData struct {
	Query  *deadQuery
	Topics []string
	Items  []*notify.Notification
	// Page is the 1-based page number, carried in the links.
	Page int
	// NextURL is the next page's link; empty on the last.
	NextURL string
	// ActionQuery is the filter for the replay and purge buttons.
	ActionQuery string
}

// deadPageSize is how many dead notifications a page of the browser shows.
const deadPageSize = 50

// dead handles GET /ui/dead?topic=&since=&until=&cursor=&page=.
func (h *Handler) dead(w http.ResponseWriter, r *http.Request, s *session) {
	q, err := api.ParseQuery(r.URL.RawQuery)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	f, err := parseDeadQuery(q)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	ctx, cancel := h.storeContext(r)
	defer cancel()
	topics, err := h.store.Topics(ctx)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	cursor := q.Get("cursor")
	if cursor == "" && f.since != nil {
		cursor = store.DeadCursorAt(*f.since)
	}
	items, next, err := h.client.ListDead(ctx, f.Topic, deadPageSize, cursor)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	// The listing runs in order of death: the first one past until ends it.
	if f.until != nil {
		if i := slices.IndexFunc(items, func(n *notify.Notification) bool { return !n.UpdatedAt.Before(*f.until) }); i >= 0 {
			items, next = items[:i], ""
		}
	}
	// Shown as the API answers them: a target's credentials are the
	// receiver's.
	for i, n := range items {
		items[i] = api.Redacted(n)
	}
	page, _ := strconv.Atoi(q.Get("page"))
	d := deadData{Query: f, Topics: topics, Items: items, Page: max(page, 1), ActionQuery: f.values().Encode()}
	if next != "" {
		v := f.values()
		v.Set("cursor", next)
		v.Set("page", strconv.Itoa(d.Page+1))
		d.NextURL = Prefix + "dead?" + v.Encode()
	}
	h.render(w, r, http.StatusOK, "dead", s, &d)
}

type confirmData struct {
	Action  string
	Query   *deadQuery
	Matched int
	Reset   bool
	// Done is set on the result page: how many were replayed or purged.
	Done *int
	// Back is where the result page links to.
	Back string
}

// confirm handles GET /ui/dead/confirm?action=replay|purge&...: it counts
// what the filter selects (a dry run) and shows the form that acts on it.
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request, s *session) {
	q, err := api.ParseQuery(r.URL.RawQuery)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	action := q.Get("action")
	if action != "replay" && action != "purge" {
		h.fail(w, r, s, notify.Errorf("action", "must be replay or purge"))
		return
	}
	f, err := parseDeadQuery(q)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	ctx, cancel := h.storeContext(r)
	defer cancel()
	f.pin(h.store.Now())
	matched, _, err := h.runDead(ctx, action, f.filter(), store.DeadOptions{DryRun: true})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.render(w, r, http.StatusOK, "confirm", s, &confirmData{Action: action, Query: f, Matched: matched, Reset: q.Get("reset") != ""})
}

// replay handles POST /ui/dead/replay, the confirmation page's form.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, s *session) {
	h.act(w, r, s, "replay")
}

// purge handles POST /ui/dead/purge, the confirmation page's form.
func (h *Handler) purge(w http.ResponseWriter, r *http.Request, s *session) {
	h.act(w, r, s, "purge")
}

func (h *Handler) act(w http.ResponseWriter, r *http.Request, s *session, action string) {
	f, err := parseDeadQuery(r.PostForm)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	ctx, cancel := h.storeContext(r)
	defer cancel()
	d := confirmData{Action: action, Query: f, Reset: r.PostFormValue("reset") != ""}
	var done int
	d.Matched, done, err = h.runDead(ctx, action, f.filter(), store.DeadOptions{Reset: d.Reset && action == "replay"})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	d.Done = &done
	d.Back = Prefix + "dead?" + (&deadQuery{Topic: f.Topic, Since: f.Since, Until: f.Until}).values().Encode()
	if len(f.IDs) == 1 {
		d.Back = notificationURL(f.IDs[0])
	}
	h.render(w, r, http.StatusOK, "confirm", s, &d)
}

// runDead replays or purges what f selects; with opts.DryRun it only
// counts them.
func (h *Handler) runDead(ctx context.Context, action string, f store.DeadFilter, opts store.DeadOptions) (matched, done int, err error) {
	if action == "replay" {
		return h.client.Replay(ctx, f, opts)
	}
	return h.client.Purge(ctx, f, opts)
}

type policyRow struct {
	Name   string
	Policy policy.Policy
	Steps  []scheduleStep
	Topics []string
}

type scheduleStep struct {
	Attempt int
	Wait    time.Duration
	Offset  time.Duration
}

type policiesData struct {
	Policies []policyRow
	Topics   []topicConfig
}

type topicConfig struct {
	Name string
	policy.Topic
}

// policies handles GET /ui/policies: each policy's schedule table, when
// each attempt starts after send_at if every attempt fails at once, and the
// topics that use it.
func (h *Handler) policies(w http.ResponseWriter, r *http.Request, s *session) {
	set := h.cfg.PoliciesFunc()
	var d policiesData
	for _, name := range slices.Sorted(maps.Keys(set.Policies)) {
		p := set.Policies[name]
		row := policyRow{Name: name, Policy: p}
		for i, at := range policy.Schedule(p.Backoff) {
			row.Steps = append(row.Steps, scheduleStep{Attempt: i, Wait: time.Duration(p.Backoff[i]), Offset: at})
		}
		for _, t := range slices.Sorted(maps.Keys(set.Topics)) {
			if cmp := set.Topics[t].Policy; cmp == name || (cmp == "" && name == "default") {
				row.Topics = append(row.Topics, t)
			}
		}
		d.Policies = append(d.Policies, row)
	}
	for _, t := range slices.Sorted(maps.Keys(set.Topics)) {
		d.Topics = append(d.Topics, topicConfig{Name: t, Topic: set.Topics[t].Redacted()})
	}
	h.render(w, r, http.StatusOK, "policies", s, &d)
}
