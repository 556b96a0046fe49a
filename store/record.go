package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/heraldhq/herald/notify"
)

// record is a notification as the scripts see it: short names, times in Unix
// milliseconds, and no payload or history (those live in their own hashes so
// that a state change never decodes a 256 KiB payload).
type record struct {
	ID       string            `json:"id"`
	Topic    string            `json:"t"`
	Channel  string            `json:"c"`
	Queue    string            `json:"q"`
	Target   string            `json:"tg,omitempty"`
	Template string            `json:"tp,omitempty"`
	Policy   string            `json:"p,omitempty"`
	Headers  map[string]string `json:"h,omitempty"`
	Backoff  []int64           `json:"b"`
	TTR      int64             `json:"ttr"`
	State    notify.State      `json:"s"`
	Attempts int               `json:"a"`
	SendAt   int64             `json:"sa"`
	NextAt   int64             `json:"na,omitempty"`
	Created  int64             `json:"ca"`
	Updated  int64             `json:"ua"`
	Receipt  string            `json:"r,omitempty"`
	Deadline int64             `json:"dl,omitempty"`
	Digest   string            `json:"d"`
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// dueMS rounds a due time up to the millisecond: scripts compare whole
// milliseconds, and rounding down would let an attempt start up to 1ms early.
func dueMS(t time.Time) int64 { return ceilMS(t.UnixNano()) }

func ceilMS(ns int64) int64 { return (ns + int64(time.Millisecond) - 1) / int64(time.Millisecond) }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func optMS(v int64) *time.Time {
	if v == 0 {
		return nil
	}
	t := fromMS(v)
	return &t
}

// queueOf is where a notification waits: pull topics have their own queue
// per topic, every other channel shares the dispatchers' push queue.
func queueOf(channel, topic string) string {
	if channel == notify.ChannelPull {
		return PullQueue(topic)
	}
	return QueuePush
}

func toRecord(n *notify.Notification) *record {
	r := &record{
		ID: n.ID, Topic: n.Topic, Channel: n.Channel, Queue: queueOf(n.Channel, n.Topic),
		Target: n.Target, Template: n.Template, Policy: n.Policy, Headers: n.Headers,
		Backoff: make([]int64, len(n.Backoff)), TTR: time.Duration(n.TTR).Milliseconds(),
		State: n.State, Attempts: n.Attempts, SendAt: dueMS(n.SendAt),
		Created: ms(n.CreatedAt), Updated: ms(n.UpdatedAt), Digest: n.Digest,
	}
	for i, d := range n.Backoff {
		r.Backoff[i] = ceilMS(int64(d))
	}
	if n.NextAttemptAt != nil {
		r.NextAt = dueMS(*n.NextAttemptAt)
	}
	return r
}

// decodeNotification rebuilds a notification from its record JSON, payload
// and history JSON (either may be empty).
func decodeNotification(recJSON, payload, hist string) (*notify.Notification, error) {
	var r record
	if err := json.Unmarshal([]byte(recJSON), &r); err != nil {
		return nil, fmt.Errorf("decode record: %w", err)
	}
	n := &notify.Notification{
		ID: r.ID, Topic: r.Topic, Channel: r.Channel, Target: r.Target, Template: r.Template,
		Policy: r.Policy, Headers: r.Headers, State: r.State, Attempts: r.Attempts,
		Backoff: make([]notify.Duration, len(r.Backoff)), TTR: notify.Duration(time.Duration(r.TTR) * time.Millisecond),
		SendAt: fromMS(r.SendAt), NextAttemptAt: optMS(r.NextAt),
		CreatedAt: fromMS(r.Created), UpdatedAt: fromMS(r.Updated),
		Receipt: r.Receipt, Deadline: optMS(r.Deadline), Digest: r.Digest,
		History: []notify.Attempt{},
	}
	for i, b := range r.Backoff {
		n.Backoff[i] = notify.Duration(time.Duration(b) * time.Millisecond)
	}
	if payload != "" {
		n.Payload = json.RawMessage(payload)
	}
	if hist != "" {
		if err := json.Unmarshal([]byte(hist), &n.History); err != nil {
			return nil, fmt.Errorf("decode history of %s: %w", r.ID, err)
		}
	}
	return n, nil
}
