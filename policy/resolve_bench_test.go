package policy_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
)

// BenchmarkResolve is the Go work an enqueue does before it reaches the
// store, per notification: defaults, validation and the content digest.
// It is most of a batch enqueue's client-side CPU.
func BenchmarkResolve(b *testing.B) {
	s, err := policy.NewSet(nil, nil)
	require.NoError(b, err)
	req := &notify.Request{Topic: "orders", Channel: notify.ChannelWebhook, Target: "https://merchant.example/notify",
		Payload: json.RawMessage(`{"order":"o-1","amount":1999,"note":"` + strings.Repeat("x", 64) + `"}`)}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Resolve(req, now, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
