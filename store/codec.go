package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/notify"
)

// A notification is stored in two parts (see keys.go): its content, written
// once at enqueue and never changed, and its state, rewritten at every
// transition. A state change therefore never reads or writes a payload, and
// a notification that waits for its first attempt has no state at all: its
// place in a due set says everything.
//
// Content is a header line that the scripts read, then a body only Go
// reads:
//
//	<digest>:<first due ms> <channel letter> <ttr ms> <topic>\n
//	version byte (1)
//	uvarint created (ms), uvarint send_at (ms)
//	uvarint len(backoff), then each entry (ms)
//	string policy, template, target, order key, endpoint, trace
//	uvarint len(headers), then name and value strings
//	payload: the rest, as given
//
// where a string is a uvarint length and its bytes. The first due time is
// send_at + backoff[0] rounded up once, exactly the first due set's score,
// so that a reservation need not read scores; it follows the digest, which
// is cut to digestLen characters, so that versions that read only those
// (and a body without it) read this content as theirs. Content without
// it, as those versions wrote it, is due at send_at plus backoff[0], each
// rounded up: a millisecond late at most, never early. The header carries what
// the scripts need without the body: the digest (idempotent enqueue), the
// channel (which queue) and the topic (which gauges and dead set), and the
// ttr (the reservation's deadline).
//
// State is one line of fields separated by "|":
//
//	<state letter>|<attempts>|<history length>|<channel letter>|<receipt>|<deadline ms>|<next attempt ms>|<updated ms>|<order key>
//
// The history length differs from attempts when attempts were released
// (given back without counting). A notification with an order key always
// has a state line, so that the scripts that move it in its key's line
// know the key; state W is waiting behind an earlier one of its key, whose
// next attempt time is when it is due once it heads the line.

const contentVersion = 1

// Letters of the state line and the content header.
var (
	stateLetters = map[notify.State]string{notify.StateScheduled: "S", notify.StateReserved: "R", notify.StateSucceeded: "K", notify.StateDead: "D", notify.StateCancelled: "C"}
	// waitingLetter is a scheduled notification waiting behind an earlier
	// one of its order key.
	waitingLetter  = "W"
	channelLetters = map[string]string{notify.ChannelWebhook: "w", notify.ChannelSMS: "s", notify.ChannelPoll: "p", notify.ChannelPull: "u"}
	letterStates   = invert(stateLetters)
	letterChannels = invert(channelLetters)
)

func invert[K comparable](m map[K]string) map[string]K {
	out := make(map[string]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

// maxScoreMS is the largest time, in Unix milliseconds, a Redis score (a
// double) holds exactly.
const maxScoreMS = 1<<53 - 1

// dueMS rounds a due time up to the millisecond: scripts compare whole
// milliseconds, and rounding down would let an attempt start up to 1ms
// early. It works on seconds and nanoseconds apart, so no time overflows
// (time.Time.UnixNano does after 2262).
func dueMS(t time.Time) int64 {
	return t.Unix()*1000 + int64((t.Nanosecond()+int(time.Millisecond)-1)/int(time.Millisecond))
}

// checkDue reports whether t can be stored as a due time: from the Unix
// epoch to latest (Unix milliseconds). It compares times, not dueMS, whose
// milliseconds wrap around some 292 million years on: a time that far
// would otherwise be stored due in 1970, and start at once.
func checkDue(t time.Time, latest int64) error {
	if t.Before(time.Unix(0, 0)) {
		return errors.New("is before 1970-01-01T00:00:00Z")
	}
	if t.After(time.UnixMilli(latest)) {
		return fmt.Errorf("is later than the store can hold (%s)", time.UnixMilli(latest).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func durMS(d notify.Duration) int64 { return int64(d.CeilMS() / notify.Duration(time.Millisecond)) }

// queueOf is where a notification waits: pull topics have their own queue
// per topic, every other channel shares the dispatchers' push queue.
func queueOf(channel, topic string) string {
	if channel == notify.ChannelPull {
		return PullQueue(topic)
	}
	return QueuePush
}

// digestLen is how much of a notification's digest its content keeps: 16
// hex characters, 64 bits, tell apart two contents enqueued under one id
// as surely as the whole, in half the bytes of every stored record.
const digestLen = 16

// sameContent reports whether stored, a notification read from the store,
// has the content whose digest is digest: whether enqueueing it again
// would find it Existing rather than a conflict. Stored records keep only
// the digest's first digestLen characters, so compare through this.
func sameContent(stored *notify.Notification, digest string) bool {
	cut := func(d string) string { return d[:min(len(d), digestLen)] }
	return cut(stored.Digest) == cut(digest)
}

// SameNotification reports whether stored, a notification read from the
// store, is n: whether enqueueing n would find it Existing rather than a
// conflict, by n's digest or by the one an earlier version took of it.
func SameNotification(stored, n *notify.Notification) bool {
	return sameContent(stored, n.Digest) || sameAsLegacy(stored, n)
}

// sameAsLegacy reports whether stored, a record an earlier version wrote,
// holds the content of n, whose digest is taken the present way: the
// digest that version took of n (notify.Notification.LegacyDigest) is
// stored's. Only a conflict pays for it.
func sameAsLegacy(stored, n *notify.Notification) bool {
	legacy := n.LegacyDigest()
	return legacy != "" && sameContent(stored, legacy)
}

// encodeContent returns n's content as stored. created is the enqueue time,
// due the first attempt's due time (ms).
func encodeContent(n *notify.Notification, created time.Time, due int64) []byte {
	var b bytes.Buffer
	b.Grow(96 + len(n.Topic) + len(n.Target) + len(n.Payload))
	// The header line, appended rather than formatted: every enqueue
	// writes one, and fmt cost as much as the rest of the encoding.
	h := append(b.AvailableBuffer(), n.Digest[:min(len(n.Digest), digestLen)]...)
	h = strconv.AppendInt(append(h, ':'), due, 10)
	h = append(append(append(h, ' '), channelLetters[n.Channel]...), ' ')
	h = strconv.AppendInt(h, durMS(n.TTR), 10)
	h = append(append(append(h, ' '), n.Topic...), '\n')
	b.Write(h)
	b.WriteByte(contentVersion)
	putUvarint(&b, uint64(ms(created)))
	putUvarint(&b, uint64(dueMS(n.SendAt)))
	putUvarint(&b, uint64(len(n.Backoff)))
	for _, d := range n.Backoff {
		putUvarint(&b, uint64(durMS(d)))
	}
	for _, s := range []string{n.Policy, n.Template, n.Target, n.OrderKey, n.Endpoint, ""} {
		putString(&b, s)
	}
	putUvarint(&b, uint64(len(n.Headers)))
	for k, v := range n.Headers {
		putString(&b, k)
		putString(&b, v)
	}
	b.Write(n.Payload)
	return b.Bytes()
}

func putUvarint(b *bytes.Buffer, v uint64) {
	var tmp [binary.MaxVarintLen64]byte
	b.Write(tmp[:binary.PutUvarint(tmp[:], v)])
}

func putString(b *bytes.Buffer, s string) {
	putUvarint(b, uint64(len(s)))
	b.WriteString(s)
}

// header is the part of the content the scripts read, and the first due
// time (-1 when the content does not say).
type header struct {
	digest, channel, topic string
	ttr, due               int64
}

func parseHeader(content string) (header, string, error) {
	line, body, ok := strings.Cut(content, "\n")
	f := strings.SplitN(line, " ", 4)
	if !ok || len(f) != 4 {
		return header{}, "", errors.New("no header line")
	}
	ttr, err := strconv.ParseInt(f[2], 10, 64)
	channel, known := letterChannels[f[1]]
	if err != nil || !known {
		return header{}, "", fmt.Errorf("bad header %q", line)
	}
	h := header{digest: f[0], channel: channel, ttr: ttr, topic: f[3], due: -1}
	if digest, due, ok := strings.Cut(f[0], ":"); ok {
		if h.due, err = strconv.ParseInt(due, 10, 64); err != nil || h.due < 0 {
			return header{}, "", fmt.Errorf("bad header %q", line)
		}
		h.digest = digest
	}
	return h, body, nil
}

// decodeContent rebuilds the content fields of a notification: everything
// but its state. It returns the first attempt's due time (ms) too.
func decodeContent(id, content string) (*notify.Notification, int64, error) {
	h, body, err := parseHeader(content)
	if err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", id, err)
	}
	r := &reader{s: body}
	if v := r.byte(); v != contentVersion {
		return nil, 0, fmt.Errorf("decode %s: unknown content version %d", id, v)
	}
	n := &notify.Notification{
		ID: id, Topic: h.topic, Channel: h.channel, Digest: h.digest,
		TTR:   notify.Duration(time.Duration(h.ttr) * time.Millisecond),
		State: notify.StateScheduled, History: []notify.Attempt{},
	}
	n.CreatedAt = fromMS(int64(r.uvarint()))
	n.UpdatedAt = n.CreatedAt
	n.SendAt = fromMS(int64(r.uvarint()))
	if nb := r.uvarint(); nb <= notify.MaxBackoff {
		n.Backoff = make([]notify.Duration, nb)
		for i := range n.Backoff {
			n.Backoff[i] = notify.Duration(time.Duration(r.uvarint()) * time.Millisecond)
		}
	} else {
		r.err = errors.New("backoff too long")
	}
	n.Policy, n.Template, n.Target, n.OrderKey = r.string(), r.string(), r.string(), r.string()
	n.Endpoint = r.string()
	_ = r.string() // trace: not used yet
	if nh := r.uvarint(); nh > 0 && nh <= uint64(len(r.s)) {
		n.Headers = make(map[string]string, nh)
		for range nh {
			k := r.string()
			n.Headers[k] = r.string()
		}
	}
	if r.err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", id, r.err)
	}
	if r.s != "" {
		n.Payload = []byte(r.s)
	}
	due := h.due
	if due < 0 && len(n.Backoff) > 0 {
		due = ms(n.SendAt) + durMS(n.Backoff[0])
	}
	return n, due, nil
}

// reader reads the body; the first error sticks and later reads return
// zero values.
type reader struct {
	s   string
	err error
}

func (r *reader) byte() byte {
	if r.err != nil || r.s == "" {
		r.fail()
		return 0
	}
	c := r.s[0]
	r.s = r.s[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint([]byte(r.s[:min(len(r.s), binary.MaxVarintLen64)]))
	if n <= 0 {
		r.fail()
		return 0
	}
	r.s = r.s[n:]
	return v
}

func (r *reader) string() string {
	l := r.uvarint()
	if r.err != nil || l > uint64(len(r.s)) {
		r.fail()
		return ""
	}
	s := r.s[:l]
	r.s = r.s[l:]
	return s
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errors.New("truncated content")
	}
}

// stateLine is a parsed state line.
type stateLine struct {
	state    notify.State
	attempts int
	// histLen is how many history entries there are.
	histLen  int
	channel  string
	receipt  string
	deadline int64
	next     int64
	updated  int64
	orderKey string
	// waiting is true while the notification waits behind an earlier one
	// of its order key.
	waiting bool
}

func parseState(s string) (stateLine, error) {
	var f [9]string
	rest := s
	for i := range 8 {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, "|"); !ok {
			return stateLine{}, fmt.Errorf("bad state %q", s)
		}
	}
	f[8] = rest
	st := stateLine{receipt: f[4], orderKey: f[8], waiting: f[0] == waitingLetter}
	var ok1, ok2 bool
	st.state, ok1 = letterStates[f[0]]
	if st.waiting {
		st.state, ok1 = notify.StateScheduled, true
	}
	st.channel, ok2 = letterChannels[f[3]]
	var errs [5]error
	st.attempts, errs[0] = strconv.Atoi(f[1])
	st.histLen, errs[1] = strconv.Atoi(f[2])
	st.deadline, errs[2] = optInt(f[5])
	st.next, errs[3] = optInt(f[6])
	st.updated, errs[4] = optInt(f[7])
	if !ok1 || !ok2 || errors.Join(errs[:]...) != nil {
		return stateLine{}, fmt.Errorf("bad state %q", s)
	}
	return st, nil
}

// optInt reads an optional field of a state line: -1 when empty, since 0
// is a time like any other (the Unix epoch).
func optInt(s string) (int64, error) {
	if s == "" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// optMS returns the time of v milliseconds, or nil for -1 (none).
func optMS(v int64) *time.Time {
	if v < 0 {
		return nil
	}
	t := fromMS(v)
	return &t
}

// apply sets n's state fields from st. An unfinished notification whose
// line has no next attempt time is due at first, its first due time: the
// reservation of a notification that had no state line writes none.
func (st stateLine) apply(n *notify.Notification, first int64) {
	n.State, n.Attempts = st.state, st.attempts
	n.Receipt, n.Deadline = st.receipt, optMS(st.deadline)
	n.NextAttemptAt = optMS(st.next)
	if st.next < 0 {
		n.NextAttemptAt = optMS(first)
	}
	if st.state.Finished() {
		n.NextAttemptAt = nil
	}
	if st.updated >= 0 {
		n.UpdatedAt = fromMS(st.updated)
	}
}

// decode rebuilds a notification from its content and state line ("" for
// a notification that waits for its first attempt, due at its first due
// time).
func decode(id, content, state string) (*notify.Notification, int, error) {
	n, first, err := decodeContent(id, content)
	if err != nil {
		return nil, 0, err
	}
	if state == "" {
		n.NextAttemptAt = optMS(first)
		return n, 0, nil
	}
	st, err := parseState(state)
	if err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", id, err)
	}
	st.apply(n, first)
	n.Version = state
	return n, st.histLen, nil
}

// format is the state line of st, as the scripts write it.
func (st stateLine) format() string {
	letter := stateLetters[st.state]
	if st.waiting {
		letter = waitingLetter
	}
	b := make([]byte, 0, 48+len(st.receipt)+len(st.orderKey))
	b = append(b, letter...)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(st.attempts), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(st.histLen), 10)
	b = append(append(b, '|'), channelLetters[st.channel]...)
	b = append(append(b, '|'), st.receipt...)
	for _, v := range []int64{st.deadline, st.next, st.updated} {
		b = append(b, '|')
		if v >= 0 {
			b = strconv.AppendInt(b, v, 10)
		}
	}
	return string(append(append(b, '|'), st.orderKey...))
}
