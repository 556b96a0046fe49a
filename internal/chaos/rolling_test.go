package chaos_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
)

// TestRollingRestart deploys as an operator does: three dispatchers share
// one Redis, and while notifications flow each in turn is stopped with
// SIGTERM and started again. A dispatcher that stops cleanly records what
// it ran and gives back what it had reserved, so nothing waits for a ttr
// to run out: no record shows an expired reservation, and the receiver
// sees no 2xx answer twice, but to an attempt whose sender gave up at its
// timeout without hearing it (a machine stalled for a second).
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	const notifications, window = 1500, 9 * time.Second
	dep := startDeployment(t, redistest.Start(t, redistest.Options{}))
	rcv, dispatchers, client := dep.rcv, dep.dispatchers, dep.client
	ctx := context.Background()

	start := time.Now()
	restarted := make(chan error, 1)
	go func() {
		for i := 0; time.Since(start) < window; i++ {
			time.Sleep(time.Second)
			p := dispatchers[i%len(dispatchers)]
			p.stop()
			if err := p.start(); err != nil {
				restarted <- err
				return
			}
		}
		restarted <- nil
	}()
	ackAt := make([]time.Time, notifications)
	inParallel(notifications, func(i int) {
		time.Sleep(time.Until(start.Add(window * time.Duration(i) / notifications)))
		status, err := client.enqueue(ctx, chaosID(i), rcv.srv.URL+"/hook", i)
		if err == nil && acked(status) {
			ackAt[i] = time.Now()
		}
	})
	require.NoError(t, <-restarted)
	require.Eventually(t, func() bool {
		n, err := client.pending(ctx)
		return err == nil && n == 0
	}, time.Minute, 200*time.Millisecond, "the backlog never drained")

	l := keepLedger(t, client, rcv, notifications, ackAt, nil)
	t.Log(l.String())
	require.Zero(t, l.unacked, "notifications never acknowledged")
	require.Zero(t, l.lost+l.unfinished+l.contradicted, "lost %v, unfinished %v, contradicted %v",
		l.examples["lost"], l.examples["unfinished"], l.examples["contradicted"])
	require.Zero(t, l.overlaps, "attempts of one notification at once: %v", l.examples["overlapped"])
	require.Zero(t, l.dupUnexplained, "2xx answers not recorded: %v", l.examples["unexplained"])
	var mu sync.Mutex
	var expired []string
	inParallel(notifications, func(i int) {
		var rec notify.Notification
		if _, err := client.get(ctx, chaosID(i), &rec); err != nil {
			return
		}
		for _, h := range rec.History {
			if h.Outcome == notify.OutcomeTTRExpired {
				mu.Lock()
				expired = append(expired, chaosID(i)+" "+history(&rec))
				mu.Unlock()
			}
		}
	})
	require.Empty(t, expired, "reservations a clean stop left to run out")
}
