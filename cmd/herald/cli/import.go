package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/asynqimport"
)

func (c *app) importCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "import", Short: "Bring another queue's tasks into Herald"}
	cmd.AddCommand(c.importAsynqCommand())
	return cmd
}

func (c *app) importAsynqCommand() *cobra.Command {
	var (
		cfg    asynqimport.Config
		state  string
		maps   []string
		asJSON bool
	)
	cmd := withConfig(&cobra.Command{
		Use:   "asynq",
		Short: "Move an asynq deployment's tasks into Herald",
		Long: `Import reads one queue of an asynq deployment with asynq's Inspector and
enqueues its scheduled, retry, pending and archived tasks into the configured
Herald, each under its asynq task id, with its payload (JSON as it is, other
bytes as a base64 string), its due time and the attempts already made;
archived tasks go to the dead-letter set with their last error. Each task type
goes to the topic (and policy) its --map names; other types are skipped.
Tasks name no receiver, so a webhook, poll or sms topic must name its
endpoint or target in the policies file, and that endpoint must be in the
file or registered; a pull topic takes any task.
A second run imports nothing twice; a task whose state changed in asynq since
it was imported (archived, or run again) is skipped and left there. --move
deletes each task from asynq once Herald holds it: stop the queue's asynq
servers first. Active and aggregating tasks are not read, only counted: run
the import again once asynq has moved them on, until none is left.`,
		Example: `  herald import asynq --from 10.0.0.5:6379 --queue payments --map order:notify=order-notify --dry-run
  herald import asynq --from 10.0.0.5:6379 --queue payments --state archived \
    --map order:notify=order-notify:alipay-notify --map invoice:render=jobs --move`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := importFlags(&cfg, state, maps); err != nil {
				return &UsageError{Err: err}
			}
			if !cmd.Flags().Changed("password") {
				cfg.Password = os.Getenv("ASYNQ_REDIS_PASSWORD")
			}
			w, err := c.base.wire(cmd, false)
			if err != nil {
				return err
			}
			defer w.Close()
			if cfg.Policies, err = c.base.loadConfigPolicies(); err != nil {
				return err
			}
			cfg.Store, cfg.MaxPayload = w.store, w.cfg.API.MaxBody
			if err := cfg.WithDefaults().Validate(); err != nil {
				return &UsageError{Err: err}
			}
			bar := &progressBar{out: c.base.Out, label: "importing"}
			if !asJSON && c.terminal(c.base.Out) {
				cfg.ProgressFunc = func(done, total int) { bar.total = total; bar.set(done) }
			}
			sum, err := asynqimport.Run(cmd.Context(), &cfg)
			if bar.total > 0 {
				bar.finish()
			}
			if sum == nil {
				return err
			}
			// A run that failed part way says what it did before failing.
			if asJSON {
				return errors.Join(err, printJSON(c.base.Out, sum))
			}
			_, werr := sum.WriteTo(c.base.Out)
			return errors.Join(err, werr)
		},
	})
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "from", "", "the asynq deployment's Redis, host:port (required)")
	f.StringVar(&cfg.Password, "password", "", "its Redis password (default $ASYNQ_REDIS_PASSWORD)")
	f.IntVar(&cfg.DB, "db", 0, "its Redis database")
	f.StringVar(&cfg.Queue, "queue", "", "the asynq queue to read (required)")
	f.StringVar(&state, "state", "all", "scheduled, retry, pending, archived or all")
	f.StringArrayVar(&maps, "map", nil, "TYPE=TOPIC[:POLICY]: asynq task type TYPE goes to TOPIC, with POLICY if given (required, repeat per type)")
	f.BoolVar(&cfg.DryRun, "dry-run", false, "read and count; store and delete nothing")
	f.BoolVar(&cfg.Move, "move", false, "delete each task from asynq once Herald holds it")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	return cmd
}

// importFlags puts the flags that need parsing into cfg.
func importFlags(cfg *asynqimport.Config, state string, maps []string) (err error) {
	for _, f := range [][2]string{{"from", cfg.Addr}, {"queue", cfg.Queue}, {"map", strings.Join(maps, "")}} {
		if f[1] == "" {
			return fmt.Errorf("--%s is required", f[0])
		}
	}
	if cfg.States, err = asynqimport.ParseStates(state); err != nil {
		return fmt.Errorf("--state: %w", err)
	}
	cfg.Map = map[string]asynqimport.Mapping{}
	for _, m := range maps {
		typ, to, err := asynqimport.ParseMapping(m)
		if err != nil {
			return fmt.Errorf("--map %w", err)
		}
		cfg.Map[typ] = to
	}
	return nil
}
