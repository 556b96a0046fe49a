package notify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// validNotification is a webhook notification that passes Validate.
func validNotification() *Notification {
	return &Notification{
		ID:      "n-1",
		Topic:   "order-notify",
		Channel: ChannelWebhook,
		Target:  "https://merchant.example/notify",
		Payload: json.RawMessage(`{"ok":true}`),
		Backoff: []Duration{0, Duration(time.Minute)},
		TTR:     Duration(TTRDefault),
		SendAt:  time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
	}
}

func TestValidateHeaders(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name    string
		headers map[string]string
		field   string // "" when valid
	}{
		{name: "Plain", headers: map[string]string{"X-Merchant": "m-42", "Authorization": "Bearer abc.def"}},
		{name: "TabAndObsText", headers: map[string]string{"X-A": "a\tb caf\xc3\xa9"}},
		{name: "ControlCharacter", headers: map[string]string{"X-A": "a\u0001b"}, field: "headers.X-A"},
		{name: "Delete", headers: map[string]string{"X-A": "a\x7fb"}, field: "headers.X-A"},
		{name: "Escape", headers: map[string]string{"X-A": "\x1b[2J"}, field: "headers.X-A"},
		{name: "NewLine", headers: map[string]string{"X-A": "a\r\nX-Injected: 1"}, field: "headers.X-A"},
		{name: "Nul", headers: map[string]string{"X-A": "a\x00"}, field: "headers.X-A"},
		{name: "NameWithSpace", headers: map[string]string{"X A": "v"}, field: "headers"},
		{name: "NameWithColon", headers: map[string]string{"X-A:": "v"}, field: "headers"},
		{name: "NameWithControl", headers: map[string]string{"X-\x01": "v"}, field: "headers"},
		{name: "EmptyName", headers: map[string]string{"": "v"}, field: "headers"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := validNotification()
			n.Headers = tt.headers
			err := n.Validate(0)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "want a field error, got %v", err)
			require.Equal(t, tt.field, fe.Field)
		})
	}
}

// TestValidateTargetPort enqueues webhooks whose target has a port no
// connection can have (a typo such as :80800): the enqueue is refused,
// naming the target, where it was accepted and every attempt failed with
// "invalid port" as a retried network error until the notification died.
func TestValidateTargetPort(t *testing.T) {
	t.Parallel()

	for target, ok := range map[string]bool{
		"https://merchant.example:443/notify":   true,
		"https://merchant.example:/notify":      true,
		"http://[::1]:65535/notify":             true,
		"https://merchant.example:80800/notify": false,
		"https://merchant.example:0/notify":     false,
		"http://[::1]:70000/notify":             false,
	} {
		n := validNotification()
		n.Target = target
		err := n.Validate(0)
		if ok {
			require.NoError(t, err, target)
			continue
		}
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%s: want a field error, got %v", target, err)
		require.Equal(t, "target", fe.Field, target)
	}
}

func TestValidateBackoffLength(t *testing.T) {
	t.Parallel()

	n := validNotification()
	n.Backoff = make([]Duration, MaxBackoff)
	require.NoError(t, n.Validate(0))

	n.Backoff = make([]Duration, MaxBackoff+1)
	err := n.Validate(0)
	var fe *FieldError
	require.True(t, errors.As(err, &fe), "want a field error, got %v", err)
	require.Equal(t, "backoff", fe.Field)
	require.True(t, strings.Contains(fe.Message, "100"), fe.Message)
}

// goDuration writes itself as Duration did when digests were first taken,
// in Go's form ("2m0s"): the digests of stored notifications keep it.
type goDuration Duration

func (d goDuration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// digestByMarshal is how digests were first computed: json.Marshal of the
// fields that make a notification what it is. ComputeDigest must keep
// giving the same digests, or a second enqueue of a stored notification
// would be a conflict.
func digestByMarshal(n *Notification, schedule string) string {
	var payload bytes.Buffer
	if len(n.Payload) > 0 && json.Compact(&payload, n.Payload) != nil {
		payload.Reset()
		payload.Write(n.Payload)
	}
	var backoff []goDuration
	if n.Backoff != nil {
		backoff = make([]goDuration, len(n.Backoff))
		for i, d := range n.Backoff {
			backoff[i] = goDuration(d)
		}
	}
	content := struct {
		Topic, Channel, Target, Template, Policy string
		Backoff                                  []goDuration
		TTR                                      goDuration
		Headers                                  map[string]string
		Payload                                  string
		Schedule                                 string
		OrderKey                                 string `json:",omitempty"`
		Endpoint                                 string `json:",omitempty"`
	}{n.Topic, n.Channel, n.Target, n.Template, n.Policy, backoff, goDuration(n.TTR), n.Headers, payload.String(), schedule, n.OrderKey, n.Endpoint}
	b, _ := json.Marshal(content)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

func FuzzDigest(f *testing.F) {
	f.Add("order-notify", "https://m.example/n?a=1&b=<2>", `{"a": "x\u2028y", "b": [1, 2]}`, "X-Tag", "v\t1", "delay:30s", "", int64(1500), true)
	f.Add("t", "", "not json \x00\xff\"\\", "", "", "", "key-1", int64(0), false)
	f.Add("t", "\b\f\n\r\u2029é", "", "k", "", "at:2026", "k", int64(-1), true)
	// Whole seconds, which appendDuration writes without time's formatting.
	for _, d := range []time.Duration{time.Second, 59 * time.Second, time.Minute, 90 * time.Second, time.Hour,
		26*time.Hour + 3*time.Minute + 7*time.Second, 100 * 365 * 24 * time.Hour, -time.Minute} {
		f.Add("t", "", "{}", "", "", "now", "", int64(d), true)
	}
	f.Fuzz(func(t *testing.T, topic, target, payload, hk, hv, schedule, orderKey string, d int64, backoff bool) {
		n := &Notification{Topic: topic, Channel: ChannelWebhook, Target: target, Template: target, Policy: hv,
			Payload: json.RawMessage(payload), TTR: Duration(d), OrderKey: orderKey, Endpoint: hk}
		if backoff {
			n.Backoff = []Duration{0, Duration(d), Duration(time.Microsecond)}
			n.Headers = map[string]string{hk: hv, hv: hk, "Z": payload}
		}
		require.Equal(t, digestByMarshal(n, schedule), n.ComputeDigest(schedule))
		// Empty, not nil: [] and {}, not null.
		n.Backoff, n.Headers = []Duration{}, map[string]string{}
		require.Equal(t, digestByMarshal(n, schedule), n.ComputeDigest(schedule))
	})
}

// The names are checked a byte at a time; these are the patterns they
// stand for.
func TestNamesMatchTheirPatterns(t *testing.T) {
	id := regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	topic := regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)
	header := regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
	var inputs []string
	for c := range 256 {
		inputs = append(inputs, string(rune(c)), "a"+string([]byte{byte(c)})+"b")
	}
	for _, l := range []int{0, 1, 63, 64, 65, 127, 128, 129} {
		inputs = append(inputs, strings.Repeat("a", l), strings.Repeat("a", l)+"\n")
	}
	for _, s := range inputs {
		require.Equal(t, id.MatchString(s), ValidID(s), "id %q", s)
		require.Equal(t, topic.MatchString(s), ValidTopic(s), "topic %q", s)
		require.Equal(t, header.MatchString(s), ValidHeaderName(s), "header %q", s)
	}
}

// FuzzAttemptJSON checks that an attempt's JSON, written by hand for
// speed, is what json.Marshal writes.
func FuzzAttemptJSON(f *testing.F) {
	f.Add(0, int64(1764077000123456789), int64(1764077000123999999), "success", 200, "", int64(1))
	f.Add(3, int64(0), int64(-1), "retry", 0, "status 503: <down> & \"out\"\n\u2028\xff", int64(-5))
	f.Add(-1, int64(253402300799999999), int64(1e9), "", 599, "é", int64(1<<62))
	f.Fuzz(func(t *testing.T, n int, started, finished int64, outcome string, status int, msg string, dur int64) {
		a := Attempt{Attempt: n, StartedAt: time.Unix(0, started).UTC(), FinishedAt: time.Unix(0, finished).In(time.FixedZone("x", 3600)),
			Outcome: Outcome(outcome), StatusCode: status, Error: msg, DurationMS: dur}
		want, err := json.Marshal(a)
		require.NoError(t, err)
		require.Equal(t, string(want), string(a.AppendJSON(nil)))
	})
}

// TestCutError: an error kept in the history is at most MaxErrorLen bytes
// of valid UTF-8, cut between runes, and a receiver's answer in another
// encoding (GBK here) keeps its length, its bytes shown as U+FFFD, instead
// of ending at its first byte that is not UTF-8.
func TestCutError(t *testing.T) {
	t.Parallel()
	gbk := "webhook: status 500: \xb7\xfe\xce\xf1\xc6\xf7\xb4\xed\xce\xf3 " + strings.Repeat("x", 2000)
	for _, tc := range []struct {
		name, in string
		wantLen  int
	}{
		{"Short", "status 500", 10},
		{"ShortNotUTF8", "status 500: \xb7\xfe", len("status 500: \uFFFD")},
		{"LongCutBetweenRunes", strings.Repeat("x", MaxErrorLen-1) + "é" + strings.Repeat("x", 10), MaxErrorLen - 1},
		{"LongNotUTF8", gbk, MaxErrorLen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CutError(tc.in)
			require.True(t, utf8.ValidString(got))
			require.Len(t, got, tc.wantLen)
		})
	}
	require.True(t, strings.HasPrefix(CutError(gbk), "webhook: status 500: \uFFFD x"))
}

func TestRedactedURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://merchant.example/notify?a=b":       "https://merchant.example/notify?a=b",
		"https://shop:s3cr3t@merchant.example/n":    "https://xxxxx@merchant.example/n",
		"https://sk_live_token:@merchant.example/n": "https://xxxxx@merchant.example/n",
		"https://s3cr3t-token@merchant.example/n":   "https://xxxxx@merchant.example/n",
		"https://merchant.example/n?email=a@b.test": "https://merchant.example/n?email=a@b.test",
		"+14155550100": "+14155550100",
		// Receivers' tokens travel in the query as often as in the user's
		// place: the values of parameters named for credentials are hidden,
		// the others (an order number) kept, in their order.
		"https://m.example/n?order=42&access_token=s3cr3t":      "https://m.example/n?order=42&access_token=xxxxx",
		"https://m.example/n?sig=s3cr3t&sv=2024-01-01":          "https://m.example/n?sig=xxxxx&sv=2024-01-01",
		"https://m.example/n?sign=s3cr3t&trade_no=T1":           "https://m.example/n?sign=xxxxx&trade_no=T1",
		"https://m.example/n?X-Amz-Signature=s3&X-Amz-Date=1":   "https://m.example/n?X-Amz-Signature=xxxxx&X-Amz-Date=1",
		"https://m.example/n?api_key=a&apiKey=b&key=c&token=d":  "https://m.example/n?api_key=xxxxx&apiKey=xxxxx&key=xxxxx&token=xxxxx",
		"https://m.example/n?client_secret=a&password=b&auth=c": "https://m.example/n?client_secret=xxxxx&password=xxxxx&auth=xxxxx",
		"https://m.example/n?access%5Ftoken=s3cr3t":             "https://m.example/n?access%5Ftoken=xxxxx",
		"https://m.example/n?token=&token":                      "https://m.example/n?token=&token",
		"https://u:p@m.example/n?token=s3cr3t#f":                "https://xxxxx@m.example/n?token=xxxxx#f",
		"https://m.example/n?author=Ada&oauth_token=s3cr3t":     "https://m.example/n?author=Ada&oauth_token=xxxxx",
		"https://m.example/n?authorization=s3cr3t&authKey=s3":   "https://m.example/n?authorization=xxxxx&authKey=xxxxx",
		// Values that are wrong reach error messages: what is not a URL
		// with a host is hidden as far as its text allows.
		"default:s3cr3t@127.0.0.1:6390":          "xxxxx@127.0.0.1:6390",
		":s3cr3t@127.0.0.1:6390":                 "xxxxx@127.0.0.1:6390",
		"s3cr3t@127.0.0.1:6390":                  "xxxxx@127.0.0.1:6390",
		"tok:s3cr3t@collector":                   "xxxxx@collector",
		"rediss://default:s3cr3t@my host:6390":   "rediss://xxxxx@my host:6390",
		"https://u:s3cr3t@ex ample.com/done":     "https://xxxxx@ex ample.com/done",
		"https://u:pa@ss@ex ample.com/?token=s3": "https://xxxxx@ex ample.com/?token=xxxxx",
		"https://ex ample.com/n?sig=s3cr3t&a=1":  "https://ex ample.com/n?sig=xxxxx&a=1",
		"mailto:someone@example.com":             "xxxxx@example.com",
	} {
		require.Equal(t, want, RedactedURL(in), in)
	}
}
