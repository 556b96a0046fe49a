package schedule_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// TestBurstIsSharedByDispatchers: three dispatchers on a single Redis (one
// shard, its default) share a burst of slow attempts, rather than one of
// them reserving it all ahead of its busy workers while the others idle.
func TestBurstIsSharedByDispatchers(t *testing.T) {
	t.Parallel()
	namespace := redistest.Namespace(t)
	set, err := policy.NewSet(map[string]policy.Policy{
		"fast": {Backoff: ms(0), TTR: notify.Duration(30 * time.Second), Timeout: notify.Duration(10 * time.Second)},
	}, nil)
	require.NoError(t, err)
	bundle := func() *testBundle {
		st, err := store.New(&store.Config{Client: server.Client(t), Namespace: namespace, Shards: 1, Logger: heraldtest.Logger(t)})
		require.NoError(t, err)
		return &testBundle{store: st, policies: set}
	}
	var mu sync.Mutex
	made := make([]int, 3)
	for i := range made {
		rec := newRecorder(func(context.Context, *notify.Notification) error {
			mu.Lock()
			made[i]++
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
			return nil
		})
		bundle().start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec}, Concurrency: 8})
	}
	b := bundle()
	const count = 96
	b.enqueueMany(t, count, ms(0), 0)
	b.waitIdle(t, time.Minute)
	mu.Lock()
	defer mu.Unlock()
	for i, n := range made {
		require.GreaterOrEqual(t, n, count/3/2, "dispatcher %d made %d of %d attempts (all: %v)", i, n, count, made)
	}
}
