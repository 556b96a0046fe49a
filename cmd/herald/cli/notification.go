package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/show"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
)

// withClient runs do, for a command that reads or changes notifications,
// on the Go client of the configured Redis (never of an embedded one,
// which would be empty): the same validation and defaults as the API.
// withPolicies loads the policies file, for commands that resolve requests.
// The client and the connection are closed when do returns.
func (c *app) withClient(cmd *cobra.Command, withPolicies bool, do func(cl *client.Client) error) error {
	return c.withPolicies(cmd, clientLoads{policies: withPolicies}, func(cl *client.Client, _ *policy.Set) error { return do(cl) })
}

// clientLoads says what withPolicies reads for the client besides Redis.
type clientLoads struct {
	// policies loads the policies file.
	policies bool
	// templates loads templates_dir, so that a request naming a template
	// it does not hold is refused as the API refuses it. Only a command
	// whose request names one needs it: an operator may run herald where
	// templates_dir is not.
	templates bool
}

// withPolicies is withClient for a command that looks at the policies
// too: do gets them, nil unless load.policies.
func (c *app) withPolicies(cmd *cobra.Command, load clientLoads, do func(cl *client.Client, set *policy.Set) error) error {
	w, err := c.base.wire(cmd, false)
	if err != nil {
		return err
	}
	defer w.Close()
	var set *policy.Set
	var policies func() *policy.Set
	if load.policies {
		if set, err = c.base.loadConfigPolicies(); err != nil {
			return err
		}
		policies = func() *policy.Set { return set }
	}
	if load.templates {
		if err := w.loadTemplates(); err != nil {
			return err
		}
	}
	cl, err := w.newClient(policies)
	if err != nil {
		return err
	}
	defer cl.Close()
	return do(cl, set)
}

// recordCommand completes cmd, a command on the notification its ID
// argument names: it checks the id (a mistyped one is a usage error, not a
// lookup that cannot succeed), connects, runs do and prints the record it
// returns as showRecord does, or fails with "NAME ID: " and do's error.
func (c *app) recordCommand(cmd *cobra.Command, verb string,
	do func(ctx context.Context, cl *client.Client, id string) (*notify.Notification, error),
) *cobra.Command {
	var asJSON bool
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id := args[0]
		if err := checkID(id); err != nil {
			return err
		}
		return c.withClient(cmd, false, func(cl *client.Client) error {
			n, err := do(cmd.Context(), cl, id)
			if errors.Is(err, notify.ErrNotFound) {
				err = fmt.Errorf("%w: %s", err, c.notFoundWhy())
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", cmd.Name(), id, err)
			}
			return c.showRecord(asJSON, verb, n)
		})
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the record as JSON")
	return withConfig(cmd)
}

// checkID refuses, with a *UsageError, what is not a notification id: a
// mistyped id is a usage error, not a lookup that cannot succeed.
func checkID(id string) error {
	if !notify.ValidID(id) {
		return &UsageError{Err: fmt.Errorf("%q is not a notification id: ids match [A-Za-z0-9._:-]{1,128}", id)}
	}
	return nil
}

// checkEndpointName refuses, with a *UsageError, what no endpoint can be
// named, as checkID refuses what is not a notification id.
func checkEndpointName(name string) error {
	if !endpoint.ValidName(name) {
		return &UsageError{Err: fmt.Errorf("%q is not an endpoint name: names match [A-Za-z0-9._:-]{1,128}", name)}
	}
	return nil
}

// notFoundWhy says why a notification may not be found: a record an
// operator saw last week has expired, not vanished, and one enqueued under
// another namespace is not in this one.
func (c *app) notFoundWhy() string {
	cfg := c.base.Config
	why := fmt.Sprintf("never enqueued in namespace %s, or purged from the dead letters", cfg.Namespace)
	if cfg.Retention > 0 {
		why += fmt.Sprintf(", or succeeded or cancelled more than %s ago (retention)", notify.Duration(cfg.Retention))
	}
	if cfg.DeadRetention > 0 {
		why += fmt.Sprintf(", or dead more than %s ago (dead_retention)", notify.Duration(cfg.DeadRetention))
	}
	return why
}

// showRecord prints n as status shows it, after a line "verb ID" when verb
// is set, or as JSON, in the API's shape; either way with its credentials
// hidden, as the API hides them.
func (c *app) showRecord(asJSON bool, verb string, n *notify.Notification) error {
	n = api.Redacted(n)
	if asJSON {
		return printJSON(c.base.Out, n)
	}
	if verb != "" {
		fmt.Fprintf(c.base.Out, "%s %s\n\n", verb, n.ID)
	}
	return show.Record(c.base.Out, n, time.Now())
}

func (c *app) statusCommand() *cobra.Command {
	return readOnly(c.recordCommand(&cobra.Command{
		Use:   "status ID",
		Short: "Show a notification: its state, schedule and attempt history",
		Long: `Status prints a notification's record as Redis holds it: state, attempts
made, the backoff array it carries, when the next attempt is due, and the
history of its attempts (0-based, as receivers see them in Herald-Attempt),
with each outcome, status code and error. --json prints the record as
GET /v1/notifications/{id} answers.`,
		Example: "  herald status order-1001\n  herald status order-1001 --json",
	}, "", func(ctx context.Context, cl *client.Client, id string) (*notify.Notification, error) {
		return cl.Get(ctx, id)
	}))
}

func (c *app) cancelCommand() *cobra.Command {
	return c.recordCommand(&cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a scheduled notification",
		Long: `Cancel stops a notification that is scheduled or being attempted: no further
attempt starts, and an attempt running now cannot finish it. Cancelling a
cancelled notification changes nothing; one that succeeded or is dead cannot
be cancelled (exit status 1). Prints the cancelled record.`,
		Example: "  herald cancel appt-42-reminder",
	}, "cancelled", func(ctx context.Context, cl *client.Client, id string) (*notify.Notification, error) {
		n, err := cl.Cancel(ctx, id)
		if errors.Is(err, notify.ErrFinished) {
			return nil, fmt.Errorf("%w: it has already succeeded or is dead", err)
		}
		return n, err
	})
}
