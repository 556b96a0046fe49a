package policy_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
)

// TestReportPrintEscapesFileText prints the report of a file whose policy
// name and template carry terminal control sequences: herald policy check
// shows them escaped, never sends them to the terminal.
func TestReportPrintEscapesFileText(t *testing.T) {
	t.Parallel()
	const name = "p\x1b]0;owned\a\x1b[2J\rq"
	set, err := policy.NewSet(map[string]policy.Policy{name: {Backoff: []notify.Duration{0}}},
		map[string]policy.Topic{"orders": {Channel: notify.ChannelPull, Policy: name, Template: "t\x1b[31m.json"}})
	require.NoError(t, err)

	var out strings.Builder
	require.NoError(t, policy.NewReport("policies.yaml", set).Print(&out))
	require.NotContains(t, out.String(), "\x1b")
	require.NotContains(t, out.String(), "\a")
	require.NotContains(t, out.String(), "\r")
	require.Contains(t, out.String(), `policy p\x1b]0;owned\a\x1b[2J\rq:`)
	require.Contains(t, out.String(), `t\x1b[31m.json`)
}
