package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// readBody reads a request body of at most limit bytes; a larger one is an
// *http.MaxBytesError (413).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, mbe
		}
		return nil, notify.Errorf("", "could not read the body: %v", err)
	}
	return body, nil
}

// readJSON reads a request body of at most limit bytes and decodes it into
// v (see decodeJSON).
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// decodeJSON decodes the JSON object in data into v, a pointer to a struct.
// Unknown fields, values of the wrong type, values their type refuses
// (a bad duration or time) and trailing data are *notify.FieldError naming
// the field the way the API documents it: "topic", "backoff[2]",
// "headers.X-Sig"; an error of the body as a whole has no field.
func decodeJSON(data []byte, v any) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return notify.Errorf("", "body is empty: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if syn := (*json.SyntaxError)(nil); errors.As(err, &syn) {
		return notify.Errorf("", "invalid JSON at byte %d: %v", syn.Offset, err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return notify.Errorf("", "invalid JSON: it ends too early")
	}
	// The body is one valid JSON value from here on.
	if trimmed[0] != '{' {
		return notify.Errorf("", "body must be a JSON object")
	}
	if err != nil {
		if path, msg, ok := locate(data, reflect.TypeOf(v).Elem()); ok {
			return notify.Errorf(path, "%s", msg)
		}
		return notify.Errorf("", "%s", describe(err))
	}
	if dec.Decode(new(json.RawMessage)) != io.EOF {
		return notify.Errorf("", "unexpected data after the JSON object")
	}
	return nil
}

// locate finds the member of the JSON object data that fails to decode into
// a value of typ, by decoding each member alone, then narrows it to the
// array element or object member below that fails alone. The standard
// decoder names neither (and names no field at all for errors of a custom
// unmarshaler, such as notify.Duration's), so the API finds the field
// itself, and only when there is an error to explain.
func locate(data []byte, typ reflect.Type) (path, msg string, ok bool) {
	members, err := objectMembers(data)
	if err != nil {
		return "", "", false
	}
	for _, m := range members {
		err := decodeMember(typ, m.key, m.value)
		if err == nil {
			continue
		}
		sub, subErr := narrow(typ, m.key, m.value)
		if subErr != nil {
			return m.key + sub, describe(subErr), true
		}
		return m.key, describe(err), true
	}
	return "", "", false
}

type member struct {
	key   string
	value json.RawMessage
}

// objectMembers splits a valid JSON object into its members, in order.
func objectMembers(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, member{key, raw})
	}
	return out, nil
}

// decodeMember decodes the object {key: value} into a new value of typ.
func decodeMember(typ reflect.Type, key string, value json.RawMessage) error {
	obj, err := json.Marshal(map[string]json.RawMessage{key: value})
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.DisallowUnknownFields()
	return dec.Decode(reflect.New(typ).Interface())
}

// narrow finds the first element of an array value ("[2]"), or member of an
// object value (".X-Sig"), that fails to decode alone under key.
func narrow(typ reflect.Type, key string, value json.RawMessage) (string, error) {
	switch bytes.TrimSpace(value)[0] {
	case '[':
		var elems []json.RawMessage
		if json.Unmarshal(value, &elems) != nil {
			return "", nil
		}
		for i, e := range elems {
			one, _ := json.Marshal([]json.RawMessage{e})
			if err := decodeMember(typ, key, one); err != nil {
				return fmt.Sprintf("[%d]", i), err
			}
		}
	case '{':
		members, err := objectMembers(value)
		if err != nil {
			return "", nil
		}
		for _, m := range members {
			one, _ := json.Marshal(map[string]json.RawMessage{m.key: m.value})
			if err := decodeMember(typ, key, one); err != nil {
				return "." + m.key, err
			}
		}
	}
	return "", nil
}

// describe says what is wrong with a value in the API's words rather than
// the decoder's, which name Go types.
func describe(err error) string {
	msg := err.Error()
	if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
		return fmt.Sprintf("must be %s, not %s", jsonKind(te.Type), te.Value)
	}
	if pe := (*time.ParseError)(nil); errors.As(err, &pe) || strings.HasPrefix(msg, "Time.") {
		return "must be an RFC 3339 time such as 2026-01-02T15:04:05Z"
	}
	if strings.HasPrefix(msg, "json: unknown field ") {
		return "is not a known field"
	}
	return strings.TrimPrefix(msg, "json: ")
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	default:
		return "a number"
	}
}

// batchRequest is the body of POST /v1/notifications/batch. Items stay raw
// so that each is decoded alone and a bad one fails only its own result.
type batchRequest struct {
	Notifications []json.RawMessage `json:"notifications"`
}

// decodeBatch decodes a batch body: the envelope's errors fail the whole
// batch; each item's decode error is in errs at its index, with the item's
// fields decoded so far (its id, usually) in reqs.
func decodeBatch(data []byte) (reqs []*notify.Request, errs []error, err error) {
	var b batchRequest
	if err := decodeJSON(data, &b); err != nil {
		return nil, nil, err
	}
	switch {
	case b.Notifications == nil:
		return nil, nil, notify.Errorf("notifications", "is required")
	case len(b.Notifications) > store.MaxBatch:
		return nil, nil, notify.Errorf("notifications", "has %d entries, more than %d", len(b.Notifications), store.MaxBatch)
	}
	reqs = make([]*notify.Request, len(b.Notifications))
	errs = make([]error, len(b.Notifications))
	for i, raw := range b.Notifications {
		reqs[i] = &notify.Request{}
		errs[i] = decodeJSON(raw, reqs[i])
	}
	return reqs, errs, nil
}
