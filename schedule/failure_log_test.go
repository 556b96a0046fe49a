package schedule

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/heraldtest"
)

// TestFailureLog follows one store call through two runs of failures on a
// stub clock: each run is warned of at once, then reminded of every
// failureRemindEvery with what went unlogged, and its end is logged once.
func TestFailureLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clock := heraldtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	f := &failureLog{
		log:     slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime})).With("queue", "push"),
		nowFunc: clock.Now, warning: "reserve failed", recovered: "reserve recovered",
	}
	refused := errors.New("refused")
	for _, step := range []struct {
		name    string
		advance time.Duration
		fails   bool
		want    string
	}{
		{name: "FirstFailureWarns", fails: true,
			want: `level=WARN msg="reserve failed" queue=push error=refused retry_in=10ms`},
		{name: "RepeatIsQuiet", advance: 10 * time.Second, fails: true},
		{name: "QuietUntilTheInterval", advance: 19 * time.Second, fails: true},
		{name: "Reminder", advance: time.Second, fails: true,
			want: `level=WARN msg="reserve failed" queue=push error=refused retry_in=10ms failing_since=2026-01-02T03:04:05.000Z failures=4 suppressed=2`},
		{name: "QuietAfterTheReminder", advance: 29 * time.Second, fails: true},
		{name: "Recovery", advance: 1500 * time.Millisecond, want: `level=INFO msg="reserve recovered" queue=push after=1m0.5s failures=5`},
		{name: "WorkingIsQuiet", advance: time.Second},
		{name: "NewRunWarnsAtOnce", advance: time.Second, fails: true,
			want: `level=WARN msg="reserve failed" queue=push error=refused retry_in=10ms`},
		{name: "ShortRunRecovers", advance: 250 * time.Millisecond, want: `level=INFO msg="reserve recovered" queue=push after=250ms failures=1`},
		// A call that flaps, failing and working by turns (a slot migrating
		// on a Cluster, which some calls meet and others do not), is not
		// warned of at every turn: each run that begins within
		// failureRemindEvery of the last warning goes unlogged, and the
		// next warning counts them.
		{name: "FlapIsQuiet", advance: 100 * time.Millisecond, fails: true},
		{name: "FlapEndIsQuiet", advance: 100 * time.Millisecond},
		{name: "FlapAgain", advance: 100 * time.Millisecond, fails: true},
		{name: "FlapLongerIsQuiet", advance: 100 * time.Millisecond, fails: true},
		{name: "FlapEndAgain", advance: 100 * time.Millisecond},
		{name: "FlapsReminded", advance: 30 * time.Second, fails: true,
			want: `level=WARN msg="reserve failed" queue=push error=refused retry_in=10ms flapped=2`},
		{name: "RecoveryAfterFlaps", advance: time.Second, want: `level=INFO msg="reserve recovered" queue=push after=1s failures=1`},
	} {
		buf.Reset()
		clock.Advance(step.advance)
		if step.fails {
			f.failed(context.Background(), refused, "retry_in", 10*time.Millisecond)
		} else {
			f.ok(context.Background())
		}
		want := step.want
		if want != "" {
			want += "\n"
		}
		require.Equal(t, want, buf.String(), step.name)
	}
}
