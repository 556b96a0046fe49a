package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

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
		keys: []string{k.due(0, PullQueue("jobs")), k.reserved(0), k.job(0), k.state(0), k.stats(0)},
		args: []any{ms(time.Now()), 1, "r."}}
	sweep := &scriptCall{script: sweepScript,
		keys: []string{k.finished(0), k.job(0), k.state(0), k.hist(0)}, args: []any{ms(time.Now()), 10}}
	require.NoError(t, st.runScripts(ctx, []*scriptCall{reserve, sweep}))
	require.NoError(t, sweep.cmd.Err(), "the uncached script was loaded and run")
	reserved, err := client.ZCard(ctx, k.reserved(0)).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), reserved, "the cached reserve ran exactly once")
}
