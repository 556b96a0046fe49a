package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

// FuzzDecode feeds the record decoder what a hash may hold after a bug, a
// hand edit or a version that wrote another layout: it returns an error,
// never panics, since one bad record must be quarantined rather than stop
// the dispatcher that read it.
func FuzzDecode(f *testing.F) {
	sendAt := time.UnixMilli(1_800_000_000_000).UTC()
	n := &notify.Notification{ID: "n1", Topic: "orders", Channel: notify.ChannelWebhook,
		Target: "https://merchant.example/notify", Payload: json.RawMessage(`{"order":1}`),
		Backoff: []notify.Duration{0, notify.Duration(time.Minute)}, TTR: notify.Duration(30 * time.Second),
		SendAt: sendAt, Digest: "0123456789abcdef", Headers: map[string]string{"X-Shop": "42"}, OrderKey: "k"}
	content := string(encodeContent(n, sendAt, ms(sendAt)))
	reserved := stateLine{state: notify.StateReserved, channel: notify.ChannelWebhook, receipt: "r1",
		deadline: ms(sendAt) + 30_000, next: -1, updated: ms(sendAt)}.format()
	got, _, err := decode("n1", content, reserved)
	if err != nil || got.Target != n.Target || got.OrderKey != n.OrderKey || got.Headers["X-Shop"] != "42" ||
		!got.SendAt.Equal(sendAt) || len(got.Backoff) != 2 || got.State != notify.StateReserved || got.Receipt != "r1" {
		f.Fatalf("the seed does not decode to what was encoded: %+v, %v", got, err)
	}
	f.Add(content, "")
	f.Add(content, reserved)
	f.Add("d u 1000 jobs\nnot a body", "")
	f.Add("d:5 u 1 jobs\n\x09", "W|1|1|u||||1|key")
	f.Fuzz(func(t *testing.T, content, state string) {
		got, hist, err := decode("n1", content, state)
		if err != nil {
			return
		}
		if got.ID != "n1" || hist < 0 || (state != "" && got.Version != state) {
			t.Fatalf("decoded id %q, history length %d, version %q from state %q", got.ID, hist, got.Version, state)
		}
	})
}

// TestP99Beyond: attempts whose 99th percentile of lateness lies past the
// last bucket read as beyond it, not as at most its bound.
func TestP99Beyond(t *testing.T) {
	buckets := make([]int64, len(latencyBounds)+1)
	buckets[0] = 50
	require.Equal(t, time.Millisecond, p99(buckets))
	buckets[len(latencyBounds)-1] = 50
	require.Equal(t, LatenessLastBound, p99(buckets))
	buckets[len(latencyBounds)] = 50
	require.Equal(t, LatenessBeyond, p99(buckets))
}
