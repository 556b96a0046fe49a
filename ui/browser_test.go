//go:build browser

// The browser test drives the dashboard in headless Chromium. It is built
// only with the browser tag, which `make test-ui` sets, so that a plain
// `go test ./...` does not need Chromium; run with the tag, a missing
// Chromium fails it with a message that says how to install one.

package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/ui"
)

// chromiumPath finds the browser: $HERALDTEST_CHROMIUM, or Debian's chromium
// (or another Chrome) on PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HERALDTEST_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("HERALDTEST_CHROMIUM is %q, which is not an executable Chrome or Chromium: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the browser test needs Chromium and none is on PATH: install it (Debian/Ubuntu: apt-get install chromium; " +
		"`make test-ui` does that through scripts/ensure-chromium) or point HERALDTEST_CHROMIUM at a Chrome binary")
	return ""
}

// receiver answers webhooks: 500 with an answer holding a script while
// failing is set, 200 otherwise.
type receiver struct {
	failing atomic.Bool
	hits    atomic.Int64
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	rc.hits.Add(1)
	if rc.failing.Load() {
		http.Error(w, `<script>window.pwned = "answer"</script>`, http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// TestBrowser signs in, opens the overview, finds a dead notification,
// opens its timeline, replays it and sees it succeed; a payload and a
// receiver's answer holding <script> show as text, and a state change
// without the CSRF token is refused. It saves the README's screenshots in
// docs/.
func TestBrowser(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	st, err := store.New(&store.Config{Client: server.Client(t), Namespace: redistest.Namespace(t), Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	set, err := policy.NewSet(map[string]policy.Policy{
		"merchant-notify": {Backoff: []notify.Duration{0, notify.Duration(20 * time.Millisecond), notify.Duration(40 * time.Millisecond)}},
	}, map[string]policy.Topic{
		"order-notify":         {Channel: notify.ChannelWebhook, Policy: "merchant-notify"},
		"invoice-ready":        {Channel: notify.ChannelWebhook},
		"appointment-reminder": {Channel: notify.ChannelWebhook},
	})
	require.NoError(t, err)
	set, err = set.WithEndpoints(map[string]endpoint.Endpoint{"acme-shop": {URL: "https://acme.example/hooks",
		Secrets: []endpoint.Secret{{Value: fileSecret}}, MaxInFlight: 4, Rate: 10, DisableAfter: notify.Duration(time.Hour)}})
	require.NoError(t, err)
	policies := func() *policy.Set { return set }

	failing, healthy := &receiver{}, &receiver{}
	failing.failing.Store(true)
	failingSrv, healthySrv := httptest.NewServer(failing), httptest.NewServer(healthy)
	defer failingSrv.Close()
	defer healthySrv.Close()

	hook, err := webhook.New(&webhook.Config{Common: httpsend.Common{Rules: policy.CurrentRules(policies),
		HTTP: httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}, Logger: heraldtest.Logger(t)}}})
	require.NoError(t, err)
	d, err := schedule.New(&schedule.Config{Store: st, Senders: map[string]notify.Sender{notify.ChannelWebhook: hook},
		PoliciesFunc: policies, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	defer d.Stop()

	dashboard, err := ui.New(&ui.Config{Store: st, PoliciesFunc: policies, Tokens: []string{testToken},
		Refresh: time.Second, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	defer dashboard.Close()
	apiSrv, err := api.New(&api.Config{Store: st, PoliciesFunc: policies, Tokens: []string{testToken}, UI: dashboard,
		Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	defer apiSrv.Close()
	web := httptest.NewServer(apiSrv)
	defer web.Close()

	// Some traffic for the overview, then the notification the test
	// follows: every attempt fails, so it dies after three.
	c, err := client.New(&client.Config{Store: st, PoliciesFunc: policies})
	require.NoError(t, err)
	defer c.Close()
	enqueue := func(id, topic, target, payload string, delay time.Duration) {
		t.Helper()
		dl := notify.Duration(delay)
		_, _, err := c.Enqueue(ctx, &notify.Request{ID: id, Topic: topic, Target: target, Payload: json.RawMessage(payload), Delay: &dl})
		require.NoError(t, err)
	}
	for i := range 24 {
		enqueue(fmt.Sprintf("invoice-%d", 700+i), "invoice-ready", healthySrv.URL, fmt.Sprintf(`{"invoice":%d}`, 700+i), 0)
		enqueue(fmt.Sprintf("order-%d-shipped", 900+i), "order-notify", healthySrv.URL, fmt.Sprintf(`{"order":%d}`, 900+i), 0)
		enqueue(fmt.Sprintf("appt-%d-reminder", 300+i), "appointment-reminder", healthySrv.URL, `{"appointment":1}`, time.Duration(i+1)*time.Hour)
	}
	for i := range 4 {
		enqueue(fmt.Sprintf("order-%d-refunded", 950+i), "order-notify", failingSrv.URL, `{"order":950}`, 0)
	}
	const id = "order-1001-paid"
	enqueue(id, "order-notify", failingSrv.URL, `{"order":1001,"note":"<script>window.pwned = \"payload\"</script>"}`, 0)
	waitState(t, st, id, notify.StateDead)

	bctx := newBrowser(ctx, t, exe)
	run := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(bctx, steps...))
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err)
		return s
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", name), png, 0o644))
	}

	// Sign in: the overview sends the browser to the login form first.
	run(chromedp.Navigate(web.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	run(chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("topics")))
	require.Contains(t, text(`tr[data-topic="order-notify"]`), "order-notify")
	waitSettled(t, st)
	run(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("topics")))
	screenshot("ui-overview.png")

	// The overview's dead count leads to the dead letters of the topic.
	run(chromedp.Click(chromedp.CSS(`tr[data-topic="order-notify"] a.dead`)), chromedp.WaitVisible(chromedp.ID("dead")))
	require.Contains(t, text("#dead"), id)
	screenshot("ui-dead-letters.png")

	// Its timeline: three failed attempts, the receiver's answer and the
	// payload shown as text, never run.
	run(chromedp.Click(chromedp.CSS(`#dead a[href="/ui/notifications/`+id+`"]`)), chromedp.WaitVisible(chromedp.ID("timeline")))
	require.Equal(t, "dead", text("#state"))
	require.Contains(t, text("#timeline"), `<script>window.pwned = "answer"</script>`)
	require.Contains(t, text("#payload"), `<script>window.pwned = \"payload\"</script>`)
	pwned, err := chromedp.Run(bctx, chromedp.Evaluate[string](`typeof window.pwned`))
	require.NoError(t, err)
	require.Equal(t, "undefined", pwned, "no script from a payload or an answer ran")
	scripts, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.scripts.length`))
	require.NoError(t, err)
	require.Equal(t, 1, scripts, "the page's one script is app.js")

	// Replay: the confirmation counts one, and the receiver now answers.
	failing.failing.Store(false)
	run(chromedp.Click(chromedp.ID("replay")), chromedp.WaitVisible(chromedp.ID("matched")))
	require.Contains(t, text("#matched"), "1 dead notification match")
	run(chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("result")))
	require.Equal(t, "Replayed 1 of 1 matching dead notification.", text("#result"))
	run(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("timeline")))
	// The page refreshes itself until the attempt has succeeded.
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("state").textContent === "succeeded"`,
		chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err, "the replayed notification did not show as succeeded")
	require.Contains(t, text("#timeline"), "success")
	screenshot("ui-notification.png")

	// A state change without the session's CSRF token is refused, and
	// changes nothing.
	run(chromedp.Navigate(web.URL+"/ui/dead?topic=order-notify"), chromedp.WaitVisible(chromedp.ID("dead")))
	_, err = chromedp.Run(bctx, chromedp.Evaluate[bool](`(function () {
		var f = document.createElement("form");
		f.method = "post"; f.action = "/ui/dead/purge";
		var i = document.createElement("input");
		i.name = "topic"; i.value = "order-notify"; f.appendChild(i);
		document.body.appendChild(f); f.submit(); return true;
	})()`))
	require.NoError(t, err)
	run(chromedp.WaitVisible(chromedp.ID("error-message")))
	require.Contains(t, text("#error-message"), "Nothing was changed")
	stats, err := st.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, stats["order-notify"].Dead, "the refused purge deleted nothing")

	// Pause a topic from the overview, then resume it: each button acts at
	// once, and the page says what it did.
	row := `tr[data-topic="invoice-ready"]`
	run(chromedp.Navigate(web.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("endpoints")))
	require.Contains(t, text(`tr[data-endpoint="acme-shop"]`), "https://acme.example/hooks")
	run(chromedp.Click(chromedp.CSS(row+" button.pause")), chromedp.WaitVisible(chromedp.CSS(row+" button.resume")))
	require.Contains(t, text("#flash"), "Paused topic invoice-ready")
	require.Contains(t, text(row+" td.topic"), "paused")
	paused, err := st.IsPaused(ctx, store.PauseTopic, "invoice-ready")
	require.NoError(t, err)
	require.True(t, paused)
	run(chromedp.Click(chromedp.CSS(row+" button.resume")), chromedp.WaitVisible(chromedp.CSS(row+" button.pause")))
	require.Contains(t, text("#flash"), "Resumed topic invoice-ready")
	require.NotContains(t, text(row+" td.topic"), "paused")
	paused, err = st.IsPaused(ctx, store.PauseTopic, "invoice-ready")
	require.NoError(t, err)
	require.False(t, paused)
}

// browserWidth is the width of the window newBrowser opens.
const browserWidth = 1280

// newBrowser starts a headless Chromium, closed when ctx ends or the test
// does, and returns its context.
func newBrowser(ctx context.Context, t *testing.T, exe string) context.Context {
	t.Helper()
	bctx, bcancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(browserWidth, 860))
	t.Cleanup(bcancel)
	bctx, bcancel = chromedp.NewContext(bctx, chromedp.WithLogf(t.Logf))
	t.Cleanup(bcancel)
	return bctx
}

// TestBrowserLongValuesWrap: a notification whose target and headers are
// long (a signed callback URL) shows in the window's width, its long
// values wrapped, rather than as a page several screens wide.
func TestBrowserLongValuesWrap(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := setup(t)
	web := httptest.NewServer(b.handler)
	defer web.Close()
	long := strings.Repeat("0123456789abcdef", 40)
	n := heraldtest.Notification(t, "signed-1", b.clock.Now(), heraldtest.Topic("orders"), heraldtest.Delay(time.Hour),
		heraldtest.Channel(notify.ChannelWebhook, "https://shop.example/notify/"+long+"?signature="+long),
		func(r *notify.Request) { r.Headers = map[string]string{"X-Signature": long} })
	_, _, err := b.store.Enqueue(ctx, n, false)
	require.NoError(t, err)

	bctx := newBrowser(ctx, t, exe)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(web.URL+"/ui/notifications/signed-1"), chromedp.WaitVisible(chromedp.ID("headers"))))
	width, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	require.NoError(t, err)
	require.LessOrEqual(t, width, browserWidth, "the page is wider than the window")
}

// TestBrowserStaleDataSaysSo: when the live refresh fails (the server
// is gone, or the session ended), the page says at its top that what it
// shows is no longer current, and greys it, rather than leaving numbers
// that look live.
func TestBrowserStaleDataSaysSo(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := setup(t)
	h, err := ui.New(&ui.Config{Store: b.store, Refresh: time.Second, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	defer h.Close()
	web := httptest.NewServer(h)
	defer web.Close()

	bctx := newBrowser(ctx, t, exe)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(web.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("live-status"))))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("live-status").textContent.indexOf("updated") === 0`,
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the page did not refresh")
	web.CloseClientConnections()
	web.Close()
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`!document.getElementById("stale").hidden`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the page does not say it is stale")
	note, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID("stale")))
	require.NoError(t, err)
	require.Contains(t, note, "not current")
	stale, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.getElementById("live").classList.contains("stale")`))
	require.NoError(t, err)
	require.True(t, stale, "the live part is not marked stale")
}

// waitState waits until notification id is in state want.
func waitState(t *testing.T, st *store.Store, id string, want notify.State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := st.Get(context.Background(), id)
		if err == nil && n.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become %s (last: %v, %v)", id, want, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSettled waits until nothing due now is scheduled or reserved, so the
// overview's screenshot shows the traffic's outcome.
func waitSettled(t *testing.T, st *store.Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		stats, err := st.Stats(context.Background())
		require.NoError(t, err)
		busy := stats["order-notify"].Scheduled + stats["order-notify"].Reserved + stats["invoice-ready"].Scheduled +
			stats["invoice-ready"].Reserved + stats["appointment-reminder"].Reserved
		if busy == 0 && stats["order-notify"].Dead == 5 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("traffic did not settle: %+v", stats)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
