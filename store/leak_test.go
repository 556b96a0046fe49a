package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// TestNothingLeftBehind drives notifications through every way a life can
// end (succeeded, dead then purged, cancelled while scheduled, due and
// reserved (its attempt recorded after), replayed then succeeded, replaced, released, reaped and
// retried, imported dead), with and without order keys, in pull and push
// queues and to an endpoint with limits and health; once retention has
// passed and the sweep has run, the namespace holds no trace of any of
// them (requireNothingLeft).
func TestNothingLeftBehind(t *testing.T) {
	t.Parallel()
	onEachDeployment(t, func(t *testing.T, client redis.UniversalClient, shards int) {
		ctx := context.Background()
		b := setup(t, store.Config{Client: client, Shards: shards, Retention: time.Minute})
		hook := heraldtest.Channel(notify.ChannelWebhook, "https://example.com/hook")
		ep := &endpoint.Endpoint{URL: "https://example.com/ep", MaxInFlight: 4, Rate: 100, DisableAfter: notify.Duration(time.Hour)}
		enqueue := func(id string, opts ...heraldtest.NotificationOption) {
			t.Helper()
			opts = append([]heraldtest.NotificationOption{heraldtest.Backoff(0, time.Second, time.Second)}, opts...)
			b.enqueue(t, heraldtest.Notification(t, id, b.clock.Now(), opts...))
		}
		held := map[string]*notify.Notification{}
		reserve := func() {
			t.Helper()
			for _, q := range []string{store.PullQueue("jobs"), store.PullQueue("other"), store.QueuePush} {
				items, _, err := b.store.Reserve(ctx, q, heraldtest.AllShards(t, b.store), store.MaxReserve)
				require.NoError(t, err)
				for _, n := range items {
					held[n.ID] = n
				}
			}
		}
		finish := func(id string, action notify.Action) {
			t.Helper()
			n := held[id]
			require.NotNil(t, n, "%s is not reserved", id)
			delete(held, id)
			if n.Endpoint != "" {
				lease := n.ID + "|" + n.Receipt
				ok, _, err := b.store.Acquire(ctx, n.Endpoint, ep, lease, time.Duration(n.TTR))
				require.NoError(t, err)
				require.True(t, ok)
				require.NoError(t, b.store.Release(ctx, n.Endpoint, lease))
				if action == notify.ActionAck {
					require.NoError(t, b.store.EndpointSucceeded(ctx, n.Endpoint))
				} else {
					_, err := b.store.EndpointFailed(ctx, n.Endpoint, time.Duration(ep.DisableAfter))
					require.NoError(t, err)
				}
			}
			b.finishOne(t, b.finish(action, n, b.clock.Now()))
		}

		enqueue("ok")
		enqueue("ok-push", hook, heraldtest.Topic("hooks"))
		enqueue("ok-ep", heraldtest.Endpoint("ep"), heraldtest.Topic("hooks"))
		enqueue("dead")
		enqueue("dead-ep", heraldtest.Endpoint("ep"), heraldtest.Topic("hooks"))
		enqueue("cancel-later", heraldtest.Delay(time.Hour))
		enqueue("cancel-due")
		enqueue("cancel-due-push", hook, heraldtest.Topic("hooks"))
		enqueue("cancel-reserved")
		enqueue("replay")
		enqueue("replace", heraldtest.Delay(time.Hour))
		enqueue("release")
		enqueue("reap", heraldtest.Topic("other"))
		enqueue("k1", heraldtest.OrderKey("trade"))
		enqueue("k2", heraldtest.OrderKey("trade"))
		enqueue("k3", heraldtest.OrderKey("trade"))
		enqueue("k4", heraldtest.OrderKey("trade"))
		enqueue("k-push", hook, heraldtest.Topic("hooks"), heraldtest.OrderKey("trade"))
		enqueue("k-alone", heraldtest.OrderKey("lonely"))
		_, status, err := b.store.Enqueue(ctx, heraldtest.Notification(t, "replace", b.clock.Now(), heraldtest.Payload(`{"v":2}`)), true)
		require.NoError(t, err)
		require.Equal(t, store.Replaced, status)
		_, err = b.store.Cancel(ctx, "cancel-later")
		require.NoError(t, err)
		_, err = b.store.Cancel(ctx, "cancel-due")
		require.NoError(t, err)
		_, err = b.store.Cancel(ctx, "cancel-due-push")
		require.NoError(t, err)
		_, err = b.store.Cancel(ctx, "k3")
		require.NoError(t, err, "cancelled while waiting in its key's line")
		imported := heraldtest.Notification(t, "imported", b.clock.Now())
		_, err = b.store.EnqueueBatch(ctx, []store.EnqueueRequest{{Notification: imported,
			Dead: &notify.Attempt{StartedAt: b.clock.Now(), FinishedAt: b.clock.Now(), Outcome: notify.OutcomePermanent}}})
		require.NoError(t, err)
		require.NoError(t, b.store.Pause(ctx, store.PauseEndpoint, "ep"))

		reserve()
		require.NoError(t, b.store.Pause(ctx, store.PauseTopic, "jobs"))
		_, err = b.store.Resume(ctx, store.PauseTopic, "jobs")
		require.NoError(t, err)
		_, err = b.store.Resume(ctx, store.PauseEndpoint, "ep")
		require.NoError(t, err)
		finish("ok", notify.ActionAck)
		finish("ok-push", notify.ActionAck)
		finish("ok-ep", notify.ActionRetry)
		finish("dead", notify.ActionDead)
		finish("dead-ep", notify.ActionDead)
		_, err = b.store.Cancel(ctx, "cancel-reserved")
		require.NoError(t, err)
		errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, held["cancel-reserved"], time.Time{})})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], notify.ErrCancelledMeanwhile, "its attempt is recorded")
		delete(held, "cancel-reserved")
		finish("replay", notify.ActionDead)
		finish("replace", notify.ActionAck)
		finish("release", notify.ActionRelease)
		finish("k1", notify.ActionAck)
		finish("k-alone", notify.ActionRetry)
		b.clock.Advance(10 * time.Minute) // reap's ttr has passed
		expired, err := b.store.Expired(ctx, 0, 100)
		require.NoError(t, err)
		for _, n := range expired {
			f := b.finish(notify.ActionRetry, n, b.clock.Now())
			f.Attempt.Outcome = notify.OutcomeTTRExpired
			b.finishOne(t, f)
			delete(held, n.ID)
		}
		require.Empty(t, held, "every reservation has ended")
		_, _, err = b.store.Replay(ctx, store.DeadFilter{IDs: []string{"replay"}}, store.DeadOptions{})
		require.NoError(t, err)

		reserve()
		finish("ok-ep", notify.ActionAck)
		finish("replay", notify.ActionAck)
		finish("release", notify.ActionAck)
		finish("reap", notify.ActionAck)
		finish("k2", notify.ActionDead)
		finish("k-alone", notify.ActionAck)
		reserve()
		finish("k4", notify.ActionAck)
		reserve()
		finish("k-push", notify.ActionAck)
		require.Empty(t, held)
		_, _, err = b.store.Purge(ctx, store.DeadFilter{Topic: "jobs"}, store.DeadOptions{})
		require.NoError(t, err)
		_, _, err = b.store.Purge(ctx, store.DeadFilter{IDs: []string{"dead-ep"}}, store.DeadOptions{})
		require.NoError(t, err)

		b.clock.Advance(time.Minute)
		for more := true; more; {
			_, more, err = b.store.Sweep(ctx, 3)
			require.NoError(t, err)
		}
		requireNothingLeft(t, client, b.store)
	})
}

// onEachDeployment runs test in parallel subtests on one Redis, with one
// shard and with four, and on a 3-master Cluster with four shards, where
// every script call must touch one slot.
func onEachDeployment(t *testing.T, test func(t *testing.T, client redis.UniversalClient, shards int)) {
	t.Helper()
	for _, tt := range []struct {
		name    string
		shards  int
		cluster bool
	}{{"Shards1", 1, false}, {"Shards4", 4, false}, {"Cluster", 4, true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var client redis.UniversalClient = server.Client(t)
			if tt.cluster {
				client = redistest.StartCluster(t, 3).Client(t)
			}
			test(t, client, tt.shards)
		})
	}
}

// requireNothingLeft fails t unless st's namespace holds nothing of any
// notification: only the shard count, statistics whose gauges are zero,
// endpoints' health, and activity hashes, endpoint rate slots and
// dispatchers' records of their starts that expire, and nothing else.
func requireNothingLeft(t *testing.T, client redis.UniversalClient, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	ns := st.Namespace()
	var left []string
	// The hot paths count in shard 0 on a single Redis, the others in the
	// notification's shard: only the sums must be zero.
	gauges := map[string]int64{}
	var mu sync.Mutex // guards all: ForEachMaster scans the masters at once
	var all []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, ns+":*", 100).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			all = append(all, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		require.NoError(t, cc.ForEachMaster(ctx, scan))
	} else {
		require.NoError(t, scan(ctx, client.(*redis.Client)))
	}
	for _, key := range all {
		suffix := strings.TrimPrefix(key, ns+":")
		if i := strings.Index(suffix, "}:"); i >= 0 {
			suffix = suffix[i+2:]
		}
		ttl, err := client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		switch {
		case key == ns+":meta", suffix == "health":
			// The endpoint's, not a notification's: whether its last
			// attempts failed.
		case suffix == "stats":
			fields, err := client.HGetAll(ctx, key).Result()
			require.NoError(t, err)
			for f, v := range fields {
				if !strings.HasSuffix(f, "_total") {
					n, err := strconv.ParseInt(v, 10, 64)
					require.NoError(t, err)
					gauges[f] += n
				}
			}
		case strings.HasPrefix(suffix, "act:"), suffix == "rate", strings.HasPrefix(suffix, "started:"):
			// A dispatcher's record of its starts is one number a queue.
			if ttl <= 0 {
				left = append(left, fmt.Sprintf("%s without expiry", key))
			}
		default:
			left = append(left, fmt.Sprintf("%s (ttl %v): %s", key, ttl, describe(t, client, key)))
		}
	}
	for f, n := range gauges {
		if n != 0 {
			left = append(left, fmt.Sprintf("stats %s = %d", f, n))
		}
	}
	slices.Sort(left)
	require.Empty(t, left, "left behind once every notification ended and retention passed")
}

// describe returns what key holds, for a failure message.
func describe(t *testing.T, client redis.UniversalClient, key string) string {
	t.Helper()
	ctx := context.Background()
	var v any
	var err error
	switch typ, _ := client.Type(ctx, key).Result(); typ {
	case "hash":
		v, err = client.HGetAll(ctx, key).Result()
	case "zset":
		v, err = client.ZRangeWithScores(ctx, key, 0, -1).Result()
	case "list":
		v, err = client.LRange(ctx, key, 0, -1).Result()
	default:
		v, err = client.Dump(ctx, key).Result()
	}
	require.NoError(t, err)
	return fmt.Sprint(v)
}

// TestActivityKeysExpire: the per-minute activity hashes expire however a
// minute's finishes begin. A store sets a minute's expiry with its first
// finish in that minute that counts an attempt; one that counted none (a
// notification given back, as at an endpoint's limit or a pause, or a
// finish that came too late) must not use that turn up, nor keep a finish
// running beside it from setting the expiry, or the hash is kept for ever.
func TestActivityKeysExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// finishFunc finishes both items, as a minute's first finishes.
		finishFunc func(t *testing.T, b *testBundle, between *afterPipeline, items []*notify.Notification)
	}{
		{name: "Release", finishFunc: func(t *testing.T, b *testBundle, _ *afterPipeline, items []*notify.Notification) {
			b.finishOne(t, store.Finish{Notification: items[0], Action: notify.ActionRelease, NextAt: b.clock.Now().Add(time.Hour)})
			b.finishOne(t, b.finish(notify.ActionAck, items[1], time.Time{}))
		}},
		{name: "Stale", finishFunc: func(t *testing.T, b *testBundle, _ *afterPipeline, items []*notify.Notification) {
			_, err := b.store.Cancel(ctx, items[0].ID)
			require.NoError(t, err)
			errs, err := b.store.Finish(ctx, []store.Finish{b.finish(notify.ActionAck, items[0], time.Time{})})
			require.NoError(t, err)
			require.ErrorIs(t, errs[0], notify.ErrStaleReceipt)
			b.finishOne(t, b.finish(notify.ActionAck, items[1], time.Time{}))
		}},
		{name: "AckDuringARelease", finishFunc: func(t *testing.T, b *testBundle, between *afterPipeline, items []*notify.Notification) {
			between.arm(func() { b.finishOne(t, b.finish(notify.ActionAck, items[1], time.Time{})) })
			b.finishOne(t, store.Finish{Notification: items[0], Action: notify.ActionRelease, NextAt: b.clock.Now().Add(time.Hour)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, between := setupHooked(t, store.Config{})
			for _, id := range []string{"a", "b"} {
				b.enqueue(t, b.newNotification(t, id, 0, 0, time.Second))
			}
			items := b.reserveAll(t)
			require.Len(t, items, 2)
			b.clock.Advance(time.Minute) // a minute no finish has written yet
			tc.finishFunc(t, b, between, items)

			client := server.Client(t)
			var acts int
			iter := client.Scan(ctx, 0, b.store.Namespace()+":*:act:*", 100).Iterator()
			for iter.Next(ctx) {
				acts++
				ttl, err := client.PTTL(ctx, iter.Val()).Result()
				require.NoError(t, err)
				require.Positive(t, ttl, "%s is kept for ever", iter.Val())
			}
			require.NoError(t, iter.Err())
			require.Equal(t, 1, acts, "the ack counted in one activity hash")
		})
	}
}

// TestNothingLeftByDispatchers runs a dispatcher over webhooks to endpoints
// with limits and a disable_after, some failing before they succeed, some
// dying, some under a pause, and checks, once every one has ended, the dead
// are purged and the dispatcher's sweep has passed their retention, that
// nothing of theirs is left (requireNothingLeft).
func TestNothingLeftByDispatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := server.Client(t)
	st, err := store.New(&store.Config{Client: client, Namespace: redistest.Namespace(t), Shards: 4,
		Retention: 100 * time.Millisecond, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	ms := func(vals ...int) []notify.Duration {
		out := make([]notify.Duration, len(vals))
		for i, v := range vals {
			out[i] = notify.Duration(time.Duration(v) * time.Millisecond)
		}
		return out
	}
	set, err := policy.NewSet(map[string]policy.Policy{
		"fast": {Backoff: ms(0, 0, 10, 10), TTR: notify.Duration(2 * time.Second), Timeout: notify.Duration(time.Second)},
	}, nil)
	require.NoError(t, err)
	eps := endpoint.Map{
		"narrow": {URL: "https://narrow.example", MaxInFlight: 2, Rate: 200, DisableAfter: notify.Duration(time.Hour)},
		"wide":   {URL: "https://wide.example", DisableAfter: notify.Duration(time.Hour)},
	}
	var mu sync.Mutex
	tries := map[string]int{}
	send := notify.SenderFunc(func(_ context.Context, n *notify.Notification) (notify.Response, error) {
		mu.Lock()
		tries[n.ID]++
		try := tries[n.ID]
		mu.Unlock()
		switch {
		case strings.HasPrefix(n.ID, "dead"):
			return notify.Response{}, notify.Permanent(errors.New("410 gone"))
		case strings.HasPrefix(n.ID, "flaky") && try < 3:
			return notify.Response{}, notify.Retry(errors.New("503"), 0)
		}
		return notify.Response{}, nil
	})
	d, err := schedule.New(&schedule.Config{Store: st, Senders: map[string]notify.Sender{notify.ChannelWebhook: send},
		PoliciesFunc: func() *policy.Set { return set }, Endpoints: eps, ReapInterval: 20 * time.Millisecond,
		ReapGrace: 10 * time.Millisecond, ShutdownTimeout: time.Second, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, st.Pause(ctx, store.PauseEndpoint, "wide"))
	require.NoError(t, d.Start(ctx))
	t.Cleanup(d.Stop)

	var ids []string
	for i := range 60 {
		id := []string{"ok", "flaky", "dead"}[i%3] + fmt.Sprint(i)
		req := &notify.Request{ID: id, Topic: "orders", Endpoint: []string{"narrow", "wide"}[i%2],
			Channel: notify.ChannelWebhook, Payload: json.RawMessage(`{}`), Policy: "fast"}
		if i%4 == 0 {
			req.OrderKey = fmt.Sprint("trade", i%8)
		}
		n, err := set.Resolve(req, time.Now(), 0)
		require.NoError(t, err)
		_, _, err = st.Enqueue(ctx, n, false)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	time.Sleep(50 * time.Millisecond) // a few parked under the pause first
	_, err = st.Resume(ctx, store.PauseEndpoint, "wide")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			n, err := st.Get(ctx, id)
			if err == nil && (n.State == notify.StateScheduled || n.State == notify.StateReserved) {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "every notification ended")
	_, _, err = st.Purge(ctx, store.DeadFilter{Topic: "orders"}, store.DeadOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if _, err := st.Get(ctx, id); err == nil {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "the sweep deleted every record")
	d.Stop()
	requireNothingLeft(t, client, st)
}
