package show

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

func TestClean(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name, in, want string
	}{
		{name: "Plain", in: "status 503: down, 10€", want: "status 503: down, 10€"},
		{name: "ClearScreenAndTitle", in: "\x1b[2J\x1b]0;x\x07", want: `\x1b[2J\x1b]0;x\a`},
		{name: "DEL", in: "a\x7fb", want: `a\x7fb`},
		{name: "C1", in: "a\u009b31mb", want: `a\u009b31mb`},
		{name: "InvalidUTF8", in: "a\xffb", want: `a\xffb`},
		{name: "ReplacementCharKept", in: "a\uFFFDb", want: "a\uFFFDb"},
		{name: "NewlineAndTab", in: "a\nb\tc", want: `a\nb\tc`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Clean(tt.in))
		})
	}
}

func TestLine(t *testing.T) {
	t.Parallel()

	require.Equal(t, `a b \x1b[2J`, Line("a \n\t b \x1b[2J", 20))
	require.Equal(t, "abcd...", Line("abcdefghij", 7))
}

func TestRelative(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	require.Equal(t, "in 1m58s", Relative(now.Add(118*time.Second+20*time.Millisecond), now))
	require.Equal(t, "3.2s ago", Relative(now.Add(-3210*time.Millisecond), now))
}

func TestRecord(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	next := now.Add(2 * time.Minute)
	n := &notify.Notification{
		ID: "order-1001", Topic: "order-notify", Channel: notify.ChannelWebhook, Target: "https://m.example/\x1b[2J",
		State: notify.StateScheduled, Attempts: 1, Backoff: []notify.Duration{0, notify.Duration(2 * time.Minute)},
		SendAt: now, NextAttemptAt: &next, CreatedAt: now, UpdatedAt: now,
		History: []notify.Attempt{{Attempt: 0, StartedAt: now, DurationMS: 12, Outcome: "retry", StatusCode: 503, Error: "status 503"}},
	}
	var buf bytes.Buffer
	require.NoError(t, Record(&buf, n, now))
	out := buf.String()
	require.Contains(t, out, `https://m.example/\x1b[2J`)
	require.Contains(t, out, "attempt 1 at 2026-03-01T09:32:00.000Z (in 2m0s)")
	require.Contains(t, out, "backoff       0s,2m")
	require.Regexp(t, `0\s+2026-03-01T09:30:00.000Z\s+12ms\s+retry\s+503\s+status 503`, out)
}

// TestRecordMarksAReplay: a replay that reset the attempts starts the
// numbering again, and the history says where, as nothing else in it does.
// An attempt given back at a dispatcher's shutdown (released) is recorded
// without being counted, so the next one has its number: no replay came
// there, and none is marked.
func TestRecordMarksAReplay(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	n := &notify.Notification{
		ID: "order-1003", Topic: "order-notify", Channel: notify.ChannelWebhook, Target: "https://m.example/",
		State: notify.StateSucceeded, Attempts: 1, Backoff: []notify.Duration{0, 0}, SendAt: now, CreatedAt: now, UpdatedAt: now,
		History: []notify.Attempt{
			{Attempt: 0, StartedAt: now, Outcome: notify.OutcomeReleased, Error: notify.ErrReleased.Error()},
			{Attempt: 0, StartedAt: now.Add(time.Second), Outcome: "retry", StatusCode: 503},
			{Attempt: 1, StartedAt: now.Add(2 * time.Second), Outcome: "dead", StatusCode: 503},
			{Attempt: 0, StartedAt: now.Add(time.Minute), Outcome: "succeeded", StatusCode: 200},
		},
	}
	var buf bytes.Buffer
	require.NoError(t, Record(&buf, n, now))
	out := buf.String()
	require.Regexp(t, `(?m)^0\s+2026-03-01T09:30:00.000Z\s+0s\s+released`, out)
	require.Regexp(t, `(?m)^0\s+2026-03-01T09:30:01.000Z`, out)
	require.Regexp(t, `(?m)^1\s+2026-03-01T09:30:02.000Z`, out)
	require.Regexp(t, `(?m)^0 \(replayed\)\s+2026-03-01T09:31:00.000Z\s+0s\s+succeeded`, out)
	require.Equal(t, 1, strings.Count(out, "(replayed)"))
}

// TestRecordEndpointAndPause: a notification to an endpoint names it
// rather than showing no target; one parked by a pause says so rather
// than showing no next attempt; a template name, which nothing checks, is
// escaped.
func TestRecordEndpointAndPause(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	n := &notify.Notification{
		ID: "order-1002", Topic: "order-notify", Channel: notify.ChannelWebhook, Endpoint: "acme-shop", Template: "\x1b[7mx",
		State: notify.StateScheduled, Attempts: 2, Backoff: []notify.Duration{0, 0, 0}, Paused: true,
		SendAt: now, CreatedAt: now, UpdatedAt: now,
	}
	var buf bytes.Buffer
	require.NoError(t, Record(&buf, n, now))
	out := buf.String()
	require.Regexp(t, `(?m)^endpoint\s+acme-shop$`, out)
	require.NotContains(t, out, "target")
	require.Regexp(t, `(?m)^template\s+\\x1b\[7mx$`, out)
	require.Regexp(t, `(?m)^next_attempt\s+attempt 2 when its topic or endpoint is resumed \(paused\)$`, out)
}

// TestRecordHidesTargetCredentials: herald status reads the store itself,
// but shows a target's user information as the API does, hidden, so that
// a terminal shared or pasted into a ticket does not pass on a receiver's
// password.
func TestRecordHidesTargetCredentials(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	n := &notify.Notification{
		ID: "order-1003", Topic: "order-notify", Channel: notify.ChannelWebhook, Target: "https://shop:s3cr3t@m.example/notify",
		State: notify.StateScheduled, Backoff: []notify.Duration{0}, SendAt: now, CreatedAt: now, UpdatedAt: now,
	}
	var buf bytes.Buffer
	require.NoError(t, Record(&buf, n, now))
	require.NotContains(t, buf.String(), "s3cr3t")
	require.Regexp(t, `(?m)^target\s+https://xxxxx@m.example/notify$`, buf.String())
}

func TestDestination(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n    notify.Notification
		want string
	}{
		{notify.Notification{Endpoint: "acme-shop"}, "endpoint acme-shop"},
		{notify.Notification{Target: "https://shop:s3cr3t@m.example/"}, "https://xxxxx@m.example/"},
		{notify.Notification{Target: "https://m.example/\x1b[2J"}, `https://m.example/\x1b[2J`},
		{notify.Notification{}, "-"},
	} {
		require.Equal(t, tt.want, Destination(&tt.n))
	}
}
