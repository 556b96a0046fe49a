package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/store"
)

func TestEndpointCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	file := filepath.Join(t.TempDir(), "m42.json")
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw4mH1ZwYAXcs="
	require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://m42.example/notify", "rate": 50,
		"secrets": [{"value": "`+secret+`"}]}`), 0o600))

	r := e.run(t, "endpoint", "put", "merchant-42", "--file", file)
	require.NoError(t, r.err, r.logs)
	require.Contains(t, r.out, `"source": "api"`)
	require.NotContains(t, r.out, secret[6:], "a secret was printed")

	r = e.run(t, "endpoint", "list")
	require.NoError(t, r.err, r.logs)
	require.Contains(t, r.out, "merchant-42")
	require.Contains(t, r.out, "https://m42.example/notify")

	r = e.run(t, "endpoint", "get", "merchant-42")
	require.NoError(t, r.err, r.logs)
	require.Contains(t, r.out, `"id": "sec_`)
	require.NotContains(t, r.out, secret[6:])

	require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://m42.example", "rate": -1}`), 0o600))
	r = e.run(t, "endpoint", "put", "merchant-42", "--file", file)
	require.Equal(t, 2, r.code(), "a bad value is a usage error")
	requireField(t, r.err, "rate")

	r = e.run(t, "endpoint", "enable", "merchant-42")
	require.NoError(t, r.err, r.logs)
	require.Equal(t, "endpoint merchant-42 was not disabled; nothing changed\n", r.out)

	r = e.run(t, "endpoint", "delete", "merchant-42")
	require.NoError(t, r.err, r.logs)
	// Each failure names the command and the endpoint it failed on.
	for _, verb := range []string{"get", "delete", "enable"} {
		r = e.run(t, "endpoint", verb, "merchant-42")
		require.Equal(t, 1, r.code())
		require.EqualError(t, r.err, "endpoint "+verb+" merchant-42: endpoint not found")
	}
	// A name no endpoint can have is a usage mistake, said as such, not a
	// lookup that cannot succeed.
	for _, args := range [][]string{{"endpoint", "get", "merchant 42"}, {"endpoint", "delete", "merchant/42"},
		{"endpoint", "enable", "merchant 42"}, {"pause", "endpoint", "merchant 42"}, {"resume", "endpoint", "merchant 42"}} {
		r = e.run(t, args...)
		require.Equal(t, 2, r.code(), "%v: %v", args, r.err)
		require.ErrorContains(t, r.err, "is not an endpoint name: names match [A-Za-z0-9._:-]{1,128}")
	}
}

// TestEndpointListState lists a paused endpoint and one its disable_after
// disabled: the table says so, where the operator looks for why a merchant
// receives nothing.
func TestEndpointListState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	file := filepath.Join(t.TempDir(), "m.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://m.example/notify", "disable_after": "1ms"}`), 0o600))
	for _, name := range []string{"m-disabled", "m-failing", "m-ok", "m-paused"} {
		require.NoError(t, e.run(t, "endpoint", "put", name, "--file", file).err)
	}
	require.NoError(t, e.run(t, "pause", "endpoint", "m-paused").err)
	st := e.store(t)
	disabled, err := st.EndpointFailed(t.Context(), "m-failing", time.Hour)
	require.NoError(t, err)
	require.False(t, disabled)
	waitFor(t, 5*time.Second, "m-disabled to be disabled", func() bool {
		disabled, err := st.EndpointFailed(t.Context(), "m-disabled", time.Millisecond)
		require.NoError(t, err)
		return disabled
	})

	r := e.run(t, "endpoint", "list")
	require.NoError(t, r.err)
	require.Regexp(t, `(?m)^NAME\s.*\sSTATE$`, r.out)
	require.Regexp(t, `(?m)^m-disabled\s.*\sdisabled at \S+Z$`, r.out)
	require.Regexp(t, `(?m)^m-failing\s.*\sfailing since \S+Z$`, r.out)
	require.Regexp(t, `(?m)^m-ok\s.*\s-$`, r.out)
	require.Regexp(t, `(?m)^m-paused\s.*\spaused$`, r.out)
}

// TestPausesCommand: herald pauses answers "what did we pause?" from a
// shell, disabled endpoints included, as a table or as GET /v1/pauses
// answers.
func TestPausesCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	r := e.run(t, "pauses")
	require.NoError(t, r.err, r.logs)
	require.Equal(t, "nothing is paused\n", r.out)
	r = e.run(t, "pauses", "--json")
	require.NoError(t, r.err, r.logs)
	require.JSONEq(t, `{"pauses": []}`, r.out)

	file := filepath.Join(t.TempDir(), "m.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://m.example/notify"}`), 0o600))
	require.NoError(t, e.run(t, "endpoint", "put", "m-paused", "--file", file).err)
	require.NoError(t, e.run(t, "pause", "endpoint", "m-paused").err)
	require.NoError(t, e.run(t, "pause", "topic", "jobs").err)
	st := e.store(t)
	waitFor(t, 5*time.Second, "m-gone to be disabled", func() bool {
		disabled, err := st.EndpointFailed(t.Context(), "m-gone", time.Millisecond)
		require.NoError(t, err)
		return disabled
	})

	r = e.run(t, "pauses")
	require.NoError(t, r.err, r.logs)
	require.Regexp(t, `^KIND\s+NAME\s+SINCE\n`+
		`disabled\s+m-gone\s+\S+Z\n`+
		`endpoint\s+m-paused\s+\S+Z\n`+
		`topic\s+jobs\s+\S+Z\n$`, r.out)
	r = e.run(t, "pauses", "--json")
	require.NoError(t, r.err, r.logs)
	var got struct{ Pauses []client.Pause }
	require.NoError(t, json.Unmarshal([]byte(r.out), &got))
	require.Len(t, got.Pauses, 3)
	require.Equal(t, client.Pause{Kind: store.PauseTopic, Name: "jobs", Since: got.Pauses[2].Since}, got.Pauses[2])
	require.False(t, got.Pauses[2].Since.IsZero())

	r = e.run(t, "endpoint", "enable", "m-gone")
	require.NoError(t, r.err, r.logs)
	require.Equal(t, "enabled m-gone: 0 due at once\n", r.out)
}

func TestPauseCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	r := e.run(t, "pause", "topic", "jobs")
	require.NoError(t, r.err, r.logs)
	require.Contains(t, r.out, "paused topic jobs")
	// Paused already, as wanted: it succeeds, and says nothing changed.
	r = e.run(t, "pause", "topic", "jobs")
	require.NoError(t, r.err)
	require.Equal(t, "topic jobs was paused already; nothing changed\n", r.out)
	r = e.run(t, "resume", "topic", "jobs")
	require.NoError(t, r.err, r.logs)
	require.Contains(t, r.out, "resumed topic jobs: 0 parked notifications due at once (a pull topic")
	r = e.run(t, "pause", "endpoint", "nobody")
	require.Equal(t, 1, r.code())
	require.EqualError(t, r.err, "pause endpoint nobody: endpoint not found")
	r = e.run(t, "resume", "endpoint", "nobody")
	require.EqualError(t, r.err, "resume endpoint nobody: endpoint not found")
	r = e.run(t, "pause", "queue", "jobs")
	require.Equal(t, 2, r.code())
	r = e.run(t, "pause", "topic", "Bad Topic")
	require.Equal(t, 2, r.code(), "the store refused the name: %v", r.err)
	requireField(t, r.err, "topic")
}

// TestPauseUnknownTopic pauses a topic that neither the policies file
// names nor any notification has used, as a topic mistyped in an incident
// would be: it is paused, since a topic needs no configuration, but the
// operator is warned that the topic meant is still running. One with
// notifications, or in the policies file, pauses without a warning.
func TestPauseUnknownTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.dead(t, "adhoc", "a1")

	r := e.run(t, "pause", "topic", "jbos")
	require.NoError(t, r.err)
	require.Equal(t, "paused topic jbos\n", r.out)
	require.Regexp(t, `level=WARN msg=".*topic jbos is not in the policies file and has no notifications`, r.logs)

	for _, topic := range []string{"jobs", "adhoc"} {
		r = e.run(t, "pause", "topic", topic)
		require.NoError(t, r.err)
		require.Equal(t, "paused topic "+topic+"\n", r.out)
		require.Empty(t, r.logs, topic)
	}
}

// TestResumeWhatIsNotPaused resumes a topic that is not paused, as a name
// mistyped when resuming would be: nothing changes and the command
// succeeds, as the API does, but a warning says so and names what is
// paused, since the topic meant stays paused otherwise unnoticed.
func TestResumeWhatIsNotPaused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	require.NoError(t, e.run(t, "pause", "topic", "jobs").err)

	r := e.run(t, "resume", "topic", "jbos")
	require.NoError(t, r.err)
	require.Equal(t, "topic jbos was not paused; nothing changed\n", r.out)
	require.Regexp(t, `level=WARN msg=".*topic jbos was not paused.*" paused="topic jobs"`, r.logs)

	r = e.run(t, "resume", "topic", "jobs")
	require.NoError(t, r.err)
	require.Empty(t, r.logs)
	r = e.run(t, "resume", "topic", "jobs")
	require.NoError(t, r.err)
	require.Equal(t, "topic jobs was not paused; nothing changed\n", r.out)
	require.Regexp(t, `topic jobs was not paused.*" paused=nothing`, r.logs)
}

// TestPauseJSON: pause, resume and endpoint enable print with --json what
// the API answers, so a script reads how many notifications a resume made
// due from either (none here: no dispatcher held any back).
func TestPauseJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	r := e.run(t, "pause", "topic", "jobs", "--json")
	require.NoError(t, r.err)
	require.JSONEq(t, `{"topic": "jobs", "paused": true}`, r.out)
	r = e.run(t, "resume", "topic", "jobs", "--json")
	require.NoError(t, r.err)
	require.JSONEq(t, `{"topic": "jobs", "paused": false, "resumed": 0}`, r.out)

	file := filepath.Join(t.TempDir(), "m42.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://m42.example/notify"}`), 0o600))
	require.NoError(t, e.run(t, "endpoint", "put", "merchant-42", "--file", file).err)
	r = e.run(t, "pause", "endpoint", "merchant-42", "--json")
	require.NoError(t, r.err, r.logs)
	require.JSONEq(t, `{"endpoint": "merchant-42", "paused": true}`, r.out)
	r = e.run(t, "resume", "endpoint", "merchant-42", "--json")
	require.NoError(t, r.err)
	require.JSONEq(t, `{"endpoint": "merchant-42", "paused": false, "resumed": 0}`, r.out)
	r = e.run(t, "endpoint", "enable", "merchant-42", "--json")
	require.NoError(t, r.err)
	require.JSONEq(t, `{"endpoint": "merchant-42", "paused": false, "resumed": 0}`, r.out)
}
