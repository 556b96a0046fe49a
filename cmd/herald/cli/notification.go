package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
)

// openClient connects a command that reads or changes notifications to the
// configured Redis (never to an embedded one, which would be empty) and
// returns the Go client on it: the same validation and defaults as the API.
// withPolicies loads the policies file, for commands that resolve requests.
// Call done when finished.
func (c *app) openClient(cmd *cobra.Command, withPolicies bool) (cl *client.Client, done func(), err error) {
	w, err := c.base.wire(cmd, false)
	if err != nil {
		return nil, nil, err
	}
	var policies func() *policy.Set
	if withPolicies {
		set, err := w.loadPolicies()
		if err != nil {
			w.Close()
			return nil, nil, err
		}
		policies = func() *policy.Set { return set }
	}
	if cl, err = w.newClient(policies); err != nil {
		w.Close()
		return nil, nil, err
	}
	return cl, func() { _ = cl.Close(); w.Close() }, nil
}

// onRecord runs a command on the notification its ID argument names: it
// checks the id (a mistyped one is a usage error, not a lookup that cannot
// succeed), connects, runs do and prints the record it returns, after a
// line "verb ID" when verb is set, or as JSON.
func (c *app) onRecord(cmd *cobra.Command, args []string, asJSON bool, verb string,
	do func(cl *client.Client, id string) (*notify.Notification, error),
) error {
	id := args[0]
	if !notify.ValidID(id) {
		return &UsageError{Err: fmt.Errorf("%q is not a notification id: ids match [A-Za-z0-9._:-]{1,128}", id)}
	}
	cl, done, err := c.openClient(cmd, false)
	if err != nil {
		return err
	}
	defer done()
	n, err := do(cl, id)
	switch {
	case err != nil:
		return err
	case asJSON:
		return printJSON(c.base.Out, n)
	case verb != "":
		fmt.Fprintf(c.base.Out, "%s %s\n\n", verb, n.ID)
	}
	return printRecord(c.base.Out, n, time.Now())
}

func (c *app) statusCommand() *cobra.Command {
	var asJSON bool
	cmd := withConfig(&cobra.Command{
		Use:   "status ID",
		Short: "Show a notification: its state, schedule and attempt history",
		Long: `Status prints a notification's record as Redis holds it: state, attempts
made, the backoff array it carries, when the next attempt is due, and the
history of its attempts (0-based, as receivers see them in Herald-Attempt),
with each outcome, status code and error. --json prints the record as
GET /v1/notifications/{id} answers.`,
		Example: "  herald status order-1001\n  herald status order-1001 --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.onRecord(cmd, args, asJSON, "", func(cl *client.Client, id string) (*notify.Notification, error) {
				n, err := cl.Get(cmd.Context(), id)
				if err != nil {
					return nil, fmt.Errorf("status %s: %w", id, err)
				}
				return n, nil
			})
		},
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the record as JSON")
	return cmd
}

func (c *app) cancelCommand() *cobra.Command {
	var asJSON bool
	cmd := withConfig(&cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a scheduled notification",
		Long: `Cancel stops a notification that is scheduled or being attempted: no further
attempt starts, and an attempt running now cannot finish it. Cancelling a
cancelled notification changes nothing; one that succeeded or is dead cannot
be cancelled (exit status 1). Prints the cancelled record.`,
		Example: "  herald cancel appt-42-reminder",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.onRecord(cmd, args, asJSON, "cancelled", func(cl *client.Client, id string) (*notify.Notification, error) {
				n, err := cl.Cancel(cmd.Context(), id)
				if errors.Is(err, notify.ErrFinished) {
					return nil, fmt.Errorf("cancel %s: %w: it has already succeeded or is dead", id, err)
				}
				if err != nil {
					return nil, fmt.Errorf("cancel %s: %w", id, err)
				}
				return n, nil
			})
		},
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the record as JSON")
	return cmd
}

// printRecord prints a notification as status shows it: its fields, then
// its history as a table. now places the next attempt in time.
func printRecord(out io.Writer, n *notify.Notification, now time.Time) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(key, value string) { fmt.Fprintf(tw, "%s\t%s\n", key, value) }
	row("id", n.ID)
	row("topic", n.Topic)
	row("channel", n.Channel)
	row("target", dash(n.Target))
	row("template", dash(n.Template))
	row("policy", dash(n.Policy))
	row("state", string(n.State))
	row("attempts", fmt.Sprintf("%d made of %d", n.Attempts, len(n.Backoff)))
	backoff := make([]string, len(n.Backoff))
	for i, d := range n.Backoff {
		backoff[i] = shortDuration(d)
	}
	row("backoff", strings.Join(backoff, ","))
	row("send_at", formatTime(n.SendAt))
	switch {
	case n.State == notify.StateReserved && n.Deadline != nil:
		row("next_attempt", fmt.Sprintf("attempt %d running, reserved until %s", n.Attempts, formatTime(*n.Deadline)))
	case n.NextAttemptAt != nil:
		row("next_attempt", fmt.Sprintf("attempt %d at %s (%s)", n.Attempts, formatTime(*n.NextAttemptAt), relative(*n.NextAttemptAt, now)))
	default:
		row("next_attempt", "-")
	}
	row("created_at", formatTime(n.CreatedAt))
	row("updated_at", formatTime(n.UpdatedAt))
	row("payload", dash(truncate(string(n.Payload), 200)))
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
	for _, a := range n.History {
		status := "-"
		if a.StatusCode != 0 {
			status = strconv.Itoa(a.StatusCode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, formatTime(a.StartedAt),
			time.Duration(a.DurationMS)*time.Millisecond, a.Outcome, status, dash(truncate(strings.Join(strings.Fields(a.Error), " "), 100)))
	}
	return tw.Flush()
}
