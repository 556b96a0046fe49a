package schedule_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
)

// logLinesIn returns the lines of the log file at path that hold every one
// of parts.
func logLinesIn(t *testing.T, path string, parts ...string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Error(err) // not FailNow: require.Eventually calls this on a goroutine of its own
	}
	var out []string
lines:
	for line := range strings.Lines(string(b)) {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue lines
			}
		}
		out = append(out, line)
	}
	return out
}

// TestOutageLogsOnceAndRecovery: while Redis is down every loop of the
// dispatcher fails again and again, with backoffs of milliseconds; each
// kind of failure is warned of once, not once per try, and once Redis is
// back each says so once, with how long it failed. What was enqueued before
// the outage is delivered after it, and an outcome that ended during it is
// recorded.
func TestOutageLogsOnceAndRecovery(t *testing.T) {
	t.Parallel()
	srv, b := setupOutage(t, "quiet-outage")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "dispatcher.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = logFile.Close() })
	logs := func(parts ...string) []string { return logLinesIn(t, logFile.Name(), parts...) }
	t.Cleanup(func() { t.Logf("dispatcher logs:\n%s", strings.Join(logs(), "")) })
	rec, held := holdFirstAttempt("in-flight")
	b.start(t, schedule.Config{Senders: map[string]notify.Sender{notify.ChannelWebhook: rec},
		PollInterval: 100 * time.Millisecond, ReapInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	ttr := notify.Duration(time.Minute) // the outcome outlives the outage
	b.enqueue(t, "in-flight", ms(0, 10), 0, func(r *notify.Request) { r.TTR = &ttr })
	held.waitStarted(t)
	const due = 5
	for i := range due {
		b.enqueue(t, fmt.Sprintf("due-in-outage-%d", i), ms(0, 10), 300*time.Millisecond)
	}

	srv.Kill()
	close(held.release) // the attempt ends; its outcome waits for Redis
	const outage = 3 * time.Second
	time.Sleep(outage) // the outage under test
	require.NoError(t, srv.Restart())
	// The loops failed every few ms: hundreds of tries, a handful of lines.
	warnings := logs("level=WARN")
	require.NotEmpty(t, warnings, "the outage is warned of")
	require.LessOrEqual(t, len(warnings), 6, "warnings during a %s outage:\n%s", outage, warnings)
	for _, what := range []string{"reserve failed", "reaping expired reservations failed",
		"sweeping finished records failed", "finish failed"} {
		got := logs("level=WARN", what)
		require.Len(t, got, 1, "warnings of %q", what)
		require.Contains(t, got[0], "error=", "the warning gives the error")
	}

	b.waitState(t, "in-flight", notify.StateSucceeded)
	for i := range due {
		b.waitState(t, fmt.Sprintf("due-in-outage-%d", i), notify.StateSucceeded)
	}
	require.Equal(t, 1, rec.attempts("in-flight"), "its outcome was recorded, not retried")
	for _, what := range []string{"reserve recovered", "reaping expired reservations recovered",
		"sweeping finished records recovered", "finish recovered"} {
		require.Eventually(t, func() bool { return len(logs("level=INFO", what, "after=", "failures=")) == 1 },
			10*time.Second, 5*time.Millisecond, "no line saying %q", what)
	}
}
