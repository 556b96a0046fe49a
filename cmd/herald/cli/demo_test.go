package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDemo(t *testing.T) {
	t.Parallel()

	t.Run("EndToEnd", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		r := newEnv(t, "").run(t, "demo", "--speed", "4")
		require.NoError(t, r.err, r.out+r.logs)
		require.Less(t, time.Since(start), 20*time.Second)

		require.Contains(t, r.logs, "EMBEDDED REDIS", "the demo runs on the embedded Redis, whatever the config says")
		require.Contains(t, r.out, "SMS provider: text to +14155550100: \"Hi Ada, a reminder of your appointment with Dr. Lee at ")
		require.Regexp(t, `demo-order-1001\s+webhook to /merchant/notify\s+attempt 0 of 5: failed, status 500 Internal Server Error: busy; attempt 1 due at \+\d+\.\d\ds`, r.out)
		require.Contains(t, r.out, "payment provider: query 3 for trade 1001: TRADE_SUCCESS")
		require.Contains(t, r.out, "merchant: on_done webhook: the trade is TRADE_SUCCESS")
		require.Regexp(t, `demo-order-1002\s+webhook to /merchant/broken\s+attempt 4 of 5: failed, status 503 .*; DEAD: no attempts left`, r.out)
		require.Contains(t, r.out, "demo-order-1002 is dead after 5 attempts.")
		require.Regexp(t, `demo-order-1002\s+webhook to /merchant/broken\s+attempt 5 \(replayed\): succeeded \(HTTP 200\)`, r.out)

		for _, row := range []string{
			`demo-reminder-42\s+appointment-reminder\s+sms\s+succeeded\s+1\s+the SMS gateway accepted 1 text to \+14155550100`,
			`demo-order-1001\s+order-notify\s+webhook\s+succeeded\s+3\s+the merchant answered 500 "busy", then 200 "fail", then 200 "success"`,
			`demo-poll-1001\s+payment-poll\s+poll\s+succeeded\s+3\s+the provider answered WAIT_BUYER_PAY, WAIT_BUYER_PAY, TRADE_SUCCESS; on_done webhook to the merchant: TRADE_SUCCESS`,
			`demo-order-1002\s+merchant-notify\s+webhook\s+succeeded\s+6\s+dead after 5 attempts \(503\), replayed, then delivered`,
		} {
			require.Regexp(t, regexp.MustCompile(`(?m)^`+row+`$`), r.out)
		}
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
	})
}
