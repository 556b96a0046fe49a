package ui

import (
	"crypto/sha256"
	"encoding/hex"
	"html/template"
	"io/fs"
	"strings"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// pageNames are the pages, each a templates/NAME.html defining "title" and
// "content" inside templates/layout.html.
var pageNames = []string{"login", "error", "overview", "notification", "dead", "confirm", "policies"}

var funcs = template.FuncMap{
	// utc prints a time in UTC to the millisecond; the zero time as a dash.
	"utc": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000") + " UTC"
	},
	"dur": durText,
	// p99 prints a lateness percentile as its bucket's bound, "≤ 25ms",
	// or "> 5m0s" past the last one.
	"p99": func(d time.Duration) string {
		if d == store.LatenessBeyond {
			return "> " + durText(store.LatenessLastBound)
		}
		return "≤ " + durText(d)
	},
	"title": func(s string) string {
		if s == "" {
			return s
		}
		return strings.ToUpper(s[:1]) + s[1:]
	},
	"join":            func(s []string) string { return strings.Join(s, ",") },
	"rowURL":          rowURL,
	"notificationURL": notificationURL,
	"asset":           assetURL,
	// last returns the last attempt of a history, or nil.
	"last": func(h []notify.Attempt) *notify.Attempt {
		if len(h) == 0 {
			return nil
		}
		return &h[len(h)-1]
	},
}

// durText prints a duration rounded to what an operator reads.
func durText(d time.Duration) string {
	switch {
	case d == policy.ScheduleCeiling:
		return policy.ScheduleCeilingText
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.String()
}

// assetVersions are the first 12 hex digits of the SHA-256 of each
// embedded asset, by name.
var assetVersions = func() map[string]string {
	out := map[string]string{}
	entries, _ := fs.ReadDir(staticFS, "static")
	for _, e := range entries {
		b, _ := fs.ReadFile(staticFS, "static/"+e.Name())
		sum := sha256.Sum256(b)
		out[e.Name()] = hex.EncodeToString(sum[:])[:12]
	}
	return out
}()

// assetURL is where a page loads the embedded asset name from: its
// version in the query, since browsers keep the assets an hour
// (cacheStatic), so that a new release's pages load its own.
func assetURL(name string) string {
	return Prefix + "static/" + name + "?v=" + assetVersions[name]
}

// parsePages parses each page with the layout.
func parsePages() (map[string]*template.Template, error) {
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}
