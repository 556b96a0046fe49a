package notify

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr string
	}{
		{name: "GoDuration", in: "2m", want: 2 * time.Minute},
		{name: "Compound", in: "1h30m", want: 90 * time.Minute},
		{name: "Zero", in: "0s", want: 0},
		{name: "IntegerSeconds", in: "30", want: 30 * time.Second},
		{name: "FractionalSeconds", in: "1.5", want: 1500 * time.Millisecond},
		// Read as decimals, not through a float64, whose product with 1e9
		// falls a nanosecond short of these.
		{name: "MillisecondsExact", in: "1.001", want: 1001 * time.Millisecond},
		{name: "MillisecondsExactLarge", in: "67356.480", want: 67356480 * time.Millisecond},
		{name: "NanosecondsExact", in: "266.406545276", want: 266406545276 * time.Nanosecond},
		{name: "ExponentSeconds", in: "1.5e2", want: 150 * time.Second},
		{name: "Spaces", in: " 10m ", want: 10 * time.Minute},
		{name: "NegativeZero", in: "-0", want: 0},
		{name: "HundredYears", in: "876000h", want: maxDuration},
		{name: "Empty", in: "", wantErr: "empty duration"},
		{name: "Garbage", in: "soon", wantErr: `bad duration "soon"`},
		{name: "NegativeGo", in: "-1s", wantErr: "is negative"},
		{name: "NegativeSeconds", in: "-3", wantErr: "is negative"},
		{name: "NaN", in: "NaN", wantErr: "out of range"},
		{name: "Inf", in: "+Inf", wantErr: "out of range"},
		{name: "HugeSeconds", in: "1e10", wantErr: "out of range"},
		{name: "HugeGoDuration", in: "2562047h", wantErr: "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := ParseDuration(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestDurationCheck: a duration built in Go is refused where its string
// form would be, in the same words, naming the field.
func TestDurationCheck(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, time.Nanosecond, 2 * time.Minute, maxDuration, maxDuration + 1, -time.Nanosecond, -time.Hour, 1<<63 - 1, -1 << 63} {
		_, parseErr := ParseDuration(Duration(d).String())
		err := Duration(d).Check("delay")
		if parseErr == nil {
			require.NoError(t, err, d)
		} else {
			require.EqualError(t, err, "delay: "+parseErr.Error(), d)
		}
	}
}

// TestDurationString: a duration is written as policies write it, without
// Go's zero units, and read back as it was.
func TestDurationString(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                               "0s",
		1500 * time.Millisecond:         "1.5s",
		2 * time.Minute:                 "2m",
		90 * time.Second:                "1m30s",
		time.Hour:                       "1h",
		24*time.Hour + 22*time.Minute:   "24h22m",
		time.Hour + 30*time.Second:      "1h0m30s",
		29*time.Minute + 55*time.Second: "29m55s",
		-time.Hour:                      "-1h",
		maxDuration:                     "876000h",
	} {
		require.Equal(t, want, Duration(d).String(), d.String())
		back, err := ParseDuration(want)
		if d < 0 {
			require.Error(t, err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, d, back)
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()

	var got struct{ A, B Duration }
	require.NoError(t, json.Unmarshal([]byte(`{"A": "2m", "B": 1.5}`), &got))
	require.Equal(t, Duration(2*time.Minute), got.A)
	require.Equal(t, Duration(1500*time.Millisecond), got.B)

	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"A": "2m", "B": "1.5s"}`, string(b))

	// A backoff written in seconds with milliseconds comes back as written,
	// not a nanosecond short ("1.000999999s").
	require.NoError(t, json.Unmarshal([]byte(`{"A": "1.001", "B": 1.005}`), &got))
	b, err = json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"A": "1.001s", "B": "1.005s"}`, string(b))
}

// FuzzParseDuration checks that whatever ParseDuration accepts is within
// [0, maxDuration] and survives a round trip through its string form, which
// is how backoff arrays are stored and returned by the API.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0s", "2m", "1h30m", "30", "1.5", "-1s", "NaN", "+Inf", "1e10", "2562047h", "15h", " 10m ", "1_0", ".5", "0x1p-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 || d > maxDuration {
			t.Fatalf("ParseDuration(%q) = %v, outside [0, %v]", s, d, maxDuration)
		}
		again, err := ParseDuration(Duration(d).String())
		if err != nil || again != d {
			t.Fatalf("round trip of %q: %v -> %q -> %v, %v", s, d, Duration(d).String(), again, err)
		}
	})
}
