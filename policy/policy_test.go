package policy_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/policy"
)

// TestNextAttemptAt: a retry's due time is the failure plus its wait, to
// the nanosecond, for the store to round up; a retry at once, a wait no
// one asked for, is the failure rounded down to the millisecond, so that
// it is due when the failure's answer comes back. Jitter, a share of the
// wait, and a Retry-After the policy does not honour leave it at once.
func TestNextAttemptAt(t *testing.T) {
	t.Parallel()
	failed := time.Date(2026, 11, 27, 5, 0, 0, 400123, time.UTC)

	tests := []struct {
		name       string
		policy     policy.Policy
		backoff    []time.Duration
		retryAfter time.Duration
		rand       float64
		want       time.Time
		wantDead   bool
	}{
		{name: "AtOnce", backoff: []time.Duration{0, 0}, want: failed.Truncate(time.Millisecond)},
		{name: "Wait", backoff: []time.Duration{0, 30 * time.Second}, want: failed.Add(30 * time.Second)},
		{name: "SubMillisecondWait", backoff: []time.Duration{0, time.Microsecond}, want: failed.Add(time.Microsecond)},
		{name: "AtOnceUnlessRetryAfter", policy: policy.Policy{HonorRetryAfter: true, MaxRetryAfter: durations(time.Hour)[0]},
			backoff: []time.Duration{0, 0}, retryAfter: time.Minute, want: failed.Add(time.Minute)},
		{name: "AtOnceRetryAfterNotHonoured", backoff: []time.Duration{0, 0}, retryAfter: time.Minute, want: failed.Truncate(time.Millisecond)},
		{name: "AtOnceWithJitter", policy: policy.Policy{Jitter: 0.5}, backoff: []time.Duration{0, 0}, rand: 0.9, want: failed.Truncate(time.Millisecond)},
		{name: "WaitWithJitter", policy: policy.Policy{Jitter: 0.5}, backoff: []time.Duration{0, 10 * time.Second}, rand: 0.5,
			want: failed.Add(12500 * time.Millisecond)},
		{name: "Exhausted", backoff: []time.Duration{0}, wantDead: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tt.policy.NextAttemptAt(durations(tt.backoff...), policy.Failure{At: failed, RetryAfter: tt.retryAfter, Rand: tt.rand})
			require.Equal(t, !tt.wantDead, ok)
			if ok {
				require.Equal(t, tt.want, got)
			}
		})
	}
}
