package policy

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
)

// Load reads a policies file (see configs/policies.yaml) into a validated
// Set. A bad file yields an error that wraps a *notify.FieldError naming
// the offending key, such as "policies.merchant-notify.backoff[2]", and
// starts with the file's name.
// An empty file (or one of comments alone, or of keys with nothing under
// them) is refused: valid YAML, and what a file caught half-written
// (truncated after its first line, not yet filled) reads as, which would
// take every topic away.
func Load(path string) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if m, err := yaml.Parser().Unmarshal(b); err == nil && setsNothing(m) {
		return nil, fmt.Errorf("%s: the file is empty: write \"policies: {}\" for the default policy alone", path)
	}
	s, err := load(rawbytes.Provider(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// setsNothing reports whether a parsed file has no key with a value.
func setsNothing(m map[string]any) bool {
	for _, v := range m {
		if v != nil {
			return false
		}
	}
	return true
}

func load(p koanf.Provider) (*Set, error) {
	k := koanf.New(".")
	if err := k.Load(p, yaml.Parser()); err != nil {
		return nil, err
	}
	// Each entry is decoded on its own, from the raw map rather than by
	// koanf path, because policy and topic names may contain the path
	// delimiter ("order.notify" is a valid topic).
	var file struct {
		Policies  map[string]any `koanf:"policies"`
		Topics    map[string]any `koanf:"topics"`
		Endpoints map[string]any `koanf:"endpoints"`
	}
	if err := Decode("", k.Raw(), &file); err != nil {
		return nil, err
	}
	policies, err := decodeEach[Policy]("policies", file.Policies)
	if err != nil {
		return nil, err
	}
	topics, err := decodeEach[Topic]("topics", file.Topics)
	if err != nil {
		return nil, err
	}
	endpoints, err := decodeEach[endpoint.Endpoint]("endpoints", file.Endpoints)
	if err != nil {
		return nil, err
	}
	s, err := NewSet(policies, topics)
	if err != nil {
		return nil, err
	}
	return s.WithEndpoints(endpoints)
}

// decodeEach decodes every entry of a section, in name order so that the
// first error reported does not depend on map iteration.
func decodeEach[T any](section string, raw map[string]any) (map[string]T, error) {
	out := make(map[string]T, len(raw))
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		var v T
		if err := Decode(section+"."+name, raw[name], &v); err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

// Decode decodes in, the maps, slices and scalars that koanf and its YAML
// parser produce, into out by out's koanf struct tags. It is how Herald
// reads every file and environment it is configured from, so they all
// behave alike:
//
//   - a time.Duration or notify.Duration takes "2m", "0s" or a number of
//     seconds (30, 1.5, "30"), as notify.ParseDuration;
//   - a time.Time takes RFC 3339 ("2026-12-01T00:00:00Z");
//   - scalars convert where YAML or the environment cannot say the type
//     ("16" into an int, 429 into a string, true into "true"); an integer
//     is read in decimal ("010" is 10) and takes no fraction (2.5 is an
//     error);
//   - a key that out has no field for is an error, so a misspelt key is
//     not silently ignored;
//   - every error is a *notify.FieldError whose field is the key's path,
//     below path when path is not empty: "policies.default.backoff[2]".
func Decode(path string, in, out any) error {
	var md mapstructure.Metadata
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(durationHook, wholeNumberHook, boolTextHook,
			mapstructure.StringToTimeHookFunc(time.RFC3339)),
		WeaklyTypedInput: true,
		Metadata:         &md,
		TagName:          "koanf",
		Result:           out,
	})
	if err != nil {
		panic(fmt.Sprintf("policy.Decode: %v", err)) // out is not a pointer: a programming error
	}
	if err := d.Decode(in); err != nil {
		var de *mapstructure.DecodeError
		if !errors.As(err, &de) {
			return notify.Errorf(path, "%v", err)
		}
		return notify.Errorf(joinPath(path, de.Name()), "%s", describe(de.Unwrap()))
	}
	if len(md.Unused) > 0 {
		slices.Sort(md.Unused)
		return notify.Errorf(joinPath(path, md.Unused[0]), "unknown key")
	}
	return nil
}

// describe rewords mapstructure's type errors, which speak of Go types,
// in the YAML terms an operator wrote. It names the kind of value found,
// never the value: a secret written in the wrong shape (a list where a
// string belongs) would otherwise be printed by herald policy check and
// logged at start-up and on every reload.
func describe(err error) string {
	var (
		ute *mapstructure.UnconvertibleTypeError
		pe  *mapstructure.ParseError
		tpe *time.ParseError
	)
	switch {
	case errors.As(err, &ute):
		return fmt.Sprintf("want %s, not %s", yamlKind(ute.Expected.Type()), valueKind(ute.Value))
	case errors.As(err, &pe):
		return fmt.Sprintf("want %s, not %s that does not read as one", yamlKind(pe.Expected.Type()), valueKind(pe.Value))
	case errors.As(err, &tpe):
		// time's own message quotes Go's reference layout, which reads
		// as a time the operator did not write.
		return "want an RFC 3339 time such as 2026-12-01T00:00:00Z"
	}
	// mapstructure says this of a scalar or a list where a map belongs
	// (a secret written as a plain string) in Go's terms, and has no
	// type for it.
	if kind, ok := strings.CutPrefix(err.Error(), "expected a map or struct, got "); ok {
		if k, err := strconv.Unquote(kind); err == nil {
			kind = kindWord(k)
		}
		return "want a map, not " + kind
	}
	return err.Error()
}

// kindWord is yamlKind for the name of a reflect.Kind.
func kindWord(kind string) string {
	for k := reflect.Invalid; k <= reflect.UnsafePointer; k++ {
		if w := yamlKindOf(k); w != "" && k.String() == kind {
			return w
		}
	}
	return kind
}

// valueKind is yamlKind of a decoded value's type; YAML's null has none.
func valueKind(v any) string {
	if v == nil {
		return "null"
	}
	return yamlKind(reflect.TypeOf(v))
}

func yamlKind(t reflect.Type) string {
	if k := yamlKindOf(t.Kind()); k != "" {
		return k
	}
	return t.String()
}

// yamlKindOf names a kind of value as YAML speaks of it; "" for one it
// has no word for.
func yamlKindOf(kind reflect.Kind) string {
	switch kind {
	case reflect.Map, reflect.Struct:
		return "a map"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return ""
}

// joinPath appends a key path as mapstructure names it ("ttr",
// "backoff[2]", "" for the value itself) to a prefix.
func joinPath(prefix, name string) string {
	switch {
	case name == "":
		return prefix
	case prefix == "":
		return name
	case strings.HasPrefix(name, "["):
		return prefix + name
	}
	return prefix + "." + name
}

var (
	durationType       = reflect.TypeFor[time.Duration]()
	notifyDurationType = reflect.TypeFor[notify.Duration]()
)

// durationHook reads durations as notify.ParseDuration does. Without it, a
// YAML number such as 30 would become 30 nanoseconds, since both duration
// types are integers underneath.
func durationHook(_, to reflect.Type, data any) (any, error) {
	if to != durationType && to != notifyDurationType {
		return data, nil
	}
	var s string
	switch v := data.(type) {
	case string:
		s = v
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		s = fmt.Sprint(v)
	default:
		return nil, fmt.Errorf("want a duration such as 2m or a number of seconds, not %s", valueKind(data))
	}
	d, err := notify.ParseDuration(s)
	if err != nil {
		return nil, err
	}
	return reflect.ValueOf(d).Convert(to).Interface(), nil
}

// wholeNumberHook reads an integer field strictly: mapstructure's weak
// typing would read "010" as octal 8 (HERALD_REDIS_DB=010 selected db 8)
// and cut 2.5 to 2.
func wholeNumberHook(_, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	switch v := data.(type) {
	case string:
		v = strings.TrimSpace(v)
		if v == "" {
			return data, nil // an empty variable is 0, as it always was
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, errors.New("want a whole number, not a string that does not read as one")
		}
		return n, nil
	case float32, float64:
		f := reflect.ValueOf(v).Float()
		if f != math.Trunc(f) {
			return nil, errors.New("want a whole number, not one with a fraction")
		}
	}
	return data, nil
}

// boolTextHook writes a boolean given for a string as JSON and YAML spell
// it: mapstructure's weak typing would write true as "1", and a poll whose
// done values are [true] would never match the answer's true.
func boolTextHook(_, to reflect.Type, data any) (any, error) {
	if b, ok := data.(bool); ok && to.Kind() == reflect.String {
		return strconv.FormatBool(b), nil
	}
	return data, nil
}
