package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
)

// controlRe matches the control characters that drive a terminal: all but
// tab and newline, which tables and JSON print.
const controlRe = "[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f]"

// TestStoredTextIsEscaped prints a notification whose last error, as a
// receiver or consumer wrote it, would clear the operator's screen and
// retitle the terminal: status and dlq list show the escapes instead.
func TestStoredTextIsEscaped(t *testing.T) {
	t.Parallel()
	const hostile = "\x1b[2J\x1b]0;x\x07 \u009b31m\x7f"
	e := newEnv(t, "")
	ctx := context.Background()
	cl := e.client(t)
	_, _, err := cl.Enqueue(ctx, &notify.Request{ID: "evil-1", Topic: "jobs", Payload: []byte(`{"n":1}`), Backoff: []notify.Duration{0}})
	require.NoError(t, err)
	got, err := cl.Reserve(ctx, "jobs", client.MaxReserve, time.Second)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, cl.Nack(ctx, got[0].ID, got[0].Receipt, errors.New(hostile)))

	for _, args := range [][]string{{"status", "evil-1"}, {"dlq", "list"}} {
		r := e.run(t, args...)
		require.NoError(t, r.err)
		require.NotRegexp(t, controlRe, r.out, "%v printed control characters", args)
		require.Contains(t, r.out, `\x1b[2J\x1b]0;x\a \u009b31m\x7f`, args)
	}

	// JSON escapes them too, and a script reads back what was stored.
	r := e.run(t, "status", "evil-1", "--json")
	require.NoError(t, r.err)
	require.NotRegexp(t, controlRe, r.out, "status --json printed control characters")
	var n notify.Notification
	require.NoError(t, json.Unmarshal([]byte(r.out), &n))
	require.Equal(t, hostile, n.History[0].Error)

	// A payload is kept as its producer sent it, which JSON's parser lets
	// hold a lone byte 0x9b, CSI to an 8-bit terminal: it prints as U+FFFD,
	// as encoding/json writes any string's invalid bytes.
	_, _, err = cl.Enqueue(ctx, &notify.Request{ID: "evil-2", Topic: "jobs", Payload: []byte("\"a\x9bb\"")})
	require.NoError(t, err)
	r = e.run(t, "status", "evil-2", "--json")
	require.NoError(t, r.err)
	require.True(t, utf8.ValidString(r.out), "status --json printed invalid UTF-8: %q", r.out)
	require.NoError(t, json.Unmarshal([]byte(r.out), &n))
	require.JSONEq(t, `"a\ufffdb"`, string(n.Payload))
}

// TestEndpointURLIsEscaped registers an endpoint whose URL, which url.Parse
// accepts, holds a C1 control sequence: the table shows its escape.
func TestEndpointURLIsEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	file := filepath.Join(t.TempDir(), "evil.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"url": "https://evil.example/\u009b2J"}`), 0o600))
	require.NoError(t, e.run(t, "endpoint", "put", "evil", "--file", file).err)

	r := e.run(t, "endpoint", "list")
	require.NoError(t, r.err)
	require.NotRegexp(t, controlRe, r.out)
	require.Contains(t, r.out, `https://evil.example/\u009b2J`)
}
