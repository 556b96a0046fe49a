package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
)

// TestRunScriptsRunsEachCallOnce mixes, in one pipeline, a script Redis has
// cached and one it has not (as when another client is still loading scripts
// on a cluster node): the cached call must run once, not again with the
// retry of the other, or its reservations would be lost until their ttr.
func TestRunScriptsRunsEachCallOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.Start(t, redistest.Options{}).Client(t)
	st, err := New(&Config{Client: client, Shards: 1})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		now := time.Now().UTC().Add(-time.Second)
		n := &notify.Notification{ID: id, Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{}`),
			Backoff: []notify.Duration{0}, TTR: notify.Duration(time.Minute), SendAt: now, Digest: id}
		_, _, err := st.Enqueue(ctx, n, false)
		require.NoError(t, err)
	}
	require.NoError(t, client.ScriptFlush(ctx).Err())
	require.NoError(t, reserveScript.Load(ctx, client).Err())

	k := st.keys
	reserve := &scriptCall{script: reserveScript,
		keys: []string{k.stats(0), k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0)},
		args: []any{ms(time.Now()), 1, "r."}}
	sweep := &scriptCall{script: sweepScript,
		keys: []string{k.finished(0), k.job(0), k.state(0), k.hist(0)}, args: []any{ms(time.Now()), 10}}
	require.NoError(t, st.runScripts(ctx, []*scriptCall{reserve, sweep}))
	require.NoError(t, sweep.cmd.Err(), "the uncached script was loaded and run")
	reserved, err := client.ZCard(ctx, k.reserved(0)).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), reserved, "the cached reserve ran exactly once")
}

// dumpAll returns every key of the namespace with its DUMP, the value's
// exact bytes.
func dumpAll(t *testing.T, st *Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := st.client.Scan(ctx, 0, st.keys.ns+":*", 100).Iterator()
	for iter.Next(ctx) {
		v, err := st.client.Dump(ctx, iter.Val()).Result()
		require.NoError(t, err)
		out[iter.Val()] = v
	}
	require.NoError(t, iter.Err())
	return out
}

// TestRejectedCallChangesNothing gives each batch script a batch whose
// last item is bad: the script refuses the call before its first write, so
// Redis is left byte for byte as it was, the good items included.
func TestRejectedCallChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.Start(t, redistest.Options{}).Client(t)
	st, err := New(&Config{Client: client, Shards: 1})
	require.NoError(t, err)
	now := time.Now().UTC().Add(-time.Second)
	for _, id := range []string{"a", "b", "c"} {
		n := &notify.Notification{ID: id, Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{}`),
			Backoff: []notify.Duration{0, 0}, TTR: notify.Duration(time.Minute), SendAt: now, Digest: id}
		_, _, err := st.Enqueue(ctx, n, false)
		require.NoError(t, err)
	}
	reserved, _, err := st.Reserve(ctx, PullQueue("jobs"), []int{0}, 2)
	require.NoError(t, err)
	require.Len(t, reserved, 2)
	before := dumpAll(t, st)

	k := st.keys
	good := &notify.Notification{ID: "d", Topic: "jobs", Channel: notify.ChannelPull, Backoff: []notify.Duration{0},
		TTR: notify.Duration(time.Minute), SendAt: now, Digest: "d"}
	enqueueKeys := []string{k.job(0), k.state(0), k.hist(0), k.stats(0), k.finished(0), k.deadAll(0), k.order(0), k.link(0),
		k.due(0, PullQueue("jobs")), k.dead(0, "jobs")}
	finishKeys := []string{k.stats(0), k.activity(0, 1), k.state(0), k.reserved(0), k.hist(0), k.finished(0), k.deadAll(0),
		k.order(0), k.link(0), k.due(0, PullQueue("jobs")), k.dead(0, "jobs")}
	tests := []struct {
		name   string
		script *redis.Script
		keys   []string
		args   []any
	}{
		{"EnqueueBadDue", enqueueScript, enqueueKeys, []any{ms(now), k.wake(), 0, 1, 1, 5000,
			"d", encodeContent(good, now), ms(now), 0, 1, 1, "jobs", "pull.jobs", 0, 0, 0, "", "",
			"e", encodeContent(good, now), "soon", 0, 1, 1, "jobs", "pull.jobs", 0, 0, 0, "", ""}},
		{"EnqueueBadKeyIndex", enqueueScript, enqueueKeys, []any{ms(now), k.wake(), 0, 1, 1, 5000,
			"d", encodeContent(good, now), ms(now), 0, 1, 1, "jobs", "pull.jobs", 0, 0, 0, "", "",
			"e", encodeContent(good, now), ms(now), 0, 2, 1, "jobs", "pull.jobs", 0, 0, 0, "", ""}},
		{"FinishBadAction", finishScript, finishKeys, []any{ms(now), 1000, k.wake(), 1, 1, 1, 60, 0, 2,
			reserved[0].ID, reserved[0].Receipt, "ack", "", 0, 0, "jobs", "{}", "", "", 0, 0,
			reserved[1].ID, reserved[1].Receipt, "explode", "", 0, 0, "jobs", "{}", "", "", 0, 0}},
		{"FinishRetryWithoutDue", finishScript, finishKeys, []any{ms(now), 1000, k.wake(), 1, 1, 1, 60, 0, 2,
			reserved[0].ID, reserved[0].Receipt, "ack", "", 0, 0, "jobs", "{}", "", "", 0, 0,
			reserved[1].ID, reserved[1].Receipt, "retry", "", 1, 0, "jobs", "{}", "", "", 0, 0}},
		{"EnqueueNewBadDue", enqueueNewScript, []string{k.stats(0), k.job(0), k.due(0, PullQueue("jobs")),
			k.job(0), k.due(0, PullQueue("jobs"))}, []any{ms(now), k.wake(), 5000,
			"d", encodeContent(good, now), ms(now), 0, "pull.jobs", "jobs",
			"e", encodeContent(good, now), "soon", 0, "pull.jobs", "jobs"}},
		{"EnqueueNewMissingKey", enqueueNewScript, []string{k.stats(0), k.job(0), k.due(0, PullQueue("jobs")), k.job(0)},
			[]any{ms(now), k.wake(), 5000, "d", encodeContent(good, now), ms(now), 0, "pull.jobs", "jobs",
				"e", encodeContent(good, now), ms(now), 0, "pull.jobs", "jobs"}},
		{"ReserveBadLimit", reserveScript, []string{k.stats(0), k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0),
			k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0)}, []any{ms(time.Now()), 1, "r.", 0, "s."}},
		{"FinishCountsDisagree", finishScript, finishKeys, []any{ms(now), 1000, k.wake(), 1, 1, 1, 60, 0, 1,
			reserved[0].ID, reserved[0].Receipt, "ack", "", 0, 0, "jobs", "{}", "", "", 0, 0,
			reserved[1].ID, reserved[1].Receipt, "ack", "", 0, 0, "jobs", "{}", "", "", 0, 0}},
	}
	for _, tc := range tests {
		_, err := st.runScript(ctx, tc.script, tc.keys, tc.args...)
		require.ErrorContains(t, err, "herald", tc.name)
		require.Equal(t, before, dumpAll(t, st), "%s changed Redis", tc.name)
	}
}

// TestQuarantine corrupts one stored notification: reservations and the
// reaper move it aside and carry on with the others.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.Start(t, redistest.Options{}).Client(t)
	st, err := New(&Config{Client: client, Shards: 1})
	require.NoError(t, err)
	now := time.Now().UTC().Add(-time.Second)
	for _, id := range []string{"a", "bad", "c", "late-bad"} {
		n := &notify.Notification{ID: id, Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{}`),
			Backoff: []notify.Duration{0}, TTR: notify.Duration(time.Millisecond), SendAt: now, Digest: id}
		_, _, err := st.Enqueue(ctx, n, false)
		require.NoError(t, err)
	}
	k := st.keys
	// A header that parses but a body that does not.
	require.NoError(t, client.HSet(ctx, k.job(0), "bad", "d u 1000 jobs\nnot a body").Err())

	got, _, err := st.Reserve(ctx, PullQueue("jobs"), []int{0}, 10)
	require.NoError(t, err)
	var ids []string
	for _, n := range got {
		ids = append(ids, n.ID)
	}
	require.ElementsMatch(t, []string{"a", "c", "late-bad"}, ids, "the others are handed out")
	require.EqualValues(t, 1, st.Quarantined())
	why, err := client.HGet(ctx, k.quarantine(0), "bad").Result()
	require.NoError(t, err)
	require.Contains(t, why, "not a body")

	// One that breaks while reserved is quarantined by the reaper's read.
	require.NoError(t, client.HSet(ctx, k.job(0), "late-bad", "d u 1 jobs\n\x09").Err())
	time.Sleep(5 * time.Millisecond) // past the 1ms ttr
	expired, err := st.Expired(ctx, 0, 10)
	require.NoError(t, err)
	ids = nil
	for _, n := range expired {
		ids = append(ids, n.ID)
	}
	require.ElementsMatch(t, []string{"a", "c"}, ids)
	require.EqualValues(t, 2, st.Quarantined())
	_, err = st.Get(ctx, "late-bad")
	require.ErrorIs(t, err, notify.ErrNotFound, "moved aside")
	stats, err := st.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, stats["jobs"].Reserved, "the quarantined ones left the gauges")
}

// TestLongDigestsCompareAlike stores a record the way earlier versions did,
// with the whole 32-character digest in its header: enqueueing the same
// content again is Existing, alone or in a batch, and other content a
// conflict.
func TestLongDigestsCompareAlike(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.Start(t, redistest.Options{}).Client(t)
	st, err := New(&Config{Client: client, Shards: 2})
	require.NoError(t, err)
	now := time.Now().UTC()
	build := func(id, digest string) *notify.Notification {
		return &notify.Notification{ID: id, Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{}`),
			Backoff: []notify.Duration{0}, TTR: notify.Duration(time.Minute), SendAt: now.Add(time.Hour), Digest: digest}
	}
	const long = "0123456789abcdef0123456789abcdef"
	for _, id := range []string{"a", "b"} {
		n := build(id, long)
		content := encodeContent(n, now)
		require.Equal(t, long[:digestLen]+" ", string(content[:digestLen+1]))
		old := append([]byte(long), content[digestLen:]...)
		require.NoError(t, client.HSet(ctx, st.keys.job(st.keys.shardFor(n)), id, old).Err())
	}

	_, status, err := st.Enqueue(ctx, build("a", long), false)
	require.NoError(t, err)
	require.Equal(t, Existing, status)
	res, err := st.EnqueueBatch(ctx, []EnqueueRequest{{Notification: build("b", long)}, {Notification: build("a", "ffff"+long[4:])}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.Equal(t, Existing, res[0].Status)
	require.ErrorIs(t, res[1].Err, notify.ErrConflict)
}
