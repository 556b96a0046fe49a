package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// readBody reads a request body of at most limit bytes; a larger one is an
// *http.MaxBytesError (413).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	return body, bodyError(err)
}

// bodyError is the error of reading a body: an *http.MaxBytesError as it
// is, anything else a *notify.FieldError of the body as a whole.
func bodyError(err error) error {
	if mbe := (*http.MaxBytesError)(nil); err == nil || errors.As(err, &mbe) {
		return err
	}
	return notify.Errorf("", "could not read the body: %v", err)
}

// errLargeBodies refuses a large body while MaxLargeBodies others are read.
var errLargeBodies = errors.New("too many large bodies at once")

// readLargeBody reads a body of at most limit bytes, like readBody, but
// one larger than MaxBody waits (up to Timeout) for a turn among
// MaxLargeBodies: read, decoded and held at once, bodies of 16 MiB would
// cost hundreds of MiB. Call release when done with what was decoded.
func (s *Server) readLargeBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	head, err := io.ReadAll(io.LimitReader(rd, s.cfg.MaxBody+1))
	if err != nil || int64(len(head)) <= s.cfg.MaxBody {
		return head, func() {}, bodyError(err)
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	select {
	case s.large <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, errLargeBodies
	}
	release = func() { <-s.large }
	rest, err := io.ReadAll(rd)
	if err != nil {
		release()
		return nil, nil, bodyError(err)
	}
	return append(head, rest...), release, nil
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
// (a bad duration or time), a field given twice and trailing data are
// *notify.FieldError naming the field the way the API documents it:
// "topic", "backoff[2]", "headers.X-Sig"; an error of the body as a whole
// has no field.
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
	if path, ok := duplicate(trimmed, reflect.TypeOf(v).Elem()); ok {
		return notify.Errorf(strings.TrimPrefix(path, "."), "is given more than once")
	}
	return nil
}

// duplicate finds the first member that the valid JSON value data gives
// twice where it decodes into typ: a field of a struct (under any spelling
// the decoder takes for it: "id", "ID", "\u0069d") or a key of a map,
// however deep, as ".secrets[0].value" or ".headers.X-Sig". The decoder
// would keep the last silently, and the caller may well have meant the
// first. Values the API keeps as given (a payload) are not looked into.
// It allocates nothing for a body whose names have no escapes and whose
// maps have at most 16 keys, save the path of the duplicate it finds.
func duplicate(data []byte, typ reflect.Type) (path string, found bool) {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if len(data) == 0 || isLeaf(typ) {
		return "", false
	}
	switch {
	case data[0] == '{' && typ.Kind() == reflect.Struct:
		fields := jsonFieldsOf(typ)
		var small [64]bool // by index in fields.list
		var seen []bool
		if len(fields.list) <= len(small) {
			seen = small[:len(fields.list)]
		} else {
			seen = make([]bool, len(fields.list))
		}
		eachRawMember(data, func(key, value []byte) bool {
			i, ok := fields.lookup(key)
			if !ok {
				return true // unknown: the decoder has said so, or ignored it
			}
			f := &fields.list[i]
			if seen[i] {
				path, found = "."+f.name, true
				return false
			}
			seen[i] = true
			if f.leaf {
				return true
			}
			if sub, ok := duplicate(value, f.typ); ok {
				path, found = "."+f.name+sub, true
			}
			return !found
		})
	case data[0] == '{' && typ.Kind() == reflect.Map && typ.Key().Kind() == reflect.String:
		elem, leaf := typ.Elem(), isLeaf(typ.Elem())
		// The first keys are compared one by one; a map with more goes
		// into a set, so that many keys cost no more than a map does.
		var small [16][]byte
		keys := small[:0]
		var set map[string]struct{}
		eachRawMember(data, func(key, value []byte) bool {
			twice := false
			if set != nil {
				_, twice = set[string(key)]
				set[string(key)] = struct{}{}
			} else {
				for _, k := range keys {
					if twice = bytes.Equal(k, key); twice {
						break
					}
				}
				if keys = append(keys, key); len(keys) > len(small) {
					set = make(map[string]struct{}, 2*len(keys))
					for _, k := range keys {
						set[string(k)] = struct{}{}
					}
				}
			}
			if twice {
				path, found = "."+string(key), true
				return false
			}
			if leaf {
				return true
			}
			if sub, ok := duplicate(value, elem); ok {
				path, found = "."+string(key)+sub, true
			}
			return !found
		})
	case data[0] == '[' && typ.Kind() == reflect.Slice && !isLeaf(typ.Elem()):
		i := 0
		eachRawElement(data, func(value []byte) bool {
			if sub, ok := duplicate(value, typ.Elem()); ok {
				path, found = fmt.Sprintf("[%d]", i)+sub, true
			}
			i++
			return !found
		})
	}
	return path, found
}

// jsonFields are the fields of a struct type that encoding/json decodes
// into, with what lookup needs to find one from a member's name.
type jsonFields struct {
	list   []jsonField
	exact  map[string]int // index in list by name
	folded map[string]int // by foldName of the name: the first field of each
}

type jsonField struct {
	name string // as in the JSON: the tag's, or the Go name
	typ  reflect.Type
	leaf bool // isLeaf(typ)
}

// jsonFieldsCache holds a *jsonFields per reflect.Type of a struct.
var jsonFieldsCache sync.Map

// jsonFieldsOf returns the fields of struct typ, worked out once per type.
func jsonFieldsOf(typ reflect.Type) *jsonFields {
	if fs, ok := jsonFieldsCache.Load(typ); ok {
		return fs.(*jsonFields)
	}
	fs := &jsonFields{exact: map[string]int{}, folded: map[string]int{}}
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		name = cmp.Or(name, f.Name)
		if _, ok := fs.exact[name]; !ok {
			fs.exact[name] = len(fs.list)
		}
		folded := string(foldName([]byte(name)))
		if _, ok := fs.folded[folded]; !ok {
			fs.folded[folded] = len(fs.list)
		}
		fs.list = append(fs.list, jsonField{name: name, typ: f.Type, leaf: isLeaf(f.Type)})
	}
	actual, _ := jsonFieldsCache.LoadOrStore(typ, fs)
	return actual.(*jsonFields)
}

// lookup returns the index in list of the field that encoding/json fills
// from the member named key: the one of that exact name, else the first
// equal to it under the decoder's case folding.
func (fs *jsonFields) lookup(key []byte) (int, bool) {
	if i, ok := fs.exact[string(key)]; ok {
		return i, true
	}
	i, ok := fs.folded[string(foldName(key))]
	return i, ok
}

// foldName folds a name as encoding/json does to match a member to a
// field case-insensitively: two names fold alike when bytes.EqualFold
// says they are equal.
func foldName(in []byte) []byte {
	var arr [32]byte // most names fit: no allocation
	out := arr[:0]
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, unicode.ToUpper(unicode.ToLower(r)))
		i += n
	}
	return out
}

// eachRawMember calls fn with each member of the valid JSON object data,
// its key unescaped and its value as it is in data, until fn returns false.
// A key without escapes, in valid UTF-8, is a slice of data.
func eachRawMember(data []byte, fn func(key, value []byte) bool) {
	for i := skipSpace(data, 1); i < len(data) && data[i] == '"'; {
		end := stringEnd(data, i)
		key := data[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			// As the decoder reads it: escapes undone, bad UTF-8 replaced.
			var s string
			_ = json.Unmarshal(data[i:end], &s)
			key = []byte(s)
		}
		i = skipSpace(data, skipSpace(data, end)+1) // past the colon
		end = valueEnd(data, i)
		if !fn(key, data[i:end]) {
			return
		}
		i = skipSpace(data, skipSpace(data, end)+1) // past a comma or the end
	}
}

// eachRawElement calls fn with each element of the valid JSON array data
// until fn returns false.
func eachRawElement(data []byte, fn func(value []byte) bool) {
	for i := skipSpace(data, 1); i < len(data) && data[i] != ']'; {
		end := valueEnd(data, i)
		if !fn(data[i:end]) {
			return
		}
		i = skipSpace(data, skipSpace(data, end)+1)
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string starting at i.
func stringEnd(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// valueEnd returns the index just past the valid JSON value starting at i.
func valueEnd(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			i = stringEnd(data, i) - 1
		case c == '{' || c == '[':
			depth++
			continue
		case c == '}' || c == ']':
			depth--
		case depth == 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r':
			// A number, true, false or null ends at a delimiter.
			for i < len(data) && !bytes.ContainsRune([]byte(" \t\n\r,]}"), rune(data[i])) {
				i++
			}
			return i
		}
		if depth == 0 {
			return i + 1
		}
	}
	return i
}

// locate finds where the JSON object data fails to decode into a value of
// typ: the member, and within it the array element or object member, as
// "backoff[2]" or "headers.X-Sig". The standard decoder names neither (and
// names no field at all for errors of a custom unmarshaler, such as
// notify.Duration's), so the API finds the field itself, and only when
// there is an error to explain. It walks data once, decoding each value
// into its field's type as it goes, so a large array costs one more
// decode, not one per element.
func locate(data []byte, typ reflect.Type) (path, msg string, ok bool) {
	path, err := locateIn(data, typ)
	if err == nil {
		return "", "", false
	}
	return path, describe(err), true
}

// locateIn returns the path below data, and the error, of the first value
// that does not decode into typ; a nil error when none fails.
func locateIn(data json.RawMessage, typ reflect.Type) (string, error) {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")):
	case typ.Kind() == reflect.Struct && trimmed[0] == '{' && !reflect.PointerTo(typ).Implements(unmarshalerType):
		return eachMember(data, func(key string, value json.RawMessage) (string, error) {
			fields := jsonFieldsOf(typ)
			i, ok := fields.lookup([]byte(key))
			if !ok {
				return key, errors.New("json: unknown field")
			}
			sub, err := locateIn(value, fields.list[i].typ)
			return key + sub, err
		})
	case typ.Kind() == reflect.Map && typ.Key().Kind() == reflect.String && trimmed[0] == '{':
		return eachMember(data, func(key string, value json.RawMessage) (string, error) {
			sub, err := locateIn(value, typ.Elem())
			return "." + key + sub, err
		})
	case typ.Kind() == reflect.Slice && typ != rawMessageType && trimmed[0] == '[':
		dec := json.NewDecoder(bytes.NewReader(data))
		_, _ = dec.Token()
		leaf := isLeaf(typ.Elem())
		for i := 0; dec.More(); i++ {
			var err error
			sub := ""
			if leaf {
				// Straight from the array: no copy, no decoder per element.
				err = dec.Decode(reflect.New(typ.Elem()).Interface())
			} else {
				var value json.RawMessage
				if err = dec.Decode(&value); err == nil {
					sub, err = locateIn(value, typ.Elem())
				}
			}
			if err != nil {
				return fmt.Sprintf("[%d]", i) + sub, err
			}
		}
		return "", nil
	}
	if isLeaf(typ) {
		return "", json.Unmarshal(data, reflect.New(typ).Interface())
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return "", dec.Decode(reflect.New(typ).Interface())
}

// isLeaf reports whether values of typ hold no fields or elements that
// locateIn would look into.
func isLeaf(typ reflect.Type) bool {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch typ.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array, reflect.Interface:
		return reflect.PointerTo(typ).Implements(unmarshalerType)
	}
	return true
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// eachMember calls fn with each member of the JSON object data, in order,
// until one fails, and returns what that one returned.
func eachMember(data []byte, fn func(key string, value json.RawMessage) (string, error)) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	_, _ = dec.Token()
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", err
		}
		key, _ := t.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return "", err
		}
		if path, err := fn(key, value); err != nil {
			return path, err
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
