package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
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

// lineReceiver is a merchant that checks ordered delivery: per order key it
// records the sequence numbers it accepted, and counts any moment two
// notifications of one key were in flight at once. It fails 30% of first
// attempts.
type lineReceiver struct {
	mu       sync.Mutex
	accepted map[string][]int
	inFlight map[string]int
	overlaps int
}

func newLineReceiver() *lineReceiver {
	return &lineReceiver{accepted: map[string][]int{}, inFlight: map[string]int{}}
}

func (r *lineReceiver) Send(_ context.Context, n *notify.Notification) (notify.Response, error) {
	key := n.OrderKey
	r.mu.Lock()
	r.inFlight[key]++
	if key != "" && r.inFlight[key] > 1 {
		r.overlaps++
	}
	r.mu.Unlock()
	time.Sleep(time.Duration(seqOf(n)%3) * time.Millisecond) // some work, of varying length
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight[key]--
	h := fnv.New32a()
	_, _ = h.Write([]byte(n.ID))
	if n.Attempts == 0 && h.Sum32()%10 < 3 {
		return notify.Response{StatusCode: 503}, errors.New("503 busy")
	}
	r.accepted[key] = append(r.accepted[key], seqOf(n))
	return notify.Response{StatusCode: 200}, nil
}

func seqOf(n *notify.Notification) int {
	_, seq, _ := strings.Cut(n.ID, ".")
	v, _ := strconv.Atoi(seq)
	return v
}

// enqueueLines enqueues keys x perKey notifications "k<key>.<seq>" with
// order key "k<key>", interleaved across keys, in batches.
func enqueueLines(t *testing.T, st *store.Store, set *policy.Set, keys, perKey int) {
	t.Helper()
	var reqs []store.EnqueueRequest
	flush := func() {
		res, err := st.EnqueueBatch(context.Background(), reqs)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
		reqs = reqs[:0]
	}
	for seq := range perKey {
		for k := range keys {
			n, err := set.Resolve(&notify.Request{ID: fmt.Sprintf("k%d.%d", k, seq), Topic: "trades",
				Channel: notify.ChannelWebhook, Target: "https://merchant.test/notify", OrderKey: fmt.Sprintf("k%d", k),
				Policy: "fast"}, time.Now(), 0)
			require.NoError(t, err)
			reqs = append(reqs, store.EnqueueRequest{Notification: n})
			if len(reqs) == store.MaxBatch {
				flush()
			}
		}
	}
	if len(reqs) > 0 {
		flush()
	}
}

// runLines delivers 200 keys x 20 notifications through three dispatchers
// and checks that each key's deliveries arrived in enqueue order, one at a
// time.
func runLines(t *testing.T, newStore func() *store.Store) {
	t.Helper()
	const keys, perKey = 200, 20
	set, err := policy.NewSet(map[string]policy.Policy{"fast": {Backoff: ms(0, 5, 5, 5)}}, nil)
	require.NoError(t, err)
	st := newStore()
	enqueueLines(t, st, set, keys, perKey)
	rcv := newLineReceiver()
	for range 3 {
		d, err := schedule.New(&schedule.Config{Store: newStore(), Senders: map[string]notify.Sender{notify.ChannelWebhook: rcv},
			PoliciesFunc: func() *policy.Set { return set }, Logger: heraldtest.Logger(t), Concurrency: 32,
			ReapInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, d.Start(context.Background()))
		t.Cleanup(d.Stop)
	}
	require.Eventually(t, func() bool {
		s, err := st.Stats(context.Background())
		return err == nil && s["trades"].SucceededTotal == keys*perKey
	}, 2*time.Minute, 20*time.Millisecond)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	require.Zero(t, rcv.overlaps, "two notifications of one key were in flight at once")
	want := make([]int, perKey)
	for i := range want {
		want[i] = i
	}
	for k := range keys {
		require.Equal(t, want, rcv.accepted[fmt.Sprintf("k%d", k)], "deliveries of key k%d", k)
	}
	heraldtest.RequireStatsMatch(t, st)
}

func TestOrderedDelivery(t *testing.T) {
	t.Parallel()
	ns := redistest.Namespace(t)
	runLines(t, func() *store.Store {
		st, err := store.New(&store.Config{Client: server.Client(t), Namespace: ns, Logger: heraldtest.Logger(t)})
		require.NoError(t, err)
		return st
	})
}

func TestOrderedDeliveryOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	runLines(t, func() *store.Store {
		st, err := store.New(&store.Config{Client: cluster.Client(t), Shards: 16, Logger: heraldtest.Logger(t)})
		require.NoError(t, err)
		return st
	})
}

// TestCrashedDispatcherHoldingLineHeads kills a dispatcher while it holds
// the head of every line: the lines move on once the heads' ttr ran out.
func TestCrashedDispatcherHoldingLineHeads(t *testing.T) {
	t.Parallel()
	const keys, perKey = 10, 3
	ns := redistest.Namespace(t)
	st, err := store.New(&store.Config{Client: server.Client(t), Namespace: ns, Shards: 8, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	// As in TestCrashedDispatcherWorkIsRetried, the ttr outlasts the
	// child's starts and their record on a loaded machine.
	set, err := policy.NewSet(map[string]policy.Policy{"fast": {Backoff: ms(0, 0, 0), TTR: notify.Duration(2 * time.Second)}}, nil)
	require.NoError(t, err)
	enqueueLines(t, st, set, keys, perKey)

	started := runCrashChild(t, ns, keys)
	require.Len(t, started, keys, "the child started each line's head, and nothing else")
	for id := range started {
		require.True(t, strings.HasSuffix(id, ".0"), "%s is not a head", id)
	}

	rcv := newLineReceiver()
	d, err := schedule.New(&schedule.Config{Store: st, Senders: map[string]notify.Sender{notify.ChannelWebhook: rcv},
		PoliciesFunc: func() *policy.Set { return set }, Logger: heraldtest.Logger(t), ReapInterval: 20 * time.Millisecond,
		ReapGrace: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(d.Stop)
	require.Eventually(t, func() bool {
		s, err := st.Stats(context.Background())
		return err == nil && s["trades"].SucceededTotal == keys*perKey
	}, 30*time.Second, 20*time.Millisecond)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for k := range keys {
		require.Equal(t, []int{0, 1, 2}, rcv.accepted[fmt.Sprintf("k%d", k)])
	}
	head, err := st.Get(context.Background(), "k0.0")
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeTTRExpired, head.History[0].Outcome)
}
