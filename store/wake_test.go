package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/store"
)

// TestSubscription: a subscriber hears the cancel of a reservation before
// Heard says it has heard everything published until store.HeardWithin
// ago, which is what lets a dispatcher start a notification that waited
// for a worker. Once its connection is lost, Heard is false for the
// connection it had, whose messages meanwhile were lost, and true again
// for the next one.
func TestSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	b := setup(t, store.Config{Client: srv.Client(t)})
	sub, cancels := subscribeToCancels(t, b.store)
	<-sub.Ready
	mark := sub.Mark()
	require.NotZero(t, mark)

	b.enqueue(t, b.newNotification(t, "a", 0, 0))
	n := b.reserveAll(t)[0]
	_, err := b.store.Cancel(ctx, "a")
	require.NoError(t, err)
	time.Sleep(store.HeardWithin)
	require.True(t, sub.Heard(ctx, mark, 5*time.Second), "nothing heard")
	require.Equal(t, map[string]string{"a": n.Receipt}, cancels(), "the cancel, heard before Heard said so")

	require.NoError(t, srv.Client(t).ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	require.Eventually(t, func() bool { return !sub.Heard(ctx, mark, 0) }, 5*time.Second, time.Millisecond,
		"still heard on a connection that was lost")
	require.Eventually(t, func() bool {
		m := sub.Mark()
		return m != 0 && m != mark && sub.Heard(ctx, m, 0)
	}, 10*time.Second, 10*time.Millisecond, "nothing heard on the next connection")
	require.False(t, sub.Heard(ctx, mark, 0), "the lost connection stays lost")
}

// TestSubscriptionOnEachDeployment: on one Redis and on a Cluster, where
// the subscription lives on the node of its channel's slot and the shards
// on all three, a subscriber hears the wake-up of every shard an enqueue
// makes due, the cancel of every reservation, with its receipt, and the
// answers to its PINGs, so that Heard says it has heard.
func TestSubscriptionOnEachDeployment(t *testing.T) {
	t.Parallel()
	onEachDeployment(t, func(t *testing.T, client redis.UniversalClient, shards int) {
		ctx := context.Background()
		b := setup(t, store.Config{Client: client, Shards: shards})
		sub, cancels := subscribeToCancels(t, b.store)
		select {
		case <-sub.Ready:
		case <-time.After(10 * time.Second):
			t.Fatal("the subscription was not confirmed within 10s")
		}
		mark := sub.Mark()
		require.NotZero(t, mark)
		require.True(t, sub.Heard(ctx, mark, 5*time.Second), "no PING answered")

		for i := range 16 {
			b.enqueue(t, b.newNotification(t, fmt.Sprint("n", i), 0, 0))
		}
		woken := map[int]bool{}
		deadline := time.After(5 * time.Second)
		for len(woken) < shards {
			select {
			case w := <-sub.Wakes:
				require.Equal(t, store.PullQueue("jobs"), w.Queue)
				woken[w.Shard] = true
			case <-deadline:
				t.Fatalf("the wake-ups of shards %v only, of %d", woken, shards)
			}
		}
		items := b.reserveAll(t)
		require.Len(t, items, 16)
		want := map[string]string{}
		for _, n := range items {
			_, err := b.store.Cancel(ctx, n.ID)
			require.NoError(t, err)
			want[n.ID] = n.Receipt
		}
		time.Sleep(store.HeardWithin)
		require.True(t, sub.Heard(ctx, mark, 5*time.Second), "nothing heard")
		require.Equal(t, want, cancels(), "the cancels, heard before Heard said so")
	})
}

// subscribeToCancels subscribes to st until the test ends; cancels returns
// the cancelled reservations heard so far, receipt by id.
func subscribeToCancels(t *testing.T, st *store.Store) (_ *store.Subscription, cancels func() map[string]string) {
	t.Helper()
	var mu sync.Mutex
	heard := map[string]string{}
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	sub := st.Subscribe(ctx, func(id, receipt string) {
		mu.Lock()
		defer mu.Unlock()
		heard[id] = receipt
	})
	return sub, func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(heard)
	}
}

// TestSubscriptionEndsWithItsContext: once its context ends, a
// subscription closes Wakes and leaves no goroutine behind (its receiving
// loop, and the one that PINGs), whether Redis answers, has gone (killed),
// or is frozen (SIGSTOP), its connection open and silent.
func TestSubscriptionEndsWithItsContext(t *testing.T) {
	// Not parallel: it counts the goroutines of every subscription.
	for _, tc := range []struct {
		name   string
		outage func(srv *redistest.Server)
	}{
		{"RedisUp", func(*redistest.Server) {}},
		{"RedisKilled", func(srv *redistest.Server) { srv.Kill() }},
		{"RedisFrozen", func(srv *redistest.Server) { srv.Pause() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := subscriptionGoroutines()
			srv := redistest.Start(t, redistest.Options{})
			t.Cleanup(srv.Resume)
			st, err := store.New(&store.Config{Client: srv.Client(t), Namespace: redistest.Namespace(t), Logger: heraldtest.Logger(t)})
			require.NoError(t, err)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			sub := st.Subscribe(ctx, func(string, string) {})
			<-sub.Ready
			require.True(t, sub.Heard(ctx, sub.Mark(), 5*time.Second), "no PING answered")
			tc.outage(srv)
			time.Sleep(store.HeardWithin + 100*time.Millisecond)

			stop()
			requireEnded(t, sub, before, "the end of the context")
		})
	}
}

// subscriptionGoroutines counts the goroutines of subscriptions.
func subscriptionGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "store.(*Subscription).ping") || strings.Contains(g, "store.(*Store).Subscribe.func") {
			count++
		}
	}
	return count
}

// TestSubscriptionReconnectedByItsPing: go-redis reconnects a subscription
// inside a PING whose write failed, where the receiving loop, busy with a
// message, never sees a read fail. A cancel published before the new
// connection subscribed is lost, and Heard must then not say that the
// connection had heard it: the PINGs the new connection answers do not
// count for the old one.
func TestSubscriptionReconnectedByItsPing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &brittleConn{holding: make(chan struct{}), redialling: make(chan struct{})}
	opts := server.Options()
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if c.slowDial.CompareAndSwap(true, false) {
			close(c.redialling)
			time.Sleep(500 * time.Millisecond)
		}
		conn, err := net.Dial(network, addr)
		if err != nil {
			return nil, err
		}
		return &brittle{Conn: conn, c: c}, nil
	}
	rc := redis.NewClient(opts)
	t.Cleanup(func() { _ = rc.Close() })
	ns := redistest.Namespace(t)
	subStore, err := store.New(&store.Config{Client: rc, Namespace: ns, Shards: 1, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	st, err := store.New(&store.Config{Client: server.Client(t), Namespace: ns, Shards: 1})
	require.NoError(t, err)
	sub, cancels := subscribeToCancels(t, subStore)
	<-sub.Ready
	mark := sub.Mark()
	require.True(t, sub.Heard(ctx, mark, 5*time.Second), "no PING answered")

	_, _, err = st.Enqueue(ctx, heraldtest.Notification(t, "a", time.Now()), false)
	require.NoError(t, err)
	items, _, err := st.Reserve(ctx, store.PullQueue("jobs"), []int{0}, 10)
	require.NoError(t, err)
	require.Len(t, items, 1)

	c.holdRead.Store(true)
	_, _, err = st.Enqueue(ctx, heraldtest.Notification(t, "b", time.Now()), false) // a wake-up
	require.NoError(t, err)
	<-c.holding // the receiving loop is busy with it
	c.slowDial.Store(true)
	c.failPing.Store(true)
	<-c.redialling // the connection is closed, the next not yet subscribed
	time.Sleep(100 * time.Millisecond)
	_, err = st.Cancel(ctx, "a")
	require.NoError(t, err)
	cancelled := time.Now()

	time.Sleep(store.HeardWithin + time.Second)
	if sub.Heard(ctx, mark, 2*time.Second) && len(cancels()) == 0 {
		t.Fatalf("Heard on connection %d (now %d) says everything published until %v ago was heard, %v after a cancel it never heard",
			mark, sub.Mark(), store.HeardWithin, time.Since(cancelled))
	}
	require.NotEqual(t, mark, sub.Mark(), "a new connection")
}

// brittleConn sets how the connections of TestSubscriptionReconnectedByItsPing
// fail: a read that brings a pub/sub message is held a second while
// holdRead is set, a PING's write fails while failPing is set, and a dial
// is half a second late while slowDial is set; each once.
type brittleConn struct {
	holdRead, failPing, slowDial atomic.Bool
	holding, redialling          chan struct{}
}

// brittle is a connection that fails as its brittleConn says.
type brittle struct {
	net.Conn
	c *brittleConn
}

func (b *brittle) Read(p []byte) (int, error) {
	n, err := b.Conn.Read(p)
	if bytes.Contains(p[:n], []byte("message\r\n")) && b.c.holdRead.CompareAndSwap(true, false) {
		close(b.c.holding)
		time.Sleep(time.Second)
	}
	return n, err
}

func (b *brittle) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("ping")) && b.c.failPing.CompareAndSwap(true, false) {
		return 0, errors.New("write: broken pipe")
	}
	return b.Conn.Write(p)
}

// TestSubscriptionEndsWithItsClient: a subscription whose Redis client is
// closed before its context ends (the caller closed them in that order)
// ends too, rather than retry once a second for as long as the process
// lives: Wakes closes and its goroutines are gone.
func TestSubscriptionEndsWithItsClient(t *testing.T) {
	// Not parallel: it counts the goroutines of every subscription.
	before := subscriptionGoroutines()
	rdb := redis.NewClient(server.Options())
	st, err := store.New(&store.Config{Client: rdb, Namespace: redistest.Namespace(t), Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sub := st.Subscribe(ctx, func(string, string) {})
	<-sub.Ready
	require.NoError(t, rdb.Close())
	requireEnded(t, sub, before, "the client's Close")
}

// requireEnded requires that sub closes Wakes within 5 s of what ended it,
// and that no more subscription goroutines are left than before it began.
func requireEnded(t *testing.T, sub *store.Subscription, before int, what string) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		for range sub.Wakes {
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("Wakes not closed within 5s of %s", what)
	}
	require.Eventually(t, func() bool { return subscriptionGoroutines() <= before }, 5*time.Second, 10*time.Millisecond,
		"the subscription's goroutines outlive %s", what)
}
