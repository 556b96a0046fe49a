package httpsend

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

func TestBeginCapsThePolicyTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		cap, policyTO time.Duration
		want          time.Duration
	}{
		{name: "PolicyShorter", cap: time.Minute, policyTO: 2 * time.Second, want: 2 * time.Second},
		{name: "CapShorter", cap: 3 * time.Second, policyTO: time.Minute, want: 3 * time.Second},
		{name: "NoPolicyTimeout", cap: 4 * time.Second, want: 4 * time.Second},
		{name: "DefaultCap", policyTO: time.Hour, want: TimeoutDefault},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, err := NewBase(&Common{Timeout: tt.cap})
			require.NoError(t, err)
			start := time.Now()
			ctx, cancel := base.Begin(context.Background(), &notify.Rules{Timeout: tt.policyTO})
			defer cancel()
			deadline, ok := ctx.Deadline()
			require.True(t, ok)
			require.WithinDuration(t, start.Add(tt.want), deadline, time.Second)
		})
	}
}

func TestBeginKeepsAnEarlierDeadline(t *testing.T) {
	t.Parallel()
	base, err := NewBase(&Common{Timeout: time.Minute})
	require.NoError(t, err)
	start := time.Now()
	parent, cancelParent := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelParent()

	ctx, cancel := base.Begin(parent, &notify.Rules{Timeout: 5 * time.Second})
	defer cancel()
	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, start.Add(2*time.Second), deadline, time.Second)
	cancelParent()
	require.ErrorIs(t, ctx.Err(), context.Canceled, "the attempt ends with its parent")

	later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLater()
	ctx, cancel = base.Begin(later, &notify.Rules{Timeout: 5 * time.Second})
	defer cancel()
	deadline, ok = ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(5*time.Second), deadline, time.Second)
}
