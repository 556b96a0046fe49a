package notify

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration that reads "2m", "0s", "1h30m" or a number of
// seconds ("30", 30, 1.5), and writes itself as a Go duration string
// without zero units ("2m", "1h30m"). Backoff
// arrays, delays and ttrs use it in JSON and YAML alike.
type Duration time.Duration

// ParseDuration reads a Go duration ("2m", "0s") or a plain number of seconds
// ("30", "1.5"). Negative values are refused: no wait in Herald runs
// backwards. So are values over 100 years, in either form, so that a parsed
// duration added to a timestamp cannot overflow.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		// NaN compares false with everything, so it is refused by name;
		// converting it to an integer is not portable.
		if math.IsNaN(secs) || math.Abs(secs) > float64(maxDuration/time.Second) {
			return 0, fmt.Errorf("duration %q is out of range", s)
		}
		// A decimal is read as one, exactly: through a float64, 1.001
		// times 1e9 falls short and truncates to 1.000999999s, which a
		// record then shows and a schedule keeps. An exponent (1.5e2),
		// which time.ParseDuration does not read, takes the float.
		if exact, err := time.ParseDuration(s + "s"); err == nil {
			d = exact
		} else {
			d = time.Duration(secs * float64(time.Second))
		}
	} else {
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("bad duration %q: want a Go duration such as 2m or a number of seconds", s)
		}
	}
	if err := checkRange(d, s); err != nil {
		return 0, err
	}
	return d, nil
}

// Check refuses d where ParseDuration would refuse its string form
// (negative, or over 100 years), in the same words, as an error for field:
// for durations built in Go, which no decoder has read.
func (d Duration) Check(field string) error {
	if d >= 0 && time.Duration(d) <= maxDuration {
		return nil // without the string, which costs an allocation
	}
	return Errorf(field, "%v", checkRange(time.Duration(d), d.String()))
}

// CeilMS returns d rounded up to the millisecond, as the store keeps
// durations. d must be one Check accepts, so that the rounding cannot
// overflow.
func (d Duration) CeilMS() Duration {
	const ms = Duration(time.Millisecond)
	return (d + ms - 1) / ms * ms
}

// checkRange refuses a duration outside what ParseDuration takes; s is how
// it was written.
func checkRange(d time.Duration, s string) error {
	if d < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	if d > maxDuration {
		return fmt.Errorf("duration %q is out of range", s)
	}
	return nil
}

// maxDuration bounds parsed durations well inside int64 nanoseconds, so that
// adding one to a Unix time in milliseconds cannot overflow.
const maxDuration = 100 * 365 * 24 * time.Hour

// String returns the Go duration form without its zero units, as
// durations are written in policies: "2m" for 2m0s, "1h" for 1h0m0s,
// "24h22m" for 24h22m0s; ParseDuration reads it back.
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, accepting what
// ParseDuration accepts.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON accepts a JSON string (as UnmarshalText) or a JSON number of
// seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	} else {
		s = string(b)
	}
	return d.UnmarshalText([]byte(s))
}
