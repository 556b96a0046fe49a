package templates

import (
	"bytes"
	"encoding/json"
	"fmt"
	"text/template"
	"time"
)

// funcs returns the functions templates may call; see the package doc.
func (s *Set) funcs() template.FuncMap {
	return template.FuncMap{
		"json": toJSON,
		"now":  func() time.Time { return s.nowFunc() },
		"date": formatDate,
	}
}

// toJSON encodes v as JSON without escaping <, > and &, which JSON does not
// need escaped and SMS or text readers would see as \u003c.
func toJSON(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// formatDate formats a time.Time, or an RFC 3339 string as payloads carry
// times, in layout and in the time's own zone.
func formatDate(layout string, v any) (string, error) {
	switch t := v.(type) {
	case time.Time:
		return t.Format(layout), nil
	case string:
		parsed, err := time.Parse(time.RFC3339, t)
		if err != nil {
			return "", fmt.Errorf("date: %q is not an RFC 3339 time", t)
		}
		return parsed.Format(layout), nil
	default:
		return "", fmt.Errorf("date: want a time or an RFC 3339 string, not %T", v)
	}
}
