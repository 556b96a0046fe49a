package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
	st, client := startStore(t, 1)
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
		keys: []string{k.stats(0), k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0), k.ready(0, PullQueue("jobs")), k.givenBack(0, "r.")},
		args: []any{ms(time.Now()), 1, "r.", 1, 1}}
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
	st, _ := startStore(t, 1)
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
	// x is dead: a purge deletes it, unless the call is refused.
	x := &notify.Notification{ID: "x", Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{}`),
		Backoff: []notify.Duration{0}, TTR: notify.Duration(time.Minute), SendAt: now, Digest: "x"}
	_, err = st.EnqueueBatch(ctx, []EnqueueRequest{{Notification: x, Dead: &notify.Attempt{Outcome: notify.OutcomePermanent}}})
	require.NoError(t, err)
	before := dumpAll(t, st)

	k := st.keys
	good := &notify.Notification{ID: "d", Topic: "jobs", Channel: notify.ChannelPull, Backoff: []notify.Duration{0},
		TTR: notify.Duration(time.Minute), SendAt: now, Digest: "d"}
	enqueueKeys := []string{k.job(0), k.state(0), k.hist(0), k.stats(0), k.finished(0), k.deadAll(0), k.order(0), k.link(0),
		k.due(0, PullQueue("jobs")), k.dead(0, "jobs")}
	purgeKeys := []string{k.job(0), k.state(0), k.hist(0), k.deadAll(0), k.stats(0), k.dead(0, "jobs")}
	var finishKeys []string
	// finishArgs is a valid finish of the two reserved ones, an ack and a
	// retry, changed by bad.
	finishArgs := func(bad func(args []any)) []any {
		items := make([]finishItem, 2)
		require.NoError(t, items[0].prepare(&Finish{Notification: reserved[0], Action: notify.ActionAck,
			Attempt: notify.Attempt{Outcome: notify.OutcomeSuccess}}, now))
		require.NoError(t, items[1].prepare(&Finish{Notification: reserved[1], Action: notify.ActionRetry, NextAt: now,
			Attempt: notify.Attempt{Outcome: notify.OutcomeRetry}}, now))
		call := st.finishCall([]shardItems{{shard: 0, idx: []int{0, 1}}}, items, now, 1)
		finishKeys = call.keys
		args := slices.Clone(call.args)
		bad(args)
		return args
	}
	valid := finishArgs(func([]any) {}) // sets finishKeys
	// enqueueNewArgs is a valid enqueue of two new ones, d and e, due at
	// due, changed by bad.
	var newKeys []string
	enqueueNewArgs := func(due time.Time, bad func(args []any)) []any {
		var items []*enqueueItem
		for _, id := range []string{"d", "e"} {
			n := *good
			n.ID = id
			items = append(items, &enqueueItem{req: EnqueueRequest{Notification: &n}, due: ms(due), content: encodeContent(&n, now, ms(due))})
		}
		calls, _ := st.enqueueNewCalls(map[int][]*enqueueItem{0: items}, now)
		require.Len(t, calls, 1)
		newKeys = calls[0].keys
		args := slices.Clone(calls[0].args)
		bad(args)
		return args
	}
	enqueueNewArgs(now.Add(time.Hour), func([]any) {}) // sets newKeys: a due set
	scheduledKeys := newKeys
	enqueueNewArgs(now, func([]any) {}) // sets newKeys: a ready list
	tests := []struct {
		name   string
		script *redis.Script
		keys   []string
		args   []any
	}{
		{"EnqueueBadDue", enqueueScript, enqueueKeys, []any{ms(now), k.wake(), 0, 1, 1, 5000,
			"d", encodeContent(good, now, ms(now)), ms(now), 0, 1, 1, "jobs", "pull.jobs", 0, 0, 0, "", "",
			"e", encodeContent(good, now, ms(now)), "soon", 0, 1, 1, "jobs", "pull.jobs", 0, 0, 0, "", ""}},
		{"EnqueueBadKeyIndex", enqueueScript, enqueueKeys, []any{ms(now), k.wake(), 0, 1, 1, 5000,
			"d", encodeContent(good, now, ms(now)), ms(now), 0, 1, 1, "jobs", "pull.jobs", 0, 0, 0, "", "",
			"e", encodeContent(good, now, ms(now)), ms(now), 0, 2, 1, "jobs", "pull.jobs", 0, 0, 0, "", ""}},
		// A content whose header the scripts cannot route, or whose topic
		// is not the item's, with an order key: refused before the line
		// is joined.
		{"EnqueueBadContent", enqueueScript, enqueueKeys, []any{ms(now), k.wake(), 0, 1, 1, 5000,
			"d", encodeContent(good, now, ms(now)), ms(now), 0, 1, 1, "jobs", "pull.jobs", 0, 0, 0, "", "k",
			"e", "no header", ms(now), 0, 1, 1, "jobs", "pull.jobs", 0, 0, 0, "", "k"}},
		{"EnqueueTopicDisagrees", enqueueScript, enqueueKeys, []any{ms(now), k.wake(), 0, 1, 1, 5000,
			"d", encodeContent(good, now, ms(now)), ms(now), 0, 1, 1, "other", "pull.jobs", 0, 0, 0, "", "k"}},
		{"EnqueueNewBadDue", enqueueNewScript, scheduledKeys, enqueueNewArgs(now.Add(time.Hour), func(a []any) { a[len(a)-1] = "soon" })},
		{"EnqueueNewBadKeyIndex", enqueueNewScript, newKeys, enqueueNewArgs(now, func(a []any) { a[2] = 9 })},
		{"EnqueueNewBadEarliest", enqueueNewScript, newKeys, enqueueNewArgs(now, func(a []any) { a[8] = "soon" })},
		{"EnqueueNewBadReady", enqueueNewScript, newKeys, enqueueNewArgs(now, func(a []any) { a[9] = "soon" })},
		{"EnqueueNewReadyWithoutWake", enqueueNewScript, newKeys, enqueueNewArgs(now, func(a []any) { a[8] = "" })},
		{"EnqueueNewCountsDisagree", enqueueNewScript, newKeys, enqueueNewArgs(now, func(a []any) { a[7] = 3 })},
		{"ReserveBadLimit", reserveScript, []string{k.stats(0), k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0), k.ready(0, PullQueue("jobs")),
			k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0), k.ready(0, PullQueue("jobs")), k.givenBack(0, "r.")}, []any{ms(time.Now()), 1, "r.", 0, "s.", 2, 1}},
		{"ReserveBadStarted", reserveScript, []string{k.stats(0), k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0), k.ready(0, PullQueue("jobs")),
			k.givenBack(0, "r.")}, []any{ms(time.Now()), 1, "r.", -1, 1}},
		{"ReserveBadNumber", reserveScript, []string{k.stats(0), k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0), k.ready(0, PullQueue("jobs")),
			k.givenBack(0, "r.")}, []any{ms(time.Now()), 1, "r.", 0, "x"}},
		{"FinishBadGroup", finishScript, finishKeys, finishArgs(func(a []any) { a[len(a)-3] = 9 })},
		{"FinishBadGroupField", finishScript, finishKeys, finishArgs(func(a []any) { a[14] = "x" })},
		{"FinishRetryWithoutDue", finishScript, finishKeys, finishArgs(func(a []any) { a[len(a)-2] = "soon" })},
		{"FinishRetryBadKey", finishScript, finishKeys, finishArgs(func(a []any) { a[len(a)-1] = 7 })},
		{"FinishCountsDisagree", finishScript, finishKeys, finishArgs(func(a []any) { a[10] = 1 })},
		{"PurgeBadKeyIndex", purgeScript, purgeKeys, []any{"", "x", 1, "a", 2}},
		{"PurgeBadUpto", purgeScript, purgeKeys, []any{"soon", "x", 1}},
		{"PurgeBadTopicKey", purgeScript, append(purgeKeys, k.deadAll(0)), []any{"", "x", 1, "a", 2}},
		{"PurgeHalfAnItem", purgeScript, purgeKeys, []any{"", "x", 1, "a"}},
	}
	for _, tc := range tests {
		_, err := st.runScript(ctx, tc.script, tc.keys, tc.args...)
		require.ErrorContains(t, err, "herald", tc.name)
		require.Equal(t, before, dumpAll(t, st), "%s changed Redis", tc.name)
	}
	// The finishes above failed for what was changed: unchanged, it runs.
	v, err := st.runScript(ctx, finishScript, finishKeys, valid...)
	require.NoError(t, err)
	require.Equal(t, []any{int64(codeOK), int64(codeOK)}, v)
	v, err = st.runScript(ctx, enqueueNewScript, newKeys, enqueueNewArgs(now, func([]any) {})...)
	require.NoError(t, err)
	require.Equal(t, []any{int64(codeOK), int64(codeOK)}, v)
	v, err = st.runScript(ctx, purgeScript, purgeKeys, "", "x", 1)
	require.NoError(t, err)
	require.Equal(t, []any{int64(1)}, v)
}

// TestQuarantine corrupts one stored notification: reservations and the
// reaper move it aside and carry on with the others.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, client := startStore(t, 1)
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
	// Its payload, a customer's data, goes with the retention of finished
	// records after the last quarantine.
	ttl, err := client.PTTL(ctx, k.quarantine(0)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, RetentionDefault-time.Minute)
	require.LessOrEqual(t, ttl, RetentionDefault)

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
	st, client := startStore(t, 2)
	now := time.Now().UTC()
	build := func(id, digest string) *notify.Notification {
		return &notify.Notification{ID: id, Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{}`),
			Backoff: []notify.Duration{0}, TTR: notify.Duration(time.Minute), SendAt: now.Add(time.Hour), Digest: digest}
	}
	const long = "0123456789abcdef0123456789abcdef"
	for _, id := range []string{"a", "b"} {
		n := build(id, long)
		content := encodeContent(n, now, ms(now))
		// Versions that did not store the first due time read the digest's
		// first digestLen characters, and a version 1 body as before.
		require.Equal(t, long[:digestLen]+":", string(content[:digestLen+1]))
		require.EqualValues(t, 1, content[bytes.IndexByte(content, '\n')+1])
		old := append([]byte(long), content[bytes.IndexByte(content, ' '):]...)
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

// TestContentWithoutDueTime reserves a notification stored by a version
// whose content header lacks the first due time: its due time is read as
// send_at plus backoff[0], each rounded up to the millisecond, never
// earlier than its score, and it finishes like any other.
func TestContentWithoutDueTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, client := startStore(t, 1)
	sendAt := time.Now().Add(-time.Second).Truncate(time.Millisecond).Add(300 * time.Microsecond)
	backoff := notify.Duration(1500 * time.Microsecond)
	n := &notify.Notification{ID: "old", Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{"v":1}`),
		Backoff: []notify.Duration{backoff}, TTR: notify.Duration(time.Minute), SendAt: sendAt, Digest: "0123456789abcdef"}
	due := dueMS(sendAt.Add(time.Duration(backoff)))
	content := encodeContent(n, sendAt, due)
	old := append([]byte(n.Digest), content[bytes.IndexByte(content, ' '):]...)
	require.NoError(t, client.HSet(ctx, st.keys.job(0), "old", old).Err())
	require.NoError(t, client.ZAdd(ctx, st.keys.due(0, PullQueue("jobs")), redis.Z{Score: float64(due), Member: "old"}).Err())

	got, _, err := st.Reserve(ctx, PullQueue("jobs"), []int{0}, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.JSONEq(t, `{"v":1}`, string(got[0].Payload))
	require.GreaterOrEqual(t, got[0].NextAttemptAt.UnixMilli(), due, "never earlier than the score")
	require.LessOrEqual(t, got[0].NextAttemptAt.UnixMilli(), due+1)
	errs, err := st.Finish(ctx, []Finish{{Notification: got[0], Action: notify.ActionAck,
		Attempt: notify.Attempt{Outcome: notify.OutcomeSuccess}}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	rec, err := st.Get(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, notify.StateSucceeded, rec.State)
	_, status, err := st.Enqueue(ctx, n, false)
	require.NoError(t, err)
	require.Equal(t, Existing, status, "its digest compares with a new one's")
}

// startStore opens a store of shards shards on a redis-server of the
// test's own, and returns it with its client.
func startStore(t *testing.T, shards int) (*Store, *redis.Client) {
	t.Helper()
	client := redistest.Start(t, redistest.Options{}).Client(t)
	st, err := New(&Config{Client: client, Shards: shards})
	require.NoError(t, err)
	_, err = st.Shards(context.Background())
	require.NoError(t, err)
	return st, client
}

// TestQuarantineLeavesNoHistory: a notification quarantined after attempts
// takes its history and the stub of its order key with it, as a swept one
// does; only the quarantine entry is left.
func TestQuarantineLeavesNoHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, client := startStore(t, 4)
	now := time.Now().UTC().Add(-time.Second)
	n := &notify.Notification{ID: "bad", Topic: "jobs", Channel: notify.ChannelPull, Payload: json.RawMessage(`{}`),
		Backoff: []notify.Duration{0, 0}, TTR: notify.Duration(time.Minute), SendAt: now, Digest: "bad", OrderKey: "k"}
	for shard := 0; st.keys.shardOf(n.ID) == st.keys.shardFor(n); shard++ {
		n.OrderKey = fmt.Sprint("k", shard) // one whose record lives away from its id's shard, behind a stub
	}
	_, _, err := st.Enqueue(ctx, n, false)
	require.NoError(t, err)
	all := []int{0, 1, 2, 3}
	got, _, err := st.Reserve(ctx, PullQueue("jobs"), all, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	errs, err := st.Finish(ctx, []Finish{{Notification: got[0], Action: notify.ActionRetry, NextAt: now,
		Attempt: notify.Attempt{Outcome: notify.OutcomeRetry, StartedAt: now, FinishedAt: now}}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	shard := st.keys.shardFor(n)
	require.NoError(t, client.HSet(ctx, st.keys.job(shard), "bad", "d u 1000 jobs\nnot a body").Err())
	got, _, err = st.Reserve(ctx, PullQueue("jobs"), all, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	require.EqualValues(t, 1, st.Quarantined())

	left := map[string]string{}
	for key := range dumpAll(t, st) {
		switch {
		case key == st.keys.quarantine(shard), key == st.keys.meta(), strings.HasSuffix(key, ":stats"),
			strings.Contains(key, ":act:") && client.PTTL(ctx, key).Val() > 0:
		default:
			left[key] = fmt.Sprint(client.Type(ctx, key).Val())
		}
	}
	require.Empty(t, left, "left behind by the quarantined notification")
}
