package show

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/notify"
)

// timeLayout prints times in tables and records: RFC 3339 in UTC, to the
// millisecond, since attempts of one notification can be milliseconds apart.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Time prints t in UTC, to the millisecond.
func Time(t time.Time) string { return t.UTC().Format(timeLayout) }

// Relative says how far t is from now: "in 1m58s" or "3.2s ago", to the
// tenth of a second.
func Relative(t, now time.Time) string {
	d := t.Sub(now).Round(100 * time.Millisecond)
	if d >= 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

// Destination says where n goes, in one cell of a table: "endpoint NAME",
// or its target with the user information hidden as the API hides it, or
// "-" (a pull job's).
func Destination(n *notify.Notification) string {
	if n.Endpoint != "" {
		return "endpoint " + Clean(n.Endpoint)
	}
	return Dash(Clean(notify.RedactedURL(n.Target)))
}

// Record prints a notification as herald status shows it: its fields, then
// its history as a table. now places the next attempt in time. Text from
// outside (target, template, payload, errors) goes through Clean or Line, so it
// cannot drive the terminal.
func Record(out io.Writer, n *notify.Notification, now time.Time) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(key, value string) { fmt.Fprintf(tw, "%s\t%s\n", key, value) }
	row("id", n.ID)
	row("topic", n.Topic)
	row("channel", n.Channel)
	if n.Endpoint != "" {
		row("endpoint", Clean(n.Endpoint))
	} else {
		row("target", Dash(Clean(notify.RedactedURL(n.Target))))
	}
	row("template", Dash(Clean(n.Template)))
	row("policy", Dash(n.Policy))
	row("state", string(n.State))
	if n.OrderKey != "" {
		row("order_key", n.OrderKey)
	}
	if n.WaitingFor != "" {
		row("waiting_for", n.WaitingFor)
	}
	row("attempts", fmt.Sprintf("%d made of %d", n.Attempts, len(n.Backoff)))
	row("backoff", Backoff(n.Backoff))
	row("send_at", Time(n.SendAt))
	switch {
	case n.State == notify.StateReserved && n.Deadline != nil:
		row("next_attempt", fmt.Sprintf("attempt %d running, reserved until %s", n.Attempts, Time(*n.Deadline)))
	case n.Paused:
		row("next_attempt", fmt.Sprintf("attempt %d when its topic or endpoint is resumed (paused)", n.Attempts))
	case n.NextAttemptAt != nil:
		row("next_attempt", fmt.Sprintf("attempt %d at %s (%s)", n.Attempts, Time(*n.NextAttemptAt), Relative(*n.NextAttemptAt, now)))
	default:
		row("next_attempt", "-")
	}
	row("created_at", Time(n.CreatedAt))
	row("updated_at", Time(n.UpdatedAt))
	row("payload", Dash(Line(string(n.Payload), 200)))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(n.History) == 0 {
		_, err := fmt.Fprintln(out, "\nno attempts yet")
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tSTARTED\tDURATION\tOUTCOME\tSTATUS\tERROR")
	prev, prevReleased := -1, false
	for _, a := range n.History {
		status := "-"
		if a.StatusCode != 0 {
			status = strconv.Itoa(a.StatusCode)
		}
		// A replay that reset the attempts numbers them from 0 again, and
		// nothing else in the history tells where it came. An attempt given
		// back (released) is recorded without being counted, so the one
		// after it has its number.
		attempt := strconv.Itoa(a.Attempt)
		if a.Attempt < prev || (a.Attempt == prev && !prevReleased) {
			attempt += " (replayed)"
		}
		prev, prevReleased = a.Attempt, a.Outcome == notify.OutcomeReleased
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", attempt, Time(a.StartedAt),
			time.Duration(a.DurationMS)*time.Millisecond, a.Outcome, status, Dash(Line(a.Error, 100)))
	}
	return tw.Flush()
}

// Backoff writes a backoff array as a policy does: "0s,2m,1h".
func Backoff(b []notify.Duration) string {
	waits := make([]string, len(b))
	for i, d := range b {
		waits[i] = d.String()
	}
	return strings.Join(waits, ",")
}
