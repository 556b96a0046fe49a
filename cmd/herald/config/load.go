package config

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
)

// envPrefix starts every environment variable Herald reads.
const envPrefix = "HERALD_"

// Source says where Load reads.
type Source struct {
	// File is the config file.
	File string
	// FileRequired makes a missing File an error: it was named on the
	// command line rather than taken by default.
	FileRequired bool
	// Flags are the command's flags. Those set on the command line and
	// bound to a key with BindFlag override the file and the environment.
	Flags *pflag.FlagSet
}

// Load builds the configuration from its defaults, then the file,
// then HERALD_* environment variables, then flags, each overriding the one
// before, and validates it. An unknown key or a bad value is a
// *notify.FieldError naming the key's path (or, for an unknown environment
// variable, the variable); a bad value the environment or a flag set says
// which, since the file an operator looks at holds another.
func Load(src *Source) (*Config, error) {
	// setBy names the environment variable or flag that set a key.
	setBy := map[string]string{}
	cfg, err := load(src, setBy)
	var fe *notify.FieldError
	if errors.As(err, &fe) {
		if by := setBy[indexRe.ReplaceAllString(fe.Field, "")]; by != "" {
			return nil, notify.Errorf(fe.Field, "%s (set by %s)", fe.Message, by)
		}
	}
	return cfg, err
}

// load is Load, recording in setBy what the environment and flags set.
func load(src *Source, setBy map[string]string) (*Config, error) {
	k := koanf.New(".")
	if err := k.Load(file.Provider(src.File), yaml.Parser()); err != nil {
		if src.FileRequired || !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", src.File, err)
		}
	}

	keys := configKeys()
	var unknown []string
	if err := k.Load(env.Provider(".", env.Opt{
		Prefix: envPrefix,
		TransformFunc: func(name, value string) (string, any) {
			key, ok := keys.byEnv[name]
			if !ok {
				unknown = append(unknown, name)
				return "", nil
			}
			setBy[key] = name
			if keys.lists[key] {
				return key, splitList(value)
			}
			return key, value
		},
	}), nil); err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, notify.Errorf(unknown[0], "is not a config key: want %s followed by a key path, such as %sREDIS_ADDRS", envPrefix, envPrefix)
	}

	var flagErr error
	src.Flags.Visit(func(f *pflag.Flag) {
		key := flagKey(f)
		if key == "" || flagErr != nil {
			return
		}
		var value any = f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			value = sv.GetSlice()
		}
		setBy[key] = "--" + f.Name
		flagErr = k.Set(key, value)
	})
	if flagErr != nil {
		return nil, fmt.Errorf("flags: %w", flagErr)
	}

	cfg := Default()
	raw := k.Raw()
	// -1 is not a duration to the decoder, which refuses negative ones.
	forever := map[string]*time.Duration{"retention": &cfg.Retention, "dead_retention": &cfg.DeadRetention}
	for key := range forever {
		if fmt.Sprint(raw[key]) == "-1" {
			delete(raw, key)
		} else {
			delete(forever, key)
		}
	}
	if err := policy.Decode("", raw, &cfg); err != nil {
		return nil, hideSecrets(err)
	}
	for _, d := range forever {
		*d = RetentionForever
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// hideSecrets rewords the error of a key that holds a secret, or holds keys
// that do, so that a value of the wrong type (a password written as a
// list) is never shown.
func hideSecrets(err error) error {
	var fe *notify.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	key := indexRe.ReplaceAllString(fe.Field, "")
	for secret := range configKeys().secrets {
		if secret == key || strings.HasPrefix(secret, key+".") {
			return notify.Errorf(fe.Field, "has a value of the wrong type, not shown since it holds a secret")
		}
	}
	return err
}

// indexRe matches the list indexes of a key path, as in api.tokens[2].
var indexRe = regexp.MustCompile(`\[\d+\]`)

// splitList reads a list from one environment variable: comma-separated,
// spaces around items ignored, empty or "[]" meaning an empty list. "[]" is
// how the file and the documentation write the empty redis.addrs that runs
// the embedded Redis, so an operator copying it must not get the list ["[]"].
func splitList(s string) []string {
	out := []string{}
	if strings.TrimSpace(s) == "[]" {
		return out
	}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// keySet is every key path of Config, with its environment variable.
type keySet struct {
	// byEnv maps HERALD_REDIS_MASTER_NAME to redis.master_name. Matching
	// the whole name against the known keys is what tells the underscore
	// inside master_name from the one between redis and master_name.
	byEnv map[string]string
	// lists holds the keys whose values are lists.
	lists map[string]bool
	// secrets holds the keys of Secret values, or lists of them.
	secrets map[string]bool
}

// configKeys lists Config's keys from its koanf tags, so that a key added
// to Config is at once settable from the environment and by a flag.
var configKeys = sync.OnceValue(func() keySet {
	ks := keySet{byEnv: map[string]string{}, lists: map[string]bool{}, secrets: map[string]bool{}}
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for f := range t.Fields() {
			key := prefix + f.Tag.Get("koanf")
			if f.Type.Kind() == reflect.Struct {
				walk(key+".", f.Type)
				continue
			}
			ks.byEnv[envName(key)] = key
			ks.lists[key] = f.Type.Kind() == reflect.Slice
			if f.Type == reflect.TypeFor[Secret]() || f.Type == reflect.TypeFor[[]Secret]() {
				ks.secrets[key] = true
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	return ks
})

// envName is the environment variable of a key path: redis.master_name is
// HERALD_REDIS_MASTER_NAME.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// flagAnnotation marks a flag with the config key it sets.
const flagAnnotation = "herald_config_key"

// BindFlag makes the flag name of fs, when given on the command line,
// override the config key: --log-level sets log.level. It panics on a key
// Config does not have, a programming error.
func BindFlag(fs *pflag.FlagSet, name, key string) {
	if configKeys().byEnv[envName(key)] != key {
		panic(fmt.Sprintf("BindFlag: %q is not a config key", key))
	}
	if err := fs.SetAnnotation(name, flagAnnotation, []string{key}); err != nil {
		panic(fmt.Sprintf("BindFlag: %v", err))
	}
}

// flagKey is the config key f was bound to, or "".
func flagKey(f *pflag.Flag) string {
	if v := f.Annotations[flagAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}
