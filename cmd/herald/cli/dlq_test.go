package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/notify"
)

func TestDLQ(t *testing.T) {
	t.Parallel()

	t.Run("ListReplayPurge", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		e.dead(t, "jobs", "d1", "d2", "d3")

		r := e.run(t, "dlq", "list")
		require.NoError(t, r.err)
		require.Regexp(t, `ID\s+TOPIC\s+CHANNEL\s+TARGET\s+ATTEMPTS\s+DIED\s+LAST ERROR`, r.out)
		require.Regexp(t, regexp.MustCompile(`(?m)^d1\s+jobs\s+pull\s+-\s+1\s+\S+Z\s+consumer failed$`), r.out)

		r = e.run(t, "dlq", "list", "--limit", "2", "--json")
		require.NoError(t, r.err)
		var page struct {
			Notifications []notify.Notification `json:"notifications"`
			NextCursor    string                `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.out), &page))
		require.Len(t, page.Notifications, 2)
		require.NotEmpty(t, page.NextCursor)
		r = e.run(t, "dlq", "list", "--cursor", page.NextCursor)
		require.NoError(t, r.err)
		require.Len(t, regexp.MustCompile(`(?m)^d\d `).FindAllString(r.out, -1), 1, r.out)

		r = e.run(t, "dlq", "replay", "--topic", "jobs", "--since", "1h", "--dry-run")
		require.NoError(t, r.err)
		require.Equal(t, "dry run: 3 dead notifications match; none replayed\n", r.out)

		r = e.run(t, "dlq", "replay", "--ids", "d1", "--reset-attempts", "--json")
		require.NoError(t, r.err)
		require.JSONEq(t, `{"matched": 1, "replayed": 1}`, r.out)
		r = e.run(t, "status", "d1", "--json")
		require.NoError(t, r.err)
		var n notify.Notification
		require.NoError(t, json.Unmarshal([]byte(r.out), &n))
		require.Equal(t, notify.StateScheduled, n.State)
		require.Zero(t, n.Attempts, "reset")
		require.Len(t, n.History, 1, "history kept")

		r = e.run(t, "dlq", "replay", "--topic", "jobs", "--until", time.Now().Add(-time.Hour).Format(time.RFC3339))
		require.NoError(t, r.err)
		require.Equal(t, "0 matched, 0 replayed\n", r.out)

		r = e.run(t, "dlq", "purge", "--topic", "jobs", "--dry-run", "--json")
		require.NoError(t, r.err)
		require.JSONEq(t, `{"matched": 2, "purged": 0}`, r.out)
		r = e.run(t, "dlq", "purge", "--ids", "d2,d3")
		require.NoError(t, r.err)
		require.Equal(t, "2 matched, 2 purged\n", r.out)
		r = e.run(t, "dlq", "list")
		require.NoError(t, r.err)
		require.Equal(t, "no dead notifications\n", r.out)
	})

	t.Run("NextPageKeepsTheFilters", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		e.dead(t, "hooks", "h1", "h2", "h3")
		e.dead(t, "jobs", "j1", "j2")

		var listed []string
		args := []string{"--config", e.config, "dlq", "list", "--topic", "hooks", "--limit", "2"}
		for args != nil {
			r := run(t, args)
			require.NoError(t, r.err)
			listed = append(listed, regexp.MustCompile(`(?m)^\w\d\b`).FindAllString(r.out, -1)...)
			args = nil
			if m := regexp.MustCompile(`(?m)^more: herald (.*)$`).FindStringSubmatch(r.out); m != nil {
				require.Contains(t, m[1], " --topic=hooks ", "the next page is of the same listing")
				require.Contains(t, m[1], " --limit=2 ")
				args = strings.Fields(m[1])
			}
		}
		require.ElementsMatch(t, []string{"h1", "h2", "h3"}, listed, "each of topic hooks once, none of jobs")
	})

	// An id given to replay or purge that is not dead, mistyped at night
	// or already replayed, is named and fails the command, so that the
	// operator does not take the ids that were dead for all of them.
	t.Run("IdsNotDead", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		e.dead(t, "jobs", "d1", "d2", "d3")
		_, _, err := e.client(t).Enqueue(t.Context(), &notify.Request{ID: "s1", Topic: "jobs", Channel: notify.ChannelPull,
			Payload: []byte(`{}`), Delay: new(notify.Duration(time.Hour))})
		require.NoError(t, err)

		r := e.run(t, "dlq", "replay", "--ids", "d1,d1x,s1", "--dry-run")
		require.Equal(t, 1, r.code(), r.err)
		require.Equal(t, "dry run: 1 dead notifications match; none replayed\n", r.out)
		require.EqualError(t, r.err, "2 of the 3 ids given are not dead, so not replayed: d1x (unknown id), s1 (scheduled)")

		r = e.run(t, "dlq", "replay", "--ids", "d1,d1x,s1")
		require.Equal(t, 1, r.code(), r.err)
		require.Equal(t, "1 matched, 1 replayed\n", r.out, "what was dead is replayed")
		require.EqualError(t, r.err, "2 of the 3 ids given are not dead, so not replayed: d1x (unknown id), s1 (scheduled)")
		r = e.run(t, "status", "d1")
		require.NoError(t, r.err)
		require.Contains(t, r.out, "scheduled")

		r = e.run(t, "dlq", "replay", "--ids", "d1", "--json")
		require.Equal(t, 1, r.code(), r.err)
		require.JSONEq(t, `{"matched": 0, "replayed": 0, "not_dead": [{"id": "d1", "state": "scheduled"}]}`, r.out, "as the API answers")
		require.EqualError(t, r.err, "the id given is not dead, so not replayed: d1 (scheduled)")

		r = e.run(t, "dlq", "purge", "--ids", "d2,d2,d3x")
		require.Equal(t, 1, r.code(), r.err)
		require.Equal(t, "1 matched, 1 purged\n", r.out)
		require.EqualError(t, r.err, "1 of the 2 ids given is not dead, so not purged: d3x (unknown id)")

		r = e.run(t, "dlq", "replay", "--ids", "d3")
		require.NoError(t, r.err)
		require.Equal(t, "1 matched, 1 replayed\n", r.out)
	})

	t.Run("BadFilters", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"replay"}, "give --ids, or --topic with an optional --since and --until"},
			{[]string{"replay", "--topic", "jobs", "--since", "yesterday"}, "--since"},
			// The zero time would stand for no bound: the whole topic.
			{[]string{"purge", "--topic", "jobs", "--until", "0001-01-01T00:00:00Z"}, "until: must be 1970-01-01T00:00:00Z or later"},
			{[]string{"purge", "--ids", "a", "--topic", "jobs"}, "give --ids or --topic, not both"},
			{[]string{"purge", "--topic", "jobs", "--since", "1h", "--until", "2h"}, "--until 2h must be later than --since 1h"},
			{[]string{"purge", "--ids", "d1", "--since", "1h"}, "--since and --until go with --topic, not --ids"},
			{[]string{"replay", "--ids", "d1", "--until", "1h"}, "--since and --until go with --topic, not --ids"},
			{[]string{"list", "--limit", "0"}, "--limit"},
			{[]string{"replay", "--ids", "d1,order/1"}, `--ids: "order/1" is not a notification id`},
			{[]string{"purge", "--ids", "d1,,d2"}, `--ids: "" is not a notification id`},
			{[]string{"list", "--cursor", "garbage"}, "cursor: is not a cursor"},
		} {
			r := e.run(t, append([]string{"dlq"}, tc.args...)...)
			require.Equal(t, 2, r.code(), "%v: %v", tc.args, r.err)
			require.ErrorContains(t, r.err, tc.want)
		}
	})

	t.Run("ProgressOnTerminal", func(t *testing.T) {
		t.Parallel()
		e, out := replayOnTerminal(t)
		require.Contains(t, out, "\rreplaying [..............................] 0/501")
		require.Greater(t, strings.Count(out, "\rreplaying ["), 2, "the bar advances as the store moves batches")
		require.Contains(t, out, "\rreplaying [##############################] 501/501\n")
		require.Contains(t, out, "501 matched, 501 replayed\n")

		r := e.run(t, "stats", "--json")
		require.NoError(t, r.err)
		var got api.Stats
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.EqualValues(t, 0, got.Topics["jobs"].Dead)
		require.EqualValues(t, 501, got.Topics["jobs"].Scheduled)
	})

	// --json prints the answer alone, on a terminal too, as import does.
	t.Run("JSONOnTerminalHasNoBar", func(t *testing.T) {
		t.Parallel()
		_, out := replayOnTerminal(t, "--json")
		var got api.ReplayResult
		require.NoError(t, json.Unmarshal([]byte(out), &got), "stdout: %q", out)
		require.Equal(t, api.ReplayResult{Matched: 501, Replayed: 501}, got)
	})
}

// replayOnTerminal replays one more dead notification than a replay moves
// without a progress bar, with output on a stand-in terminal, and returns
// the environment and what the command printed.
func replayOnTerminal(t *testing.T, flags ...string) (*testEnv, string) {
	t.Helper()
	e := newEnv(t, "")
	var out bytes.Buffer
	require.NoError(t, execute(t.Context(), terminalApp(&out), replayBacklog(t, e, flags...)))
	return e, out.String()
}

// replayBacklog makes one more dead notification of topic jobs than a
// replay moves without a progress bar, and returns the command line that
// replays them, with flags.
func replayBacklog(t *testing.T, e *testEnv, flags ...string) []string {
	t.Helper()
	ids := make([]string, replayChunk+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%d", i)
	}
	e.dead(t, "jobs", ids...)
	return append([]string{"--config", e.config, "dlq", "replay", "--topic", "jobs"}, flags...)
}

// terminalApp is an app whose output, out, stands in for a terminal.
func terminalApp(out io.Writer) *app {
	c := newApp(Deps{Out: out, Err: io.Discard})
	c.terminal = func(io.Writer) bool { return true }
	return c
}

// cancelOnProgress is a terminal that cancels its command, as a Ctrl-C
// would, once the progress bar shows the first notifications replayed.
type cancelOnProgress struct {
	bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnProgress) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if regexp.MustCompile(`\] [1-9]\d*/`).Match(p) {
		w.cancel()
	}
	return n, err
}

// TestReplayStoppedPartWay interrupts a long replay after its first batch:
// besides the error, the operator learns how many were replayed before it
// stopped, as the dead set now holds them.
func TestReplayStoppedPartWay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	args := replayBacklog(t, e)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &cancelOnProgress{cancel: cancel}

	err := execute(ctx, terminalApp(out), args)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, ExitCode(err))

	r := e.run(t, "stats", "--json")
	require.NoError(t, r.err)
	var got api.Stats
	require.NoError(t, json.Unmarshal([]byte(r.out), &got))
	replayed := replayChunk + 1 - int(got.Topics["jobs"].Dead)
	require.Positive(t, replayed, "the first batch was replayed")
	require.Less(t, replayed, replayChunk+1, "the replay stopped part way")
	require.Contains(t, out.String(), fmt.Sprintf("\nstopped part way: %d replayed, of %d matched so far\n", replayed, replayed))
}

// TestPrintDeadDestination: the dead letters' TARGET column names the
// endpoint a notification was for, where it showed "-" as if it had gone
// nowhere, and hides a target's user information, as the API does.
func TestPrintDeadDestination(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.NoError(t, printDead(&buf, []*notify.Notification{
		{ID: "o1", Topic: "order-notify", Channel: notify.ChannelWebhook, Endpoint: "acme-shop", Attempts: 9},
		{ID: "o2", Topic: "order-notify", Channel: notify.ChannelWebhook, Target: "https://shop:s3cr3t@m.example/", Attempts: 9},
	}, ""))
	require.Regexp(t, `(?m)^o1\s+order-notify\s+webhook\s+endpoint acme-shop\s+9\s`, buf.String())
	require.Regexp(t, `(?m)^o2\s+order-notify\s+webhook\s+https://xxxxx@m.example/\s+9\s`, buf.String())
	require.NotContains(t, buf.String(), "s3cr3t")
}
