package policy_test

import (
	"strings"
	"testing"
	"time"

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

// TestReportPrintNamesTopicEndpoint prints the topics of a file whose
// merchant topic delivers to a registered endpoint: herald policy check
// names the endpoint where the topic's destination goes, rather than a dash
// that reads as "no destination".
func TestReportPrintNamesTopicEndpoint(t *testing.T) {
	t.Parallel()
	set, err := policy.NewSet(nil, map[string]policy.Topic{
		"order-notify": {Channel: notify.ChannelWebhook, Endpoint: "merchant-42"},
		"refunds":      {Channel: notify.ChannelWebhook, Target: "https://merchant.example/refunds"},
		"jobs":         {Channel: notify.ChannelPull},
	})
	require.NoError(t, err)

	var out strings.Builder
	require.NoError(t, policy.NewReport("policies.yaml", set).Print(&out))
	require.Regexp(t, `\norder-notify +webhook +- +- +endpoint merchant-42\n`, out.String())
	require.Regexp(t, `\nrefunds +webhook +- +- +https://merchant.example/refunds\n`, out.String())
	require.Regexp(t, `\njobs +pull +- +- +-\n`, out.String())
}

// century is the longest wait a policies file takes.
const century = notify.Duration(100 * 365 * 24 * time.Hour)

// TestSchedule: offsets from send_at add up the waits, and one later than
// a time.Duration can hold (about 292 years) is policy.ScheduleCeiling,
// never a negative or shorter duration.
func TestSchedule(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name    string
		backoff []notify.Duration
		want    []time.Duration
	}{
		{name: "Default", backoff: policy.BackoffDefault, want: []time.Duration{0, 0, 2 * time.Minute, 12 * time.Minute,
			22 * time.Minute, 82 * time.Minute, 202 * time.Minute, 562 * time.Minute, 24*time.Hour + 22*time.Minute}},
		{name: "Centuries", backoff: []notify.Duration{century, century, century, century},
			want: []time.Duration{time.Duration(century), 2 * time.Duration(century), policy.ScheduleCeiling, policy.ScheduleCeiling}},
		{name: "CeilingExactly", backoff: []notify.Duration{notify.Duration(policy.ScheduleCeiling - 1), 1, 0},
			want: []time.Duration{policy.ScheduleCeiling - 1, policy.ScheduleCeiling, policy.ScheduleCeiling}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, policy.Schedule(tt.backoff))
		})
	}
}

// TestReportPrintPastDurationRange prints the schedule of a policy whose
// last attempt starts 300 years after its first, which a time.Duration
// cannot hold: herald policy check says "more than 292 years" where it
// printed a negative duration, and the JSON report holds the ceiling.
func TestReportPrintPastDurationRange(t *testing.T) {
	t.Parallel()
	set, err := policy.NewSet(map[string]policy.Policy{
		"slow":   {Backoff: []notify.Duration{0, century, century, century}},
		"slower": {Backoff: []notify.Duration{century, century, century, century}},
	}, nil)
	require.NoError(t, err)

	report := policy.NewReport("policies.yaml", set)
	var out strings.Builder
	require.NoError(t, report.Print(&out))
	require.NotContains(t, out.String(), "-")
	require.Contains(t, out.String(), "policy slow: 4 attempts, the last more than 292 years after the first, then dead")
	require.Contains(t, out.String(), "policy slower: 4 attempts, the first 876000h after the send time, the last more than 292 years after the first, then dead")
	require.Regexp(t, `\n  2 +876000h +1752000h\n  3 +876000h +more than 292 years\n`, out.String())

	for _, p := range report.Policies {
		if p.Name == policy.DefaultName {
			continue
		}
		since := make([]notify.Duration, len(p.Schedule))
		for i, a := range p.Schedule {
			since[i] = a.SinceFirst
		}
		require.Equal(t, []notify.Duration{0, century, 2 * century, notify.Duration(policy.ScheduleCeiling)}, since, p.Name)
	}
}

// TestReportPrintCounts: one of a thing is said in the singular, and a
// single attempt has no last one after it.
func TestReportPrintCounts(t *testing.T) {
	t.Parallel()
	set, err := policy.NewSet(map[string]policy.Policy{"once": {Backoff: []notify.Duration{0}}},
		map[string]policy.Topic{"jobs": {Channel: notify.ChannelPull, Policy: "once"}})
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, policy.NewReport("policies.yaml", set).Print(&out))
	require.Contains(t, out.String(), "policy once: 1 attempt, then dead\n")
	require.Contains(t, out.String(), "policies.yaml: ok, 2 policies, 1 topic\n")
}
