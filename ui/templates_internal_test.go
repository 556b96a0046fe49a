package ui

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// TestP99Text: the overview's lateness reads as its bucket's bound, and as
// past the last bound when attempts were later still, where attempts an
// hour late after an outage read "≤ 5m0s".
func TestP99Text(t *testing.T) {
	p99 := funcs["p99"].(func(time.Duration) string)
	for d, want := range map[time.Duration]string{
		25 * time.Millisecond:   "≤ 25ms",
		store.LatenessLastBound: "≤ 5m0s",
		store.LatenessBeyond:    "> 5m0s",
	} {
		if got := p99(d); got != want {
			t.Errorf("p99(%s) = %q, want %q", d, got, want)
		}
	}
}
