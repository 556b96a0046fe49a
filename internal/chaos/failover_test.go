package chaos_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
)

// TestSentinelFailover runs an API and a dispatcher as herald processes on
// a Sentinel-watched master with one replica, enqueues steadily, and
// SIGKILLs the master 300ms after cutting its replica's link (the replica
// is behind, as after a network hiccup). Three Sentinels promote the
// replica; the API and the dispatcher find it by themselves. It measures
// how long after the kill the first enqueue is acknowledged and the first
// notification enqueued after the kill is delivered, and counts the
// acknowledged notifications never delivered and those whose record the new
// master lacks: with redis.wait_replicas 0 the ones acknowledged in the last
// 300ms are missing (delivered from the old master, but Herald no longer
// knows them), with 1 there must be none of either.
//
// With wait_replicas 1 the promoted master has no replica left to
// acknowledge writes: enqueues answer 503 until a new replica has synced,
// which the test starts once the failover is done, as an operator or a
// supervisor would. (Restarting the old master instead takes about 15s
// more: a Sentinel waits 8s before turning a returning master into a
// replica.)
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	for _, waitReplicas := range []int{0, 1} {
		t.Run(fmt.Sprintf("WaitReplicas%d", waitReplicas), func(t *testing.T) {
			t.Parallel()
			f := runFailover(t, waitReplicas)
			t.Logf("wait_replicas %d: failover done %s after the kill; first acknowledged enqueue %s after, first delivery of a later enqueue %s after; "+
				"%d acknowledged (%d before the kill), %d never delivered, %d records missing on the new master, %d enqueues refused or failed meanwhile",
				waitReplicas, f.promoted, f.apiBack, f.dispatchBack, f.acked, f.ackedBefore, f.lost, f.missing, f.refused)
			if waitReplicas > 0 {
				require.Zero(t, f.lost, "acknowledged notifications never delivered with wait_replicas %d: %v", waitReplicas, f.lostIDs)
				require.Zero(t, f.missing, "acknowledged notifications missing on the new master with wait_replicas %d", waitReplicas)
			}
		})
	}
}

// lagBeforeKill is how long before the master dies its replica's link is
// cut.
const lagBeforeKill = 300 * time.Millisecond

// failover is what runFailover measured.
type failover struct {
	promoted, apiBack, dispatchBack time.Duration
	acked, ackedBefore, lost        int
	missing                         int
	refused                         int64
	lostIDs                         []string
}

func runFailover(t *testing.T, waitReplicas int) failover {
	master := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplica(t, master)
	sentinels := redistest.StartSentinels(t, master, 3, 1, redistest.SentinelOptions{MasterName: "herald"})
	config := writeConfig(t, fmt.Sprintf("{mode: sentinel, master_name: herald, addrs: [%s], wait_replicas: %d, wait_timeout: 500ms}",
		quoted(sentinels.Addrs()), waitReplicas))
	rcv := startReceiver(t, 0, 0)
	api := startHerald(t, "api", config, "api")
	startHerald(t, "dispatcher", config, "dispatcher")
	client := newAPIClient(api.url)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu      sync.Mutex
		ackedAt = map[string]time.Time{}
		sentAt  = map[string]time.Time{}
		seq     atomic.Int64
		refused atomic.Int64
		wg      sync.WaitGroup
	)
	// Four enqueuers, each retrying a notification until acknowledged.
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(seq.Add(1))
				id := fmt.Sprintf("f-%06d", i)
				sent := time.Now() // the first try: a 503 may still have stored it
				for ctx.Err() == nil {
					status, err := client.enqueue(ctx, id, rcv.srv.URL+"/hook", i)
					if err == nil && acked(status) {
						mu.Lock()
						ackedAt[id], sentAt[id] = time.Now(), sent
						mu.Unlock()
						break
					}
					refused.Add(1)
					sleepCtx(ctx, 20*time.Millisecond)
				}
				sleepCtx(ctx, 5*time.Millisecond)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	sleepCtx(ctx, 2*time.Second)
	mu.Lock()
	ackedBefore := len(ackedAt)
	mu.Unlock()
	require.Positive(t, ackedBefore, "enqueues before the kill")
	// The replica falls behind: its link is cut a moment before the master
	// dies, and the master takes no new connection, so it cannot come back;
	// writes acknowledged meanwhile reach only the master, as on a network
	// hiccup.
	mc := master.Client(t)
	require.NoError(t, mc.ConfigSet(ctx, "maxclients", "1").Err())
	require.NoError(t, mc.ClientKillByFilter(ctx, "TYPE", "replica").Err())
	sleepCtx(ctx, lagBeforeKill)
	killed := time.Now()
	master.Kill()

	var f failover
	f.ackedBefore = ackedBefore
	deadline := killed.Add(30 * time.Second)
	for {
		addr, err := sentinels.Master(ctx)
		if err == nil && addr == replica.Addr {
			break
		}
		require.True(t, time.Now().Before(deadline), "no failover within 30s (master %s, %v)", addr, err)
		time.Sleep(20 * time.Millisecond)
	}
	f.promoted = time.Since(killed)
	if waitReplicas > 0 {
		redistest.StartReplica(t, replica)
	}

	// Recovered once an enqueue sent after the kill is acknowledged and
	// delivered.
	for f.apiBack == 0 || f.dispatchBack == 0 {
		require.True(t, time.Now().Before(deadline), "not recovered within 30s of the kill: api %s, dispatch %s", f.apiBack, f.dispatchBack)
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		for id, at := range ackedAt {
			if sentAt[id].Before(killed) {
				continue
			}
			if back := at.Sub(killed); f.apiBack == 0 || back < f.apiBack {
				f.apiBack = back
			}
			if got, ok := rcv.delivered(id); ok {
				if back := got.Sub(killed); f.dispatchBack == 0 || back < f.dispatchBack {
					f.dispatchBack = back
				}
			}
		}
		mu.Unlock()
	}
	sleepCtx(ctx, time.Second) // a little steady traffic on the new master
	cancel()
	wg.Wait()

	// Every acknowledged notification is delivered, unless it was lost.
	mu.Lock()
	defer mu.Unlock()
	f.acked, f.refused = len(ackedAt), refused.Load()
	drain := time.Now().Add(15 * time.Second)
	for {
		f.lostIDs = f.lostIDs[:0]
		for id := range ackedAt {
			if _, ok := rcv.delivered(id); !ok {
				f.lostIDs = append(f.lostIDs, id)
			}
		}
		if len(f.lostIDs) == 0 || time.Now().After(drain) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.lost = len(f.lostIDs)
	// A record missing on the new master was acknowledged by the old one
	// only; delivered or not, Herald no longer knows it.
	ids := make([]string, 0, len(ackedAt))
	for id := range ackedAt {
		ids = append(ids, id)
	}
	var missing atomic.Int64
	inParallel(len(ids), func(i int) {
		status, err := client.get(context.Background(), ids[i], nil)
		if err == nil && status == http.StatusNotFound {
			missing.Add(1)
		}
	})
	f.missing = int(missing.Load())
	f.promoted, f.apiBack, f.dispatchBack = f.promoted.Round(time.Millisecond), f.apiBack.Round(time.Millisecond), f.dispatchBack.Round(time.Millisecond)
	return f
}

func quoted(addrs []string) string {
	q := make([]string, len(addrs))
	for i, a := range addrs {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
}
