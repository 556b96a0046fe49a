// Package templates renders notification bodies with text/template, and its
// folder holds the templates Herald ships.
//
// # Files
//
// Load reads every file of one folder (not its sub-folders) whose name ends
// in .json, .sms or .tmpl, so the package's Go files, which live beside the
// shipped templates, are never taken for templates. A symbolic link to a
// file counts as the file, so a folder mounted from a Kubernetes ConfigMap
// loads; names starting with a dot, such as the ConfigMap's ..data, are
// never read. A template's name is its file name, as topics name it
// ("template: order-notify.json").
//
// A name ending in .json, or in .json.tmpl, is a JSON template: what it
// renders must be valid JSON, and senders send it as application/json. Any
// other template (.sms, .txt.tmpl) renders text. A byte order mark that
// an editor put at the start of a file is not part of the template.
//
// Every template is parsed at start-up, so a broken one stops Herald with
// its file and line rather than failing each notification later.
//
// # Data
//
// A template sees the notification as a map, with missingkey=error so that a
// misspelt or absent field is an error rather than "<no value>":
//
//	.id .topic .channel .target .policy .template  strings
//	.attempt    the 0-based index of the attempt being rendered
//	.headers    the notification's own headers (map of strings)
//	.payload    the JSON payload, decoded: objects are maps, numbers keep
//	            their exact text
//	.send_at    the scheduled send time (time.Time)
//
// An optional payload field is read with index, which gives nil rather than
// an error when the field is absent: {{with index .payload "memo"}}...{{end}}.
//
// # Functions
//
//	json V         V as JSON: the safe way to put any value into a JSON template
//	now            the current time
//	date LAYOUT T  T (a time.Time, or an RFC 3339 string) in Go's LAYOUT, in
//	               T's own time zone
//
// A render error, a missing template included, is the sender's permanent
// failure: a retry would render the same thing.
package templates

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/heraldhq/herald/notify"
)

// Content types of rendered templates.
const (
	ContentTypeJSON = "application/json"
	ContentTypeText = "text/plain; charset=utf-8"
)

// Set is the templates of one folder, parsed. It is safe for concurrent
// use; Reload replaces them all at once.
type Set struct {
	dir    string
	byName atomic.Pointer[map[string]*entry]
	// nowFunc is the clock of the now function; tests stop it.
	nowFunc func() time.Time
}

type entry struct {
	tmpl *template.Template
	json bool
}

// isTemplate reports whether a file name is one Load reads.
func isTemplate(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch filepath.Ext(name) {
	case ".json", ".sms", ".tmpl":
		return true
	}
	return false
}

// isJSON reports whether a template's output must be JSON.
func isJSON(name string) bool {
	return filepath.Ext(strings.TrimSuffix(name, ".tmpl")) == ".json"
}

// Load parses every template in dir. The error of a broken template names
// its file and line.
func Load(dir string) (*Set, error) {
	s := &Set{dir: dir, nowFunc: time.Now}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload parses the folder's templates again and puts them in place of
// those loaded before, for the renders that start after it; when one does
// not parse, or the folder cannot be read, it returns the error and the
// templates loaded before stay.
func (s *Set) Reload() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("templates: %w", err)
	}
	byName := map[string]*entry{}
	for _, e := range entries {
		if !isTemplate(e.Name()) {
			continue
		}
		path := filepath.Join(s.dir, e.Name())
		// What counts is what a link leads to: a ConfigMap volume holds
		// every file as a link through its hidden ..data. A broken link is
		// an error, as a file that cannot be read is.
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("templates: %w", err)
		}
		if !info.Mode().IsRegular() {
			continue
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("templates: %w", err)
		}
		// Editors that start UTF-8 files with a byte order mark would
		// have it rendered: invalid JSON, or an invisible first character
		// that costs an SMS its GSM alphabet.
		text = bytes.TrimPrefix(text, []byte("\ufeff"))
		t, err := template.New(e.Name()).Option("missingkey=error").Funcs(s.funcs()).Parse(string(text))
		if err != nil {
			// text/template names the template and line ("template:
			// order-notify.json:3: ..."); the path says which folder.
			return fmt.Errorf("templates: %s: %w", path, err)
		}
		byName[e.Name()] = &entry{tmpl: t, json: isJSON(e.Name())}
	}
	s.byName.Store(&byName)
	return nil
}

// Names returns the names of the loaded templates, sorted.
func (s *Set) Names() []string {
	return slices.Sorted(maps.Keys(*s.byName.Load()))
}

// Has reports whether a template of that name is loaded.
func (s *Set) Has(name string) bool {
	_, ok := (*s.byName.Load())[name]
	return ok
}

// ContentType returns the media type of what the named template renders:
// ContentTypeJSON for a JSON template, ContentTypeText otherwise.
func ContentType(name string) string {
	if isJSON(name) {
		return ContentTypeJSON
	}
	return ContentTypeText
}

// Render renders the named template for n. The error names the template:
// one not loaded, a missing field, a failing function, or JSON output that
// is not valid JSON.
func (s *Set) Render(name string, n *notify.Notification) ([]byte, error) {
	e, ok := (*s.byName.Load())[name]
	if !ok {
		return nil, fmt.Errorf("template %q is not loaded (have %s)", name, strings.Join(s.Names(), ", "))
	}
	data, err := dataOf(n)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	var buf bytes.Buffer
	if err := e.tmpl.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	if e.json {
		var v any
		if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
			var syn *json.SyntaxError
			if errors.As(err, &syn) {
				return nil, fmt.Errorf("render %s: output is not valid JSON at byte %d: %w", name, syn.Offset, err)
			}
			return nil, fmt.Errorf("render %s: output is not valid JSON: %w", name, err)
		}
	}
	return buf.Bytes(), nil
}

// Body is what a sender posts for n: its template rendered, or else its
// payload as JSON ("null" when it has none), with the content type. s may be
// nil when no templates are loaded; a notification that names a template
// is then an error.
func (s *Set) Body(n *notify.Notification) (body []byte, contentType string, err error) {
	if n.Template == "" {
		if len(n.Payload) == 0 {
			return []byte("null"), ContentTypeJSON, nil
		}
		return n.Payload, ContentTypeJSON, nil
	}
	if s == nil {
		return nil, "", fmt.Errorf("template %q named, but no templates are loaded", n.Template)
	}
	body, err = s.Render(n.Template, n)
	if err != nil {
		return nil, "", err
	}
	return body, ContentType(n.Template), nil
}

// dataOf is what a template sees of n; see the package doc.
func dataOf(n *notify.Notification) (map[string]any, error) {
	var payload any
	if len(n.Payload) > 0 {
		dec := json.NewDecoder(bytes.NewReader(n.Payload))
		dec.UseNumber()
		if err := dec.Decode(&payload); err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
	}
	headers := n.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	return map[string]any{
		"id":       n.ID,
		"topic":    n.Topic,
		"channel":  n.Channel,
		"target":   n.Target,
		"policy":   n.Policy,
		"template": n.Template,
		"attempt":  n.Attempts,
		"headers":  headers,
		"payload":  payload,
		"send_at":  n.SendAt,
	}, nil
}
