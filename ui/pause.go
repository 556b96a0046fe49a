package ui

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/store"
)

// Pause, resume and enable lose nothing (a paused notification waits,
// unburnt), so their buttons act at once, with no confirmation page: the
// form posts, and the overview it redirects to, at the row acted on, says
// what happened.

// flashCookie carries the message of the last pause, resume or enable to
// the page the form redirects to, which shows it once.
const flashCookie = "herald_flash"

// flashTTL bounds how long a message waits for its page.
const flashTTL = time.Minute

// Actions of the overview's buttons.
const (
	actionPause  = "pause"
	actionResume = "resume"
	actionEnable = "enable"
)

// formAction is a button of the overview: a form that posts to URL, with
// the session's CSRF token.
type formAction struct {
	URL, Label string
	// Action is pause, resume or enable, the button's class.
	Action string
}

// pauseActions returns the pause or resume button of kind
// (store.PauseTopic or store.PauseEndpoint) name.
func pauseActions(kind, name string, paused bool) []formAction {
	if paused {
		return []formAction{{URL: actionURL(kind, name, actionResume), Label: "Resume", Action: actionResume}}
	}
	return []formAction{{URL: actionURL(kind, name, actionPause), Label: "Pause", Action: actionPause}}
}

// actionURL is where the button of action on kind name posts:
// /ui/topics/T/pause, /ui/endpoints/E/enable.
func actionURL(kind, name, action string) string {
	return Prefix + kind + "s/" + pathSegment(name) + "/" + action
}

// routePauses adds the routes of the pause, resume and enable forms.
func (h *Handler) routePauses(mux *http.ServeMux) {
	route := func(kind, action string) {
		mux.Handle("POST "+Prefix+kind+"s/{name}/"+action, h.guard(h.pauseAction(kind, action)))
	}
	for _, kind := range []string{store.PauseTopic, store.PauseEndpoint} {
		route(kind, actionPause)
		route(kind, actionResume)
	}
	route(store.PauseEndpoint, actionEnable)
}

// pauseAction handles the form of action on a topic or an endpoint: it
// acts through the client, as the API does, and sends the browser back to
// the overview with a message saying what happened.
func (h *Handler) pauseAction(kind, action string) sessionHandler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		name := r.PathValue("name")
		ctx, cancel := h.storeContext(r)
		defer cancel()
		msg, err := h.runPauseAction(ctx, kind, action, name)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		setCookie(w, r, flashCookie, base64.RawURLEncoding.EncodeToString([]byte(msg)), flashTTL)
		http.Redirect(w, r, rowURL(kind, name), http.StatusSeeOther)
	}
}

// runPauseAction pauses, resumes or enables kind name and returns the
// message for the operator.
func (h *Handler) runPauseAction(ctx context.Context, kind, action, name string) (string, error) {
	what := kind + " " + name
	switch action {
	case actionPause:
		if err := h.client.Pause(ctx, kind, name); err != nil {
			return "", err
		}
		return "Paused " + what + ": no attempt of its notifications starts until it is resumed; attempts already running finish.", nil
	case actionResume:
		n, err := h.client.Resume(ctx, kind, name)
		if err != nil {
			return "", err
		}
		return "Resumed " + what + ": " + waited(n) + " while it was paused start now.", nil
	default:
		n, err := h.client.EnableEndpoint(ctx, name)
		if err != nil {
			return "", err
		}
		return "Enabled " + what + ": " + waited(n) + " while it was disabled start now.", nil
	}
}

// waited counts the notifications a resume or an enable made due.
func waited(n int) string {
	if n == 1 {
		return "the 1 notification that waited"
	}
	return fmt.Sprintf("the %d notifications that waited", n)
}

// takeFlash returns the message a form left for this page, and deletes it
// so that it shows once.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	setCookie(w, r, flashCookie, "", 0)
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return ""
	}
	return string(b)
}

// endpointRow is one endpoint on the overview: what the API shows of it,
// never a secret's value.
type endpointRow struct {
	endpoint.View
	activity
	// Expired counts the secrets that no longer sign.
	Expired int
	// PausedSince is when the endpoint was paused; zero when it is not.
	PausedSince time.Time
	Actions     []formAction
}

// endpointRows fills d's endpoints: the rows of the page q asks for
// (parameter epage) with their health (ListEndpoints reads it), attempts
// and buttons, links to every paused or disabled one, and to those that
// fail; paused is store.Paused's answer, minutes the endpoints' activity
// by name.
func (h *Handler) endpointRows(ctx context.Context, q url.Values, paused map[string]time.Time,
	minutes map[string][]store.MinuteActivity, now time.Time, d *overviewData) error {
	views, err := h.client.ListEndpoints(ctx)
	if err != nil {
		return err
	}
	// Every endpoint's attempts, not only the page's, say which fail.
	acts := map[string]activity{}
	for i, v := range views {
		if v.Shadowed { // the file's, of the same name, is listed
			continue
		}
		url := overviewURL(q, "epage", i/overviewPageSize+1) + "#endpoint-" + v.Name
		disabled := v.Disabled || v.DisabledAt != nil
		if disabled || v.Paused {
			why := "paused"
			if disabled {
				why = "disabled"
			}
			d.HeldEndpoints = append(d.HeldEndpoints, pausedLink{Name: v.Name, Why: why, URL: url})
		}
		a := newActivity(minutes[v.Name], now)
		acts[v.Name] = a
		// A disabled one is listed as such; its health says it failed.
		if !disabled && (v.FailingSince != nil || (a.RecentFailed > 0 && a.RecentOK == 0)) {
			if len(d.FailingEndpoints) == failingListMax {
				d.FailingMore++
				continue
			}
			f := failingLink{pausedLink: pausedLink{Name: v.Name, URL: url}}
			if v.FailingSince != nil {
				f.Since = *v.FailingSince
			}
			d.FailingEndpoints = append(d.FailingEndpoints, f)
		}
	}
	at := slices.IndexFunc(views, func(v endpoint.View) bool { return v.Name == q.Get(store.PauseEndpoint) })
	lo, hi, pages := pageOf(q, "epage", len(views), at)
	d.EndpointPages = pages
	views = views[lo:hi]
	d.Endpoints = make([]endpointRow, 0, len(views))
	for _, v := range views {
		row := endpointRow{View: v, PausedSince: paused[store.PauseKey(store.PauseEndpoint, v.Name)]}
		for _, s := range v.Secrets {
			if s.Expired {
				row.Expired++
			}
		}
		// A shadowed endpoint shares its name, and so its pause, health and
		// attempts, with the file's, listed just before it: they are there.
		if !v.Shadowed {
			row.activity = acts[v.Name]
			row.Actions = pauseActions(store.PauseEndpoint, v.Name, v.Paused)
			if v.Disabled || v.DisabledAt != nil {
				row.Actions = append(row.Actions, formAction{URL: actionURL(store.PauseEndpoint, v.Name, actionEnable),
					Label: "Enable", Action: actionEnable})
			}
		}
		d.Endpoints = append(d.Endpoints, row)
	}
	return nil
}

// failingListMax bounds the failing endpoints the overview names: in an
// outage of the network they may be all of them.
const failingListMax = 20

// failingLink names an endpoint that fails, and the overview page of its
// row.
type failingLink struct {
	pausedLink
	// Since is when its every attempt started failing, as its health says;
	// zero when only its attempts of the last five minutes, all failed,
	// say so (its health is kept only with a disable_after).
	Since time.Time
}

// pausedTopics returns the topics paused has, with when each was paused.
func pausedTopics(paused map[string]time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	prefix := store.PauseKey(store.PauseTopic, "")
	for k, at := range paused {
		if t, ok := strings.CutPrefix(k, prefix); ok {
			out[t] = at
		}
	}
	return out
}
