package cli

import (
	"context"
	"os"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/policy"
)

func (c *app) policyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with policies files",
	}
	var asJSON bool
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Check a policies file and print each policy's schedule",
		Long: `Check loads a policies file as a running Herald would and prints, for each
policy, when each attempt starts if every attempt fails: its wait (after the
send time for attempt 0, after the previous failure for the others) and the
time since the first attempt. Jitter and a receiver's Retry-After can only make
the real waits longer. Then it prints the topics, with the credentials in their
targets and on_done URLs shown as xxxxx, as the API and the dashboard show a
target.

A bad file exits with status 2 and names the offending key, such as
policies.merchant-notify.backoff[2].`,
		Example: "  herald policy check configs/policies.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			s, err := loadPolicies(args[0])
			if err != nil {
				return err
			}
			report := policy.NewReport(args[0], s)
			return c.output(asJSON, report, report.Print)
		},
	}
	check.Flags().BoolVar(&asJSON, "json", false, "print the policies, their schedules and the topics as JSON")
	cmd.AddCommand(check)
	return cmd
}

// StartPolicies loads the policies file the configuration names and keeps
// it current: the Watcher rereads the file when it changes and on SIGHUP,
// until stop is called or ctx ends. A file that does not load is a
// *UsageError naming the offending key. reloaded, when not nil, is called
// after every reload, applied or refused, with the policies in force. Call
// it only from a command built with withConfig.
func (b *Base) StartPolicies(ctx context.Context, reloaded func(*policy.Set)) (w *policy.Watcher, stop func(), err error) {
	cfg := &policy.WatcherConfig{Path: b.Config.PoliciesFile, Logger: b.Logger, ReloadSignals: []os.Signal{syscall.SIGHUP}}
	if reloaded != nil {
		cfg.ReloadedFunc = func(current *policy.Set, _ error) { reloaded(current) }
	}
	w, err = policy.NewWatcher(cfg)
	if err != nil {
		return nil, nil, relativePathHint(&UsageError{Err: err}, "policies_file", cfg.Path)
	}
	w.Start(ctx)
	return w, w.Stop, nil
}
