package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/asynqimport"
	"github.com/heraldhq/herald/internal/asynqtest"
	"github.com/heraldhq/herald/notify"
)

func TestImportAsynq(t *testing.T) {
	t.Parallel()

	t.Run("AllStatesThenMove", func(t *testing.T) {
		t.Parallel()
		d := asynqtest.Start(t)
		e := newEnv(t, "")
		args := []string{"--config", e.config, "import", "asynq", "--from", d.Addr, "--queue", asynqtest.Queue, "--map", "order:notify=jobs"}

		r := run(t, append(args, "--dry-run"))
		require.NoError(t, r.err)
		require.Equal(t, `dry run: nothing was stored in Herald or deleted from asynq
matched             7 (queue payments: scheduled, retry, pending, archived)
to import           6
already present     0
skipped             1
  1: type "email:send" is not mapped to a topic (email-1)
base64 payloads     1
`, r.out)

		r = run(t, append(args, "--json"))
		require.NoError(t, r.err)
		var sum asynqimport.Summary
		require.NoError(t, json.Unmarshal([]byte(r.out), &sum))
		require.Equal(t, 7, sum.Matched)
		require.Equal(t, 6, sum.Imported)
		require.Equal(t, 1, sum.Skipped)

		cl := e.client(t)
		for id, task := range d.Tasks {
			n, err := cl.Get(t.Context(), id)
			if task.Type == asynqtest.TypeEmail {
				require.ErrorIs(t, err, notify.ErrNotFound, "an unmapped type is never guessed")
				continue
			}
			require.NoError(t, err, id)
			switch task.State {
			case asynq.TaskStateArchived:
				require.Equal(t, notify.StateDead, n.State, id)
				require.Equal(t, task.LastErr, n.History[len(n.History)-1].Error)
				require.Equal(t, task.Retried+1, n.Attempts, id)
			case asynq.TaskStatePending:
				require.Equal(t, notify.StateScheduled, n.State, id)
			default:
				require.Equal(t, notify.StateScheduled, n.State, id)
				require.Equal(t, task.Retried, n.Attempts, id)
				require.Equal(t, task.NextProcessAt.Unix(), n.NextAttemptAt.Unix(), "%s is due when asynq had it", id)
			}
		}

		// The second run maps the email type too and moves: it imports
		// only that one, and asynq is left empty.
		var out bytes.Buffer
		c := newApp(Deps{Out: &out, Err: io.Discard})
		c.terminal = func(io.Writer) bool { return true }
		require.NoError(t, execute(t.Context(), c, append(args, "--map", "email:send=jobs:alipay-notify", "--move")))
		require.Contains(t, out.String(), "\rimporting [##############################] 7/7\n")
		require.Contains(t, out.String(), `matched             7 (queue payments: scheduled, retry, pending, archived)
imported            1
already present     6
skipped             0
base64 payloads     1
deleted from asynq  7
`)
		info, err := d.Inspector.GetQueueInfo(asynqtest.Queue)
		require.NoError(t, err)
		require.Zero(t, info.Size, "--move leaves asynq empty")
		n, err := cl.Get(t.Context(), asynqtest.EmailPending)
		require.NoError(t, err)
		require.Equal(t, "alipay-notify", n.Policy)

		r = run(t, append(args, "--json"))
		require.NoError(t, r.err)
		require.JSONEq(t, `{"queue": "payments", "states": ["scheduled", "retry", "pending", "archived"], "dry_run": false,
			"move": false, "matched": 0, "imported": 0, "already_present": 0, "skipped": 0, "skipped_reasons": [],
			"base64_payloads": 0, "deleted": 0, "active": 0, "aggregating": 0}`, r.out)
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		r := e.run(t, "import", "asynq", "--from", "127.0.0.1:1", "--queue", "payments", "--map", "order:notify=jobs")
		require.Equal(t, 1, r.code())
		require.ErrorContains(t, r.err, "cannot reach asynq's Redis at 127.0.0.1:1 within 5s")
	})

	t.Run("BadFlags", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		from := []string{"import", "asynq", "--from", "127.0.0.1:1", "--queue", "payments"}
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"NoFrom", []string{"import", "asynq", "--queue", "payments", "--map", "a=jobs"}, "--from is required"},
			{"NoMap", from, "--map is required"},
			{"BadState", append(from, "--map", "a=jobs", "--state", "active"), `--state: "active" is not scheduled, retry`},
			{"BadMap", append(from, "--map", "jobs"), `--map "jobs" is not TYPE=TOPIC[:POLICY]`},
			{"TopicWithoutChannel", append(from, "--map", "a=nope"), "map a=nope: channel: is required"},
			{"UnknownPolicy", append(from, "--map", "a=jobs:nope"), `map a=jobs: policy: unknown policy "nope"`},
			{"TopicWithoutReceiver", append(from, "--map", "order:notify=order-notify"), "map order:notify=order-notify: " +
				"asynq tasks name no receiver, and topic order-notify names none: give it an endpoint or a target in the policies file"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := e.run(t, tc.args...)
				require.Equal(t, 2, r.code(), r.err)
				require.ErrorContains(t, r.err, tc.want)
			})
		}
	})
}
