package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/notify"
)

// TestEmbeddedMatchesRedis does what an operator does with herald serve,
// through the API and the dashboard, once on a redis-server and once on the
// embedded Redis: deliveries, retries and dead letters, pull workers, the
// reaper, cancels, order keys, pauses, endpoints with limits and health,
// quarantine, the sweeper, statistics and a dashboard sign-out. Each run
// checks what it is answered, and the two runs must be answered alike, so
// that the embedded Redis lacking a command or answering it otherwise
// shows here.
func TestEmbeddedMatchesRedis(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	answers := map[string][]string{}
	t.Run("Runs", func(t *testing.T) {
		for name, redisYAML := range map[string]string{"Redis": fmt.Sprintf("redis: {addrs: [%q]}", server.Addr), "Embedded": "redis: {addrs: []}"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				got := operate(t, redisYAML)
				mu.Lock()
				answers[name] = got
				mu.Unlock()
			})
		}
	})
	if !t.Failed() {
		require.Equal(t, answers["Redis"], answers["Embedded"])
	}
}

// operator drives one serve and keeps the answers it got, made alike
// across runs: times, receipts and the receiver's address vary.
type operator struct {
	t       *testing.T
	s       *serving
	rcv     *receiver
	answers []string
}

// Values that differ between two runs of the same calls.
var (
	timeFields = map[string]bool{"send_at": true, "next_attempt_at": true, "created_at": true, "updated_at": true,
		"started_at": true, "finished_at": true, "deadline": true, "failing_since": true, "disabled_at": true}
	// A resume counts what it moved back; a dispatcher's sweep of parked
	// notifications whose pause is gone (every few seconds) may move one
	// first, between the resume's deletion of the pause and its move.
	runFields = map[string]bool{"duration_ms": true, "receipt": true, "next_cursor": true, "resumed": true}
	cursorRe  = regexp.MustCompile(`cursor=[^&]+`)
)

// same replaces in v what differs between runs: times (a null stays
// null), receipts, cursors, and the receiver's address.
func (o *operator) same(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			switch {
			case e == nil, e == "":
			case timeFields[k]:
				v[k] = "<time>"
			case runFields[k]:
				v[k] = "<" + k + ">"
			default:
				v[k] = o.same(e)
			}
		}
	case []any:
		for i, e := range v {
			v[i] = o.same(e)
		}
	case string:
		return strings.ReplaceAll(v, o.rcv.URL, "<receiver>")
	}
	return v
}

// api calls the API, requires status want, keeps the answer, and decodes
// it into out when out is not nil.
func (o *operator) api(method, path, body string, want int, out any) {
	o.t.Helper()
	status, b := o.s.send(o.t, method, path, body)
	require.Equal(o.t, want, status, "%s %s: %s", method, path, b)
	answer := fmt.Sprintf("%s %s: %d", method, cursorRe.ReplaceAllString(path, "cursor=<cursor>"), status)
	if len(b) > 0 {
		var v any
		require.NoError(o.t, json.Unmarshal(b, &v), "%s %s: %s", method, path, b)
		norm, err := json.Marshal(o.same(v))
		require.NoError(o.t, err)
		answer += " " + string(norm)
		if out != nil {
			require.NoError(o.t, json.Unmarshal(b, out))
		}
	}
	o.answers = append(o.answers, answer)
}

// note keeps an answer the API does not give as JSON.
func (o *operator) note(format string, args ...any) {
	o.answers = append(o.answers, fmt.Sprintf(format, args...))
}

// record returns a notification's record, keeping nothing: for polling.
func (o *operator) record(id string) (int, *notify.Notification) {
	o.t.Helper()
	var n notify.Notification
	status, b := o.s.send(o.t, http.MethodGet, "/v1/notifications/"+id, "")
	if status == http.StatusOK {
		require.NoError(o.t, json.Unmarshal(b, &n))
	}
	return status, &n
}

// await waits until id's record satisfies cond, then keeps it.
func (o *operator) await(id, what string, cond func(*notify.Notification) bool) {
	o.t.Helper()
	waitFor(o.t, 30*time.Second, id+" "+what, func() bool {
		status, n := o.record(id)
		return status == http.StatusOK && cond(n)
	})
	o.api(http.MethodGet, "/v1/notifications/"+id, "", http.StatusOK, nil)
}

func inState(s notify.State) func(*notify.Notification) bool {
	return func(n *notify.Notification) bool { return n.State == s }
}

// receiver answers webhooks: /ok with 200, /slow with 200 after a while,
// counting the attempts that overlap and when each started.
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	running int
	most    int
	starts  []time.Time
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/slow" {
			r.mu.Lock()
			r.running++
			r.most = max(r.most, r.running)
			r.starts = append(r.starts, time.Now())
			r.mu.Unlock()
			time.Sleep(30 * time.Millisecond) // long enough for attempts to overlap, if the limit let them
			r.mu.Lock()
			r.running--
			r.mu.Unlock()
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(r.Close)
	return r
}

// refused is an address where nothing listens: every attempt fails.
const refused = "http://127.0.0.1:9/"

// operate starts herald serve on the Redis redisYAML names, does what an
// operator does, checking each answer, and returns the answers.
func operate(t *testing.T, redisYAML string) []string {
	e := newEnv(t, redisYAML)
	const token = "operator-token"
	e.config = writeConfig(t, strings.Replace(readFile(t, e.config), `api: {listen: "127.0.0.1:0"}`,
		fmt.Sprintf(`api: {listen: "127.0.0.1:0", tokens: [%q]}`, token), 1)+"retention: 3s\n")
	s := startServe(t, e.config)
	s.token = token
	addr := server.Addr
	if m := regexp.MustCompile(`HERALD_REDIS_ADDRS=(127\.0\.0\.1:\d+)`).FindStringSubmatch(s.logs.String()); m != nil {
		addr = m[1]
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	o := &operator{t: t, s: s, rcv: newReceiver(t)}
	ok := o.rcv.URL + "/ok"

	// A webhook, delivered; one enqueued again alike (200) and otherwise (409).
	o.api(http.MethodPost, "/v1/notifications", fmt.Sprintf(`{"id": "w1", "topic": "merchant-notify", "target": %q, "payload": {"paid": true}}`, ok),
		http.StatusCreated, nil)
	o.await("w1", "succeeded", inState(notify.StateSucceeded))
	i1 := fmt.Sprintf(`{"id": "i1", "topic": "merchant-notify", "target": %q, "payload": {"paid": true}, "delay": "1h"}`, ok)
	o.api(http.MethodPost, "/v1/notifications", i1, http.StatusCreated, nil)
	o.api(http.MethodPost, "/v1/notifications", i1, http.StatusOK, nil)
	o.api(http.MethodPost, "/v1/notifications", strings.Replace(i1, "true", "false", 1), http.StatusConflict, nil)
	o.api(http.MethodPost, "/v1/notifications", strings.Replace(i1, "true}", `false}, "replace": true`, 1), http.StatusOK, nil)
	o.api(http.MethodDelete, "/v1/notifications/i1", "", http.StatusOK, nil)
	o.api(http.MethodDelete, "/v1/notifications/w1", "", http.StatusConflict, nil)
	o.api(http.MethodDelete, "/v1/notifications/nobody", "", http.StatusNotFound, nil)

	// Pull workers: a batch, reserve, ack, a stale ack, nack.
	o.api(http.MethodPost, "/v1/notifications/batch", `{"notifications": [
		{"id": "b1", "topic": "pulled", "channel": "pull", "payload": {"n": 1}},
		{"id": "b2", "topic": "pulled", "channel": "pull", "payload": {"n": 2}},
		{"id": "b1", "topic": "pulled", "channel": "pull", "payload": {"n": 3}}]}`, http.StatusOK, nil)
	var got struct {
		Notifications []notify.Notification `json:"notifications"`
	}
	o.api(http.MethodPost, "/v1/topics/pulled/reserve?max=10&wait=5s", "", http.StatusOK, &got)
	require.Len(t, got.Notifications, 2)
	receipt := func(i int) string { return fmt.Sprintf(`{"receipt": %q}`, got.Notifications[i].Receipt) }
	o.api(http.MethodPost, "/v1/notifications/b1/ack", receipt(0), http.StatusNoContent, nil)
	o.api(http.MethodPost, "/v1/notifications/b1/ack", receipt(0), http.StatusConflict, nil)
	o.api(http.MethodPost, "/v1/notifications/b2/nack", fmt.Sprintf(`{"receipt": %q, "error": "busy", "retry_after": "1h"}`,
		got.Notifications[1].Receipt), http.StatusNoContent, nil)
	o.api(http.MethodGet, "/v1/notifications/b2", "", http.StatusOK, nil)

	// The reaper: a reservation nobody finishes.
	o.api(http.MethodPost, "/v1/notifications", `{"id": "r1", "topic": "reaped", "channel": "pull", "ttr": "1s", "backoff": ["0s", "1h"]}`,
		http.StatusCreated, nil)
	o.api(http.MethodPost, "/v1/topics/reaped/reserve?max=10&wait=5s", "", http.StatusOK, &got)
	require.Len(t, got.Notifications, 1)
	o.await("r1", "reaped", func(n *notify.Notification) bool {
		return len(n.History) == 1 && n.History[0].Outcome == notify.OutcomeTTRExpired && n.State == notify.StateScheduled
	})

	// Cancel.
	o.api(http.MethodPost, "/v1/notifications", `{"id": "c1", "topic": "pulled", "channel": "pull", "delay": "1h"}`, http.StatusCreated, nil)
	o.api(http.MethodDelete, "/v1/notifications/c1", "", http.StatusOK, nil)
	o.api(http.MethodDelete, "/v1/notifications/c1", "", http.StatusOK, nil)

	// Order keys: the second waits for the first.
	for _, id := range []string{"o1", "o2"} {
		o.api(http.MethodPost, "/v1/notifications", fmt.Sprintf(`{"id": %q, "topic": "ordered", "channel": "pull", "order_key": "k1"}`, id),
			http.StatusCreated, nil)
	}
	for _, id := range []string{"o1", "o2"} {
		o.api(http.MethodPost, "/v1/topics/ordered/reserve?max=10&wait=5s", "", http.StatusOK, &got)
		require.Len(t, got.Notifications, 1)
		require.Equal(t, id, got.Notifications[0].ID)
		o.api(http.MethodPost, "/v1/notifications/"+id+"/ack", receipt(0), http.StatusNoContent, nil)
	}

	// Dead letters: three die one after another, then list, replay, purge.
	for _, id := range []string{"d1", "d2", "d3"} {
		o.api(http.MethodPost, "/v1/notifications", fmt.Sprintf(`{"id": %q, "topic": "merchant-notify", "target": %q, "backoff": ["0s"]}`, id, refused),
			http.StatusCreated, nil)
		o.await(id, "dead", inState(notify.StateDead))
	}
	var page struct {
		Notifications []notify.Notification `json:"notifications"`
		NextCursor    string                `json:"next_cursor"`
	}
	o.api(http.MethodGet, "/v1/dead?topic=merchant-notify&limit=2", "", http.StatusOK, &page)
	require.Len(t, page.Notifications, 2)
	o.api(http.MethodGet, "/v1/dead?topic=merchant-notify&limit=2&cursor="+url.QueryEscape(page.NextCursor), "", http.StatusOK, &page)
	require.Len(t, page.Notifications, 1)
	require.Empty(t, page.NextCursor)
	o.api(http.MethodPost, "/v1/dead/replay", `{"ids": ["d1"], "dry_run": true}`, http.StatusOK, nil)
	o.api(http.MethodPost, "/v1/dead/replay", `{"topic": "merchant-notify", "since": "2000-01-01T00:00:00Z", "until": "2999-01-01T00:00:00Z", "dry_run": true}`,
		http.StatusOK, nil)
	o.api(http.MethodPost, "/v1/dead/replay", `{"ids": ["d1"], "reset_attempts": true}`, http.StatusOK, nil)
	o.await("d1", "dead again", func(n *notify.Notification) bool { return n.State == notify.StateDead && len(n.History) == 2 })
	o.api(http.MethodDelete, "/v1/dead?ids=d2", "", http.StatusOK, nil)
	o.api(http.MethodGet, "/v1/notifications/d2", "", http.StatusNotFound, nil)

	// A paused topic: nothing is attempted until it resumes.
	o.api(http.MethodPost, "/v1/topics/hooks/pause", "", http.StatusOK, nil)
	// Due 2s later: a dispatcher reads what is paused every 250ms, and one
	// that had not read it since the pause would deliver p1; 2s covers a
	// loaded machine's stall of that read.
	o.api(http.MethodPost, "/v1/notifications", fmt.Sprintf(`{"id": "p1", "topic": "hooks", "channel": "webhook", "target": %q, "delay": "2s"}`, ok),
		http.StatusCreated, nil)
	o.await("p1", "parked", func(n *notify.Notification) bool { return n.Paused })
	o.api(http.MethodPost, "/v1/topics/hooks/resume", "", http.StatusOK, nil)
	o.await("p1", "succeeded", inState(notify.StateSucceeded))

	// An endpoint with limits: never two attempts at once, at most 5 a
	// second; paused and resumed.
	o.api(http.MethodPut, "/v1/endpoints/ep-slow", fmt.Sprintf(`{"url": %q, "max_in_flight": 1, "rate": 5}`, o.rcv.URL+"/slow"),
		http.StatusCreated, nil)
	o.api(http.MethodPut, "/v1/endpoints/ep-slow", fmt.Sprintf(`{"url": %q, "max_in_flight": 1, "rate": 5}`, o.rcv.URL+"/slow"),
		http.StatusOK, nil)
	o.api(http.MethodPost, "/v1/endpoints/ep-slow/pause", "", http.StatusOK, nil)
	// Due 2s later, as p1; all four enqueued before the first is awaited,
	// so that they wait out the 2s together.
	for i := range 4 {
		o.api(http.MethodPost, "/v1/notifications", fmt.Sprintf(`{"id": "e%d", "topic": "merchant-notify", "endpoint": "ep-slow", "delay": "2s"}`, i),
			http.StatusCreated, nil)
	}
	for i := range 4 {
		o.await(fmt.Sprintf("e%d", i), "parked", func(n *notify.Notification) bool { return n.Paused })
	}
	o.api(http.MethodGet, "/v1/endpoints/ep-slow", "", http.StatusOK, nil)
	o.api(http.MethodPost, "/v1/endpoints/ep-slow/resume", "", http.StatusOK, nil)
	for i := range 4 {
		o.await(fmt.Sprintf("e%d", i), "succeeded", inState(notify.StateSucceeded))
	}
	o.rcv.mu.Lock()
	require.Equal(t, 1, o.rcv.most, "max_in_flight")
	require.Len(t, o.rcv.starts, 4)
	// At 5/s, with the slack a rate slot has, 4 attempts are granted over
	// 350ms or more of Redis's clock. The receiver sees them through each
	// attempt's own delays (a first connection, a loaded machine's
	// scheduling: 55ms more for the first than the last in one CI run);
	// without the rate, all 4, due at the resume, would come within a few
	// ms.
	require.GreaterOrEqual(t, o.rcv.starts[3].Sub(o.rcv.starts[0]), 200*time.Millisecond, "rate")
	o.rcv.mu.Unlock()
	o.api(http.MethodDelete, "/v1/endpoints/ep-slow", "", http.StatusNoContent, nil)
	o.api(http.MethodGet, "/v1/endpoints/ep-slow", "", http.StatusNotFound, nil)

	// Endpoint health: failing for its disable_after disables it, and its
	// notification waits; enabled at a working address, it is delivered.
	var view endpoint.View
	awaitEndpoint := func(what string, cond func(*endpoint.View) bool) {
		t.Helper()
		waitFor(t, 30*time.Second, "ep-bad "+what, func() bool {
			view = endpoint.View{}
			return s.call(t, http.MethodGet, "/v1/endpoints/ep-bad", "", &view) == http.StatusOK && cond(&view)
		})
		o.api(http.MethodGet, "/v1/endpoints/ep-bad", "", http.StatusOK, nil)
	}
	putBad := func(endpointJSON string, want int) {
		t.Helper()
		o.api(http.MethodPut, "/v1/endpoints/ep-bad", endpointJSON, want, nil)
	}
	putBad(fmt.Sprintf(`{"url": %q, "disable_after": "1s"}`, refused), http.StatusCreated)
	// Its second attempt, 3s after the first, fails past disable_after.
	o.api(http.MethodPost, "/v1/notifications", `{"id": "h1", "topic": "merchant-notify", "endpoint": "ep-bad", "backoff": ["0s", "3s", "3s"]}`,
		http.StatusCreated, nil)
	awaitEndpoint("disabled", func(v *endpoint.View) bool { return v.Disabled && v.FailingSince != nil })
	o.await("h1", "parked", func(n *notify.Notification) bool { return n.Paused })
	putBad(fmt.Sprintf(`{"url": %q, "disable_after": "1s"}`, ok), http.StatusOK)
	// The senders read an endpoint through a cache: once it has passed, no
	// attempt goes to the old address.
	time.Sleep(endpoint.CacheTTLDefault)
	o.api(http.MethodPost, "/v1/endpoints/ep-bad/enable", "", http.StatusOK, nil)
	o.await("h1", "succeeded", inState(notify.StateSucceeded))
	// A success ends a failing streak (the dispatcher), and so does
	// dropping disable_after (PutEndpoint).
	putBad(fmt.Sprintf(`{"url": %q, "disable_after": "1h"}`, refused), http.StatusOK)
	time.Sleep(endpoint.CacheTTLDefault)
	o.api(http.MethodPost, "/v1/notifications", `{"id": "h2", "topic": "merchant-notify", "endpoint": "ep-bad", "backoff": ["0s", "5s"]}`,
		http.StatusCreated, nil)
	awaitEndpoint("failing", func(v *endpoint.View) bool { return v.FailingSince != nil })
	putBad(fmt.Sprintf(`{"url": %q, "disable_after": "1h"}`, ok), http.StatusOK)
	o.await("h2", "succeeded", inState(notify.StateSucceeded))
	awaitEndpoint("healthy", func(v *endpoint.View) bool { return v.FailingSince == nil })
	putBad(fmt.Sprintf(`{"url": %q, "disable_after": "1h"}`, refused), http.StatusOK)
	time.Sleep(endpoint.CacheTTLDefault)
	o.api(http.MethodPost, "/v1/notifications", `{"id": "h3", "topic": "merchant-notify", "endpoint": "ep-bad", "backoff": ["0s", "1h"]}`,
		http.StatusCreated, nil)
	o.await("h3", "failed", func(n *notify.Notification) bool { return n.Attempts == 1 && n.State == notify.StateScheduled })
	awaitEndpoint("failing", func(v *endpoint.View) bool { return v.FailingSince != nil })
	putBad(fmt.Sprintf(`{"url": %q}`, refused), http.StatusOK)
	view = endpoint.View{}
	o.api(http.MethodGet, "/v1/endpoints/ep-bad", "", http.StatusOK, &view)
	require.Nil(t, view.FailingSince)
	o.api(http.MethodDelete, "/v1/notifications/h3", "", http.StatusOK, nil)
	o.api(http.MethodGet, "/v1/endpoints", "", http.StatusOK, nil)

	// Quarantine: a record that no longer decodes is moved aside when
	// reserved, and stops nothing.
	o.api(http.MethodPost, "/v1/notifications", `{"id": "q1", "topic": "quar", "channel": "pull"}`, http.StatusCreated, nil)
	o.api(http.MethodPost, "/v1/notifications", `{"id": "q2", "topic": "quar", "channel": "pull"}`, http.StatusCreated, nil)
	corrupt(t, rdb, e.namespace, "q1")
	o.api(http.MethodPost, "/v1/topics/quar/reserve?max=10&wait=5s", "", http.StatusOK, &got)
	require.Len(t, got.Notifications, 1)
	o.api(http.MethodPost, "/v1/notifications/q2/ack", receipt(0), http.StatusNoContent, nil)
	o.api(http.MethodGet, "/v1/notifications/q1", "", http.StatusNotFound, nil)
	require.Contains(t, s.logs.String(), "quarantined an undecodable notification")

	o.dashboard()

	// The sweeper deletes finished records once their retention passed.
	for _, id := range []string{"w1", "b1", "c1", "o1", "p1", "e0", "h1"} {
		waitFor(t, 30*time.Second, id+" swept", func() bool { status, _ := o.record(id); return status == http.StatusNotFound })
	}
	o.api(http.MethodGet, "/v1/notifications/d1", "", http.StatusOK, nil)
	o.api(http.MethodGet, "/v1/stats", "", http.StatusOK, nil)
	// Store calls whose failure is counted, not logged, such as the
	// dispatchers' unparking of strays.
	_, scraped := s.send(t, http.MethodGet, "/metrics", "")
	require.NotContains(t, string(scraped), metrics.RedisErrorsTotal+"{")
	return o.answers
}

// corrupt makes id's stored content undecodable, keeping the header line
// the scripts read.
func corrupt(t *testing.T, rdb *redis.Client, namespace, id string) {
	t.Helper()
	ctx := context.Background()
	for shard := range 4 {
		key := fmt.Sprintf("%s:{%d}:job", namespace, shard)
		c, err := rdb.HGet(ctx, key, id).Result()
		if err == redis.Nil {
			continue
		}
		require.NoError(t, err)
		header, _, _ := strings.Cut(c, "\n")
		require.NoError(t, rdb.HSet(ctx, key, id, header+"\n\xff not a record").Err())
		return
	}
	require.FailNow(t, "no record of "+id)
}

// browser is the dashboard's visitor: it follows no redirect, and sends
// the session cookie it was given.
type browser struct {
	o      *operator
	cookie *http.Cookie
}

func (b *browser) do(method, path string, form url.Values) (int, string, *http.Response) {
	b.o.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.o.s.url+path, body)
	require.NoError(b.o.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.o.s.url)
	}
	if b.cookie != nil {
		req.AddCookie(b.cookie)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	require.NoError(b.o.t, err)
	defer res.Body.Close()
	page, err := io.ReadAll(res.Body)
	require.NoError(b.o.t, err)
	return res.StatusCode, string(page), res
}

var (
	csrfRe  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	tagRe   = regexp.MustCompile(`(?s)<svg.*?</svg>|<[^>]+>|≤ \S+`)
	spaceRe = regexp.MustCompile(`\s+`)
)

// text returns the words of the first element of page that re matches.
func text(t *testing.T, page, re string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)` + re).FindString(page)
	require.NotEmpty(t, m, "no %s in the page", re)
	return strings.TrimSpace(spaceRe.ReplaceAllString(tagRe.ReplaceAllString(m, " "), " "))
}

// dashboard signs in, reads the overview, a notification and the dead
// letters, purges one, and signs out: the cookie then opens nothing.
func (o *operator) dashboard() {
	t := o.t
	b := &browser{o: o}
	status, _, res := b.do(http.MethodPost, "/ui/login", url.Values{"token": {o.s.token}, "next": {"/ui/"}})
	require.Equal(t, http.StatusSeeOther, status)
	for _, c := range res.Cookies() {
		if c.Name == "herald_session" {
			b.cookie = c
		}
	}
	require.NotNil(t, b.cookie)

	status, page, _ := b.do(http.MethodGet, "/ui/", nil)
	require.Equal(t, http.StatusOK, status)
	o.note("overview merchant-notify: %s", text(t, page, `<tr data-topic="merchant-notify">.*?</tr>`))
	o.note("overview quar: %s", text(t, page, `<tr data-topic="quar">.*?</tr>`))
	o.note("overview totals: %s", text(t, page, `<tfoot>.*?</tfoot>`))
	o.note("overview endpoints: %s", text(t, page, `<table class="grid" id="endpoints">.*?</table>`))
	status, page, _ = b.do(http.MethodGet, "/ui/notifications/d1", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "dead")
	status, page, _ = b.do(http.MethodGet, "/ui/dead?topic=merchant-notify", nil)
	require.Equal(t, http.StatusOK, status)
	o.note("dead letters: d1 %v, d3 %v", strings.Contains(page, "d1"), strings.Contains(page, "d3"))
	status, page, _ = b.do(http.MethodGet, "/ui/dead/confirm?action=purge&ids=d3", nil)
	require.Equal(t, http.StatusOK, status)
	o.note("confirm: %s", text(t, page, `<p class="count" id="matched">.*?</p>`))
	status, page, _ = b.do(http.MethodPost, "/ui/dead/purge", url.Values{"csrf": {csrfRe.FindStringSubmatch(page)[1]}, "ids": {"d3"}})
	require.Equal(t, http.StatusOK, status)
	o.note("purged: %s", text(t, page, `<p class="result" id="result">.*?</p>`))
	status, _, _ = b.do(http.MethodGet, "/ui/policies", nil)
	require.Equal(t, http.StatusOK, status)
	for _, action := range []string{"pause", "resume"} {
		status, _, _ = b.do(http.MethodPost, "/ui/topics/quar/"+action, url.Values{"csrf": {csrfRe.FindStringSubmatch(page)[1]}})
		require.Equal(t, http.StatusSeeOther, status)
		status, page, _ = b.do(http.MethodGet, "/ui/", nil)
		require.Equal(t, http.StatusOK, status)
		o.note("after %s: %s", action, text(t, page, `<tr data-topic="quar">.*?</tr>`))
	}

	status, _, _ = b.do(http.MethodPost, "/ui/logout", url.Values{"csrf": {csrfRe.FindStringSubmatch(page)[1]}})
	require.Equal(t, http.StatusSeeOther, status)
	status, _, res = b.do(http.MethodGet, "/ui/", nil)
	require.Equal(t, http.StatusSeeOther, status, "the signed-out cookie opens nothing")
	o.note("after sign-out: %d %s", status, res.Header.Get("Location"))
}
