package notify

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Channels a notification can be delivered on.
const (
	ChannelWebhook = "webhook"
	ChannelSMS     = "sms"
	ChannelPoll    = "poll"
	// ChannelPull pushes nothing: consumers (over HTTP, or a library-mode
	// handler registered for the topic) reserve and acknowledge.
	ChannelPull = "pull"
)

// State is where a notification is in its life.
type State string

// The states of a notification: scheduled -> reserved -> succeeded |
// scheduled (retry) | dead; scheduled|reserved -> cancelled.
const (
	StateScheduled State = "scheduled"
	StateReserved  State = "reserved"
	StateSucceeded State = "succeeded"
	StateDead      State = "dead"
	StateCancelled State = "cancelled"
)

// Outcome names how an attempt ended, as recorded in the history.
type Outcome string

// Outcomes of an attempt.
const (
	OutcomeSuccess    Outcome = "success"
	OutcomeRetry      Outcome = "retry"
	OutcomePermanent  Outcome = "permanent"
	OutcomeTTRExpired Outcome = "ttr_expired"
	// OutcomeReleased is an attempt given back without penalty (a dispatcher
	// shutting down): it does not count against the backoff array.
	OutcomeReleased Outcome = "released"
)

// Limits and defaults of the model.
const (
	// MaxPayloadDefault is the largest payload accepted, in bytes, unless the
	// API's max_body says otherwise.
	MaxPayloadDefault = 256 << 10
	// MaxBackoff is the longest backoff array accepted.
	MaxBackoff = 100
	// MaxErrorLen is how much of an attempt's error the history keeps.
	MaxErrorLen = 1024
	// TTRDefault is the reservation time when neither the notification nor
	// its policy sets one.
	TTRDefault = 30 * time.Second
)

const (
	letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	digits  = "0123456789"
)

// The names checked on every enqueue are checked a byte at a time against
// a table: the regexps they were written as cost a tenth of an enqueue.
var (
	// idChars: an id, an order key and an endpoint name match
	// [A-Za-z0-9._:-]{1,128}.
	idChars = newCharset(letters + digits + "._:-")
	// topicChars: a topic matches [a-z0-9._-]{1,64}.
	topicChars = newCharset(letters[26:] + digits + "._-")
	// headerChars is RFC 9110's token, the characters a header name may
	// use (up to 128 of them).
	headerChars = newCharset(letters + digits + "!#$%&'*+.^_`|~-")
	e164Re      = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)
)

// charset is a set of bytes.
type charset [256]bool

func newCharset(chars string) *charset {
	var c charset
	for i := range len(chars) {
		c[chars[i]] = true
	}
	return &c
}

// match reports whether s has 1 to maxLen bytes, all in c.
func (c *charset) match(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := range len(s) {
		if !c[s[i]] {
			return false
		}
	}
	return true
}

// Notification is one message and everything Herald knows of it: what to
// send, where, on which schedule, and what happened so far. Its JSON form is
// the record the API returns.
type Notification struct {
	ID      string `json:"id"`
	Topic   string `json:"topic"`
	Channel string `json:"channel"`
	Target  string `json:"target,omitempty"`
	// Endpoint, instead of Target, names a registered endpoint: each
	// attempt goes to the endpoint's URL, signed with its secrets, as they
	// are at that attempt.
	Endpoint string `json:"endpoint,omitempty"`
	Template string `json:"template,omitempty"`
	Policy   string `json:"policy,omitempty"`
	// OrderKey, when set, orders the notification behind every earlier one
	// of its topic with the same key: it is not attempted while one of them
	// is scheduled, reserved or retrying.
	OrderKey string `json:"order_key,omitempty"`
	// WaitingFor is, while the notification waits behind an earlier one of
	// its order key, that one's id.
	WaitingFor string `json:"waiting_for,omitempty"`
	State      State  `json:"state"`
	// Attempts is how many attempts have been made so far; while reserved it
	// is also the 0-based index of the running attempt.
	Attempts int `json:"attempts"`
	// Backoff is the resolved array the notification carries: attempt n is
	// due backoff[n] after the previous failure (attempt 0 after SendAt).
	Backoff []Duration `json:"backoff"`
	// TTR is how long a reservation lasts before it counts as a failed
	// attempt.
	TTR           Duration          `json:"ttr"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       json.RawMessage   `json:"payload"`
	SendAt        time.Time         `json:"send_at"`
	NextAttemptAt *time.Time        `json:"next_attempt_at"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	History       []Attempt         `json:"history"`
	// Receipt and Deadline are set while the notification is reserved; ack
	// and nack must present the receipt.
	Receipt  string     `json:"receipt,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
	// Digest identifies the content for idempotent enqueues; see Digest.
	Digest string `json:"-"`
	// Schedule is how the request asked for its send time, as
	// ComputeDigest takes it; set by policy.Resolve, never stored. With it
	// the store recognises a record whose digest an earlier version took
	// of the resolved content (LegacyDigest).
	Schedule string `json:"-"`
	// Version is the stored state this copy was read in, opaque to all but
	// the store: finishing an attempt checks that it is unchanged, so that
	// the holder of a reservation that expired or was cancelled meanwhile
	// cannot finish it.
	Version string `json:"-"`
	// Paused is set on a scheduled notification that came due while its
	// topic or endpoint was paused: it has no next attempt time, and starts
	// when they are resumed.
	Paused bool `json:"paused,omitempty"`
}

// Attempt is one entry of a notification's history.
type Attempt struct {
	Attempt    int       `json:"attempt"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Outcome    Outcome   `json:"outcome"`
	StatusCode int       `json:"status_code,omitempty"`
	Error      string    `json:"error,omitempty"`
	DurationMS int64     `json:"duration_ms"`
}

// AppendJSON appends a as json.Marshal writes it, without its reflection:
// the store writes one per attempt. Times outside the years 0 to 9999, which
// json.Marshal refuses, are written as json.Marshal writes the zero time.
func (a Attempt) AppendJSON(b []byte) []byte {
	b = append(b, `{"attempt":`...)
	b = strconv.AppendInt(b, int64(a.Attempt), 10)
	b = append(b, `,"started_at":`...)
	b = appendJSONTime(b, a.StartedAt)
	b = append(b, `,"finished_at":`...)
	b = appendJSONTime(b, a.FinishedAt)
	b = append(b, `,"outcome":`...)
	b = appendJSONString(b, a.Outcome)
	if a.StatusCode != 0 {
		b = append(b, `,"status_code":`...)
		b = strconv.AppendInt(b, int64(a.StatusCode), 10)
	}
	if a.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, a.Error)
	}
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, a.DurationMS, 10)
	return append(b, '}')
}

func appendJSONTime(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		t = time.Time{}
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// Finished reports whether the notification can make no further attempt
// without an operator (succeeded, dead or cancelled).
func (s State) Finished() bool {
	return s == StateSucceeded || s == StateDead || s == StateCancelled
}

// ValidID reports whether id is an acceptable notification id.
func ValidID(id string) bool { return idChars.match(id, 128) }

// ValidTopic reports whether topic is an acceptable topic name.
func ValidTopic(topic string) bool { return topicChars.match(topic, 64) }

// ValidE164 reports whether s is an E.164 phone number such as
// +14155550100, the form SMS targets take.
func ValidE164(s string) bool { return e164Re.MatchString(s) }

// ValidHeaderName reports whether k may name a header: an RFC 9110 token of
// at most 128 characters.
func ValidHeaderName(k string) bool { return headerChars.match(k, 128) }

// ValidHeaderValue reports whether v may be a header's value: an RFC 9110
// field-value, which holds visible characters, spaces, tabs and bytes from
// 0x80 up, but no other control character (CR, LF, NUL, ESC, DEL...).
func ValidHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// NewID returns a random id for a notification enqueued without one.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Validate checks a resolved notification before it is stored. maxPayload
// bounds the payload in bytes (0: MaxPayloadDefault). The error is a
// *FieldError naming the field.
func (n *Notification) Validate(maxPayload int) error {
	if maxPayload <= 0 {
		maxPayload = MaxPayloadDefault
	}
	switch {
	case !ValidID(n.ID):
		return Errorf("id", "must match [A-Za-z0-9._:-]{1,128}")
	case !ValidTopic(n.Topic):
		return Errorf("topic", "must match [a-z0-9._-]{1,64}")
	case n.OrderKey != "" && !ValidID(n.OrderKey):
		return Errorf("order_key", "must match [A-Za-z0-9._:-]{1,128}")
	}
	if err := validateEndpoint(n); err != nil {
		return err
	}
	if len(n.Payload) > maxPayload {
		return Errorf("payload", "is %d bytes, more than the limit of %d", len(n.Payload), maxPayload)
	}
	if len(n.Payload) > 0 && !json.Valid(n.Payload) {
		return Errorf("payload", "is not valid JSON")
	}
	if len(n.Backoff) == 0 {
		return Errorf("backoff", "must have at least one entry")
	}
	if len(n.Backoff) > MaxBackoff {
		return Errorf("backoff", "has %d entries, more than %d", len(n.Backoff), MaxBackoff)
	}
	for i, d := range n.Backoff {
		if d < 0 || time.Duration(d) > maxDuration {
			return Errorf(fmt.Sprintf("backoff[%d]", i), "must be between 0s and %s", maxDuration)
		}
	}
	if n.TTR <= 0 || time.Duration(n.TTR) > maxDuration {
		return Errorf("ttr", "must be positive")
	}
	for _, k := range sortedKeys(n.Headers) {
		if !ValidHeaderName(k) {
			return Errorf("headers", "bad header name %q: want 1 to 128 token characters (letters, digits, !#$%%&'*+.^_`|~-)", k)
		}
		if !ValidHeaderValue(n.Headers[k]) {
			return Errorf("headers."+k, "must not contain control characters other than tab")
		}
	}
	if n.SendAt.IsZero() {
		return Errorf("send_at", "is required")
	}
	return nil
}

// validateEndpoint checks a notification's destination: its endpoint's
// name, when it names one (whether the endpoint exists is for the caller,
// which knows the registered ones), or else its target.
func validateEndpoint(n *Notification) error {
	switch {
	case n.Endpoint == "":
		return ValidateTarget(n.Channel, n.Target)
	case n.Target != "":
		return Errorf("endpoint", "give endpoint or target, not both")
	case !ValidID(n.Endpoint):
		return Errorf("endpoint", "must match [A-Za-z0-9._:-]{1,128}")
	case n.Channel != ChannelWebhook:
		return Errorf("endpoint", "is for channel webhook only, not %q", n.Channel)
	}
	return nil
}

// credentialHeaders are the request headers a notification may carry
// whose values are its receiver's credentials, sent with every attempt: no
// answer of the API shows them, nor does the history where a receiver
// echoed them. Besides HTTP's own, the names API keys and tokens most often
// travel under. CredentialHeader adds the names receivers choose for
// themselves.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie",
	"X-Api-Key", "Api-Key", "X-Auth-Token", "X-Access-Token"}

// CredentialHeader reports whether a header named name (in any case)
// carries its receiver's credentials: one of HTTP's own or of the names
// API keys and tokens most often travel under, or a name of the
// receiver's own that says so as a query parameter's would
// (CredentialParam: X-Gitlab-Token, Private-Token, X-Webhook-Secret,
// X-Signature-Key), but for Idempotency-Key, which identifies a request and
// guards nothing. Every attempt asks it of each of its headers, so it
// allocates nothing.
func CredentialHeader(name string) bool {
	for _, h := range credentialHeaders {
		if strings.EqualFold(h, name) {
			return true
		}
	}
	return !strings.EqualFold(name, "Idempotency-Key") && CredentialParam(name)
}

// RedactedURL returns s as answers show it: the user information of a URL
// (https://user:password@host/, or a token in the user's or the password's
// place) replaced, all of it, by "xxxxx", and so is the value of each query
// parameter named for a credential (?access_token=, ?sig=, ?api_key=; see
// credentialParam), the others kept as they are. They are a receiver's
// credentials, sent with every attempt, which whoever reads a record, an
// endpoint or an attempt's error need not hold.
//
// A value that is not a URL, such as host:port with credentials before an
// '@', or one that does not parse, is hidden as far as its text allows
// (redactedText): such values reach error messages because they are wrong.
func RedactedURL(s string) string {
	if !strings.ContainsAny(s, "@?") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || (u.Host == "" && strings.Contains(s, "@")) {
		return redactedText(s)
	}
	query, hidden := redactedQuery(u.RawQuery)
	if u.User == nil && !hidden {
		return s
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	u.RawQuery = query
	return u.String()
}

// redactedText hides what may be credentials in s, which does not parse as
// a URL with a host: everything between its scheme, if any, and its last
// '@', and the credential parameters of what follows its first '?'. It
// hides more than RedactedURL where an '@' comes later (a query's e-mail
// address), rather than less.
func redactedText(s string) string {
	if at := strings.LastIndex(s, "@"); at >= 0 {
		prefix := ""
		if scheme, _, ok := strings.Cut(s[:at], "://"); ok {
			prefix = scheme + "://"
		}
		s = prefix + "xxxxx" + s[at:]
	}
	if head, query, ok := strings.Cut(s, "?"); ok {
		query, _ = redactedQuery(query)
		s = head + "?" + query
	}
	return s
}

// redactedQuery returns a raw query with the values of its credential
// parameters replaced by "xxxxx", and whether there were any; every other
// byte is kept, so that the query reads as it was sent.
func redactedQuery(raw string) (string, bool) {
	if raw == "" {
		return raw, false
	}
	parts := strings.Split(raw, "&")
	hidden := false
	for i, value := range credentialParams(parts) {
		parts[i] = parts[i][:len(parts[i])-len(value)] + "xxxxx"
		hidden = true
	}
	return strings.Join(parts, "&"), hidden
}

// credentialParams yields, for each of a raw query's &-separated parts
// that is a credential parameter (CredentialParam) with a value, its index
// and its value as sent.
func credentialParams(parts []string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		for i, p := range parts {
			name, value, _ := strings.Cut(p, "=")
			if un, err := url.QueryUnescape(name); err == nil {
				name = un
			}
			if value != "" && CredentialParam(name) && !yield(i, value) {
				return
			}
		}
	}
}

// CredentialParam reports whether a URL query parameter named name carries
// a credential, as receivers and gateways name theirs: a name holding
// token, secret, passw, signature, credential, session or auth (but not
// author), or ending in key (api_key, apiKey, X-Api-Key, key), or sig,
// sign, pwd, pass or jwt, in any case and with or without "-", "_" or ".".
// A name that merely looks like one (monkey) is hidden too: a value hidden
// for nothing costs less than a token shown.
func CredentialParam(name string) bool {
	// A name folded into a buffer on the stack: every attempt asks this of
	// each of its headers.
	var buf [64]byte
	n := buf[:0]
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '-' || c == '_' || c == '.':
			continue
		case c >= utf8.RuneSelf:
			return credentialName([]byte(strings.Map(foldName, name)))
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		n = append(n, c)
	}
	return credentialName(n)
}

// foldName is CredentialParam's folding of one rune: separators dropped,
// the rest in lower case.
func foldName(r rune) rune {
	switch r {
	case '-', '_', '.':
		return -1
	}
	return unicode.ToLower(r)
}

// credentialParts are what a folded name holding one of them is a
// credential's (CredentialParam).
var credentialParts = [][]byte{[]byte("token"), []byte("secret"), []byte("passw"), []byte("signature"),
	[]byte("credential"), []byte("session"), []byte("authoriz")}

// credentialName is CredentialParam of a folded name.
func credentialName(n []byte) bool {
	switch string(n) {
	case "sig", "sign", "pwd", "pass", "jwt":
		return true
	}
	if bytes.HasSuffix(n, []byte("key")) {
		return true
	}
	for _, part := range credentialParts {
		if bytes.Contains(n, part) {
			return true
		}
	}
	// auth, authkey, oauth, but not an author's name.
	for rest := n; ; {
		i := bytes.Index(rest, []byte("auth"))
		if i < 0 {
			return false
		}
		if !bytes.HasPrefix(rest[i:], []byte("author")) {
			return true
		}
		rest = rest[i+len("author"):]
	}
}

// ValidHTTPURL reports whether s is an absolute http or https URL with a
// host, and a port from 1 to 65535 when it names one: what the webhook and
// poll senders, and an on_done webhook, can reach.
func ValidHTTPURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	// url.Parse takes any digits for a port; a dial refuses 0 and what is
	// past 65535, on every attempt.
	if p := u.Port(); p != "" {
		port, err := strconv.Atoi(p)
		return err == nil && port >= 1 && port <= 65535
	}
	return true
}

// ValidateTarget checks that target suits channel: an http or https URL for
// webhook and poll, an E.164 number for sms, nothing for pull. The error is
// a *FieldError naming "target", or "channel" when channel is empty or
// unknown.
func ValidateTarget(channel, target string) error {
	switch channel {
	case ChannelWebhook, ChannelPoll:
		if !ValidHTTPURL(target) {
			return Errorf("target", "must be an http or https URL (port 1 to 65535) for channel %s", channel)
		}
	case ChannelSMS:
		if ValidE164("+" + target) {
			// An unquoted +14155550100 in YAML is the number 14155550100.
			return Errorf("target", "must be an E.164 phone number such as +14155550100: it lacks its leading + (in a YAML file, quote the number, or it is read as a number without the +)")
		}
		if !ValidE164(target) {
			return Errorf("target", "must be an E.164 phone number such as +14155550100")
		}
	case ChannelPull:
		if target != "" {
			return Errorf("target", "must be empty for channel pull")
		}
	case "":
		return Errorf("channel", "is required (webhook, sms, poll or pull), directly or from the topic")
	default:
		return Errorf("channel", "must be webhook, sms, poll or pull, not %q", channel)
	}
	return nil
}

// DueAt returns when n's next attempt is due, or fallback when it has none
// (a finished notification).
func (n *Notification) DueAt(fallback time.Time) time.Time {
	if n.NextAttemptAt != nil {
		return *n.NextAttemptAt
	}
	return fallback
}

// LegacyDigest returns the digest versions before 2026-11-27 stored for
// n's content, taken of the notification as resolved (with its policy's and
// topic's defaults) rather than of the request as written; "" when n was
// not resolved by policy.Resolve. A record those versions stored is the
// same notification when it holds this digest.
func (n *Notification) LegacyDigest() string {
	if n.Schedule == "" {
		return ""
	}
	return n.ComputeDigest(n.Schedule)
}

// ComputeDigest returns a digest of the content that decides whether a
// second enqueue of the same id is "the same notification": topic, channel,
// target, template, policy, backoff, ttr, headers, payload (compacted),
// order key, endpoint and schedule. schedule is how the caller asked for the send time (an absolute
// send_at, or a relative delay, so that a retried "delay: 30m" request is
// still the same request).
func (n *Notification) ComputeDigest(schedule string) string {
	// Compact changes nothing in a payload without white space, and an
	// invalid one is taken as it is: either way, no need to run it.
	payload := []byte(n.Payload)
	if bytes.ContainsAny(payload, " \t\r\n") {
		var buf bytes.Buffer
		if json.Compact(&buf, payload) == nil {
			payload = buf.Bytes()
		}
	}
	// On the stack unless the content outgrows it: most do not.
	var buf [512]byte
	b := append(buf[:0], '{')
	// The fields in json.Marshal's order of the struct they were first
	// written from; a nil list is null, and the last two are left out
	// when empty (omitempty).
	str := func(key, v string) {
		b = append(b, key...)
		b = appendJSONString(b, v)
	}
	str(`"Topic":`, n.Topic)
	str(`,"Channel":`, n.Channel)
	str(`,"Target":`, n.Target)
	str(`,"Template":`, n.Template)
	str(`,"Policy":`, n.Policy)
	b = append(b, `,"Backoff":`...)
	if n.Backoff == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, d := range n.Backoff {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendDuration(b, d)
		}
		b = append(b, ']')
	}
	b = appendDuration(append(b, `,"TTR":`...), n.TTR)
	b = append(b, `,"Headers":`...)
	if n.Headers == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, k := range sortedKeys(n.Headers) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, n.Headers[k])
		}
		b = append(b, '}')
	}
	b = append(b, `,"Payload":`...)
	b = appendJSONString(b, payload)
	str(`,"Schedule":`, schedule)
	if n.OrderKey != "" {
		str(`,"OrderKey":`, n.OrderKey)
	}
	if n.Endpoint != "" {
		str(`,"Endpoint":`, n.Endpoint)
	}
	b = append(b, '}')
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// sortedKeys returns m's keys in order; nil, without allocating, for none,
// which is how most notifications come.
func sortedKeys(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}

// jsonSafe marks the ASCII bytes encoding/json's Marshal writes as they
// are: a table lookup per byte instead of six comparisons, which made
// appendJSONString a fifth of a notification's validation and digest.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = !strings.ContainsRune(`"\<>&`, rune(c))
	}
	return t
}()

// appendDuration appends d as appendJSONString appends
// time.Duration(d).String(), the form stored digests were taken of ("2m0s",
// where Duration.String now writes "2m"). Whole seconds, which policies'
// durations nearly always are, are written without formatting a string
// first.
func appendDuration(b []byte, d Duration) []byte {
	if d < 0 || time.Duration(d)%time.Second != 0 {
		return appendJSONString(b, time.Duration(d).String())
	}
	s := int64(time.Duration(d) / time.Second)
	b = append(b, '"')
	if s >= 3600 {
		b = append(strconv.AppendInt(b, s/3600, 10), 'h')
	}
	if s >= 60 {
		b = append(strconv.AppendInt(b, s/60%60, 10), 'm')
	}
	return append(strconv.AppendInt(b, s%60, 10), 's', '"')
}

// appendJSONString appends s as encoding/json's Marshal writes a string
// (HTML characters, U+2028 and U+2029 escaped, invalid UTF-8 replaced), so
// that digests stay what they were when json.Marshal wrote their input.
func appendJSONString[S ~string | ~[]byte](b []byte, s S) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// CutError cuts an error message to MaxErrorLen bytes for the history, as
// valid UTF-8: each run of bytes that are not (a receiver answering in GBK
// or Latin-1) shows as one U+FFFD, rather than ending the message there,
// and the cut falls between runes.
func CutError(s string) string {
	if len(s) <= MaxErrorLen && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD") // a run of invalid bytes is one U+FFFD
	if len(s) <= MaxErrorLen {
		return s
	}
	end := MaxErrorLen
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}
