package schedule_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
)

// TestStopGivesBackReservedAheadAtOnce: a dispatcher stopping during a
// deploy, its only worker busy with a slow attempt, gives back at once the
// notifications it reserved ahead, without counting an attempt, so that
// another dispatcher delivers them while the slow attempt finishes, rather
// than after the shutdown timeout or their ttr.
func TestStopGivesBackReservedAheadAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var err error
	// Attempts of a minute: the one running outlasts the test.
	b.policies, err = policy.NewSet(map[string]policy.Policy{
		"fast": {Backoff: ms(0, 0), TTR: notify.Duration(time.Minute), Timeout: notify.Duration(time.Minute)},
	}, nil)
	require.NoError(t, err)
	started, finish := make(chan struct{}, 1), make(chan struct{})
	slow := newRecorder(func(ctx context.Context, n *notify.Notification) error {
		if n.ID == "warm" {
			return nil
		}
		started <- struct{}{}
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	old := b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: slow},
		Concurrency: 1, Prefetch: 10, ShutdownTimeout: 30 * time.Second})
	// A quick attempt first: a dispatcher reserves ahead of its workers
	// as many as it expects them to start soon.
	b.enqueue(t, "warm", ms(0, 0), 0)
	b.waitState(t, "warm", notify.StateSucceeded)
	b.enqueue(t, "slow", ms(0, 0), 0)
	<-started
	const ahead = 5
	for i := range ahead {
		b.enqueue(t, fmt.Sprintf("ahead%d", i), ms(0, 0), 0)
	}
	require.Eventually(t, func() bool {
		st, err := b.store.Stats(context.Background())
		return err == nil && st["orders"].Reserved == 1+ahead
	}, 10*time.Second, 5*time.Millisecond, "the old dispatcher reserves the others ahead")

	stopped := make(chan struct{})
	go func() { old.Stop(); close(stopped) }()
	t.Cleanup(func() { close(finish); <-stopped })

	fresh := newRecorder(nil)
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: fresh}})
	for i := range ahead {
		id := fmt.Sprintf("ahead%d", i)
		got := b.waitState(t, id, notify.StateSucceeded) // well within the shutdown timeout
		require.Equal(t, 1, got.Attempts, "%s: the give-back is not an attempt", id)
		require.Equal(t, 1, fresh.attempts(id), id)
		require.Zero(t, slow.attempts(id), id)
	}
	select {
	case <-stopped:
		t.Fatal("Stop returned before the slow attempt ended")
	default:
	}
}
