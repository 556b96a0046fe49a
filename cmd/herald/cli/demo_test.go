package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDemo(t *testing.T) {
	t.Parallel()

	t.Run("EndToEnd", func(t *testing.T) {
		t.Parallel()
		// Signed, as with configs/demo.yaml.
		config := writeConfig(t, strings.Replace(readFile(t, newEnv(t, "").config),
			"webhook: {", "webhook: {secret: whsec_ZGVtby10ZXN0LXNpZ25pbmcta2V5, ", 1))
		start := time.Now()
		r := run(t, []string{"--config", config, "demo", "--speed", "4"})
		require.NoError(t, r.err, r.out+r.logs)
		require.Less(t, time.Since(start), 20*time.Second)

		require.Contains(t, r.logs, "EMBEDDED REDIS", "the demo runs on the embedded Redis, whatever the config says")

		// The appointment service moves one appointment and cancels another:
		// the moved reminder goes out 30 demo minutes (0.75s at speed 4)
		// later than it was first due.
		due := stampOf(t, r.out, `enqueued demo-reminder-42 .*; attempt 0 due at \+(\d+\.\d\d)s`)
		moved := stampOf(t, r.out, `demo-reminder-42 moved: .* with replace; attempt 0 now due at \+(\d+\.\d\d)s`)
		require.InDelta(t, 0.75, moved-due, 0.011)
		require.GreaterOrEqual(t, stampOf(t, r.out, `\+(\d+\.\d\d)s  demo-reminder-42 sms +to \+14155550100 +attempt 0 of 4: succeeded \(HTTP 200\)`), moved)
		require.Contains(t, r.out, "SMS provider: text to +14155550100: \"Hi Ada, a reminder of your appointment with Dr. Lee at ")
		require.Contains(t, r.out, "demo-reminder-43 cancelled: the appointment is cancelled")
		require.NotContains(t, r.out, "text to +14155550143")

		// The merchant checks every payment notification's signature.
		for attempt := range 3 {
			require.Contains(t, r.out, fmt.Sprintf("merchant: webhook-id demo-order-1001, Herald-Attempt %d: signature verified\n", attempt))
		}
		require.Regexp(t, `demo-order-1001\s+webhook to /merchant/notify\s+attempt 0 of 5: failed, status 500 Internal Server Error: busy; attempt 1 due at \+\d+\.\d\ds`, r.out)
		require.Contains(t, r.out, "payment provider: query 3 for trade 1001: TRADE_SUCCESS")
		require.Contains(t, r.out, "merchant: on_done webhook: the trade is TRADE_SUCCESS")
		require.Regexp(t, `demo-order-1002\s+webhook to /merchant/broken\s+attempt 4 of 5: failed, status 503 .*; DEAD: no attempts left`, r.out)
		require.Contains(t, r.out, "demo-order-1002 is dead after 5 attempts.")
		require.Regexp(t, `demo-order-1002\s+webhook to /merchant/broken\s+attempt 5 \(replayed\): succeeded \(HTTP 200\)`, r.out)

		// A pull worker fails the job once, then acknowledges it.
		require.Regexp(t, `demo-invoice-42\s+pull\s+to the worker\s+attempt 0 of 5: failed, nack: PDF renderer down; attempt 1 due at \+\d+\.\d\ds`, r.out)
		require.Regexp(t, `demo-invoice-42\s+pull\s+to the worker\s+attempt 1 of 5: succeeded\n`, r.out)

		// Lines come in the order of their times: each is stamped as it
		// is printed, an attempt's when its outcome is known.
		var last float64
		for _, m := range regexp.MustCompile(`(?m)^ *\+(\d+\.\d\d)s  (.*)$`).FindAllStringSubmatch(r.out, -1) {
			at, err := strconv.ParseFloat(m[1], 64)
			require.NoError(t, err)
			require.GreaterOrEqual(t, at, last, "%q printed after a later line", m[0])
			last = at
		}

		for _, row := range []string{
			`demo-reminder-42\s+appointment-reminder\s+sms\s+succeeded\s+1\s+moved before it was due; the SMS gateway accepted 1 text to \+14155550100`,
			`demo-reminder-43\s+appointment-reminder\s+sms\s+cancelled\s+0\s+cancelled before it was due; the SMS gateway accepted 0 texts to \+14155550143`,
			`demo-order-1001\s+order-notify\s+webhook\s+succeeded\s+3\s+every signature verified; the merchant answered 500 "busy", then 200 "fail", then 200 "success"`,
			`demo-poll-1001\s+payment-poll\s+poll\s+succeeded\s+3\s+the provider answered WAIT_BUYER_PAY, WAIT_BUYER_PAY, TRADE_SUCCESS; on_done webhook to the merchant: TRADE_SUCCESS`,
			`demo-order-1002\s+merchant-notify\s+webhook\s+succeeded\s+6\s+dead after 5 attempts \(503\), replayed, then delivered`,
			`demo-invoice-42\s+jobs\s+pull\s+succeeded\s+2\s+the pull worker answered nack "PDF renderer down", then ack`,
		} {
			require.Regexp(t, regexp.MustCompile(`(?m)^`+row+`$`), r.out)
		}
	})

	t.Run("Interrupted", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		out := &interrupter{cancel: func() { cancel(errors.New("interrupt signal received")) }}
		var logs bytes.Buffer
		err := execute(ctx, newApp(Deps{Out: out, Err: &logs}), []string{"--config", newEnv(t, "").config, "demo"})
		require.EqualError(t, err, "demo: stopped before the end: interrupt signal received")
		require.Contains(t, out.String(), "Summary after ")
		// Stopped before the reminders and the first poll were due, and
		// maybe before the appointments changed: the summary says what
		// happened, not what the full run tells.
		require.Regexp(t, `(?m)^demo-reminder-42\s+appointment-reminder\s+sms\s+scheduled\s+0\s+(moved before it was due; )?the SMS gateway accepted 0 texts to \+14155550100$`, out.String())
		require.Regexp(t, `(?m)^demo-poll-1001\s+payment-poll\s+poll\s+scheduled\s+0\s+the provider answered nothing; on_done webhook to the merchant: -$`, out.String())
	})

	t.Run("BadSpeed", func(t *testing.T) {
		t.Parallel()
		r := newEnv(t, "").run(t, "demo", "--speed", "0")
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "--speed")
	})

	t.Run("PoliciesWithoutItsTopics", func(t *testing.T) {
		t.Parallel()
		policies := filepath.Join(t.TempDir(), "policies.yaml")
		require.NoError(t, os.WriteFile(policies, []byte("policies: {}\n"), 0o600))
		config := writeConfig(t, "policies_file: "+policies+"\n")
		r := run(t, []string{"--config", config, "demo"})
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "has no topic appointment-reminder")
	})

	t.Run("NoConfigFile", func(t *testing.T) {
		t.Parallel()
		// Tests run in the package's folder, where configs/demo.yaml is not.
		r := run(t, []string{"demo"})
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "configs/demo.yaml")
		require.ErrorContains(t, r.err, "run herald demo from the repository root, or name a config file with --config")
	})
}

// stampOf returns the time since the start, in seconds, that the first
// submatch of the demo output's line matching re gives.
func stampOf(t *testing.T, out, re string) float64 {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	require.NotNil(t, m, "no line matches %s in\n%s", re, out)
	f, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return f
}

// interrupter is the demo's output; it interrupts the demo, as Ctrl-C
// would, once the demo has enqueued its notifications.
type interrupter struct {
	cancel func()

	mu  sync.Mutex
	out bytes.Buffer
}

func (w *interrupter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(p, []byte("enqueued demo-invoice-42")) {
		w.cancel()
	}
	return w.out.Write(p)
}

func (w *interrupter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}
