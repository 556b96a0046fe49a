package cli

import (
	"fmt"
	"net"
	"slices"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/metrics"
)

// Roles of serve: what one process runs.
const (
	RoleAPI        = "api"
	RoleDispatcher = "dispatcher"
	RoleAll        = "all"
)

func (c *app) serveCommand() *cobra.Command {
	var role string
	cmd := withConfig(&cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API and the dispatcher",
		Long: `Serve runs Herald: the HTTP API on api.listen (with /metrics, /healthz and
/readyz) and the dispatcher that starts each attempt on time. --role runs one
of them, so they can be scaled apart: any number of either may share a Redis.

SIGINT or SIGTERM shuts down gracefully: the API stops taking requests and
finishes those in flight, the dispatcher lets running attempts end (or gives
them back, unpenalised, after 10s). SIGHUP rereads the policies file, as a
change to it does; a bad file is refused, logged, and the old one stays.

With redis.addrs empty, serve runs on an embedded in-process Redis and logs
its address; nothing survives exit.`,
		Example: "  herald serve\n  herald serve --config configs/demo.yaml\n  HERALD_REDIS_ADDRS=10.0.0.5:6379 herald serve --role dispatcher",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains([]string{RoleAPI, RoleDispatcher, RoleAll}, role) {
				return &UsageError{Err: fmt.Errorf("--role must be api, dispatcher or all, not %q", role)}
			}
			return c.serve(cmd, role)
		},
	})
	cmd.Flags().StringVar(&role, "role", RoleAll, "what this process runs: api, dispatcher or all")
	cmd.Flags().String("listen", "", "host:port the API listens on (api.listen)")
	bindFlag(cmd.Flags(), "listen", "api.listen")
	return cmd
}

func (c *app) serve(cmd *cobra.Command, role string) error {
	ctx := cmd.Context()
	w, err := c.base.wire(cmd, true)
	if err != nil {
		return err
	}
	defer w.Close()
	policies, stopPolicies, err := c.base.StartPolicies(ctx)
	if err != nil {
		return err
	}
	defer stopPolicies()
	m := metrics.New(&metrics.Config{Store: w.store})

	var l net.Listener
	if role != RoleDispatcher {
		// Listen before anything starts, so a taken port fails at once.
		if l, err = net.Listen("tcp", w.cfg.API.Listen); err != nil {
			return fmt.Errorf("api.listen: %w", err)
		}
		defer l.Close()
	}
	if role != RoleAPI {
		tmpl, err := w.loadTemplates()
		if err != nil {
			return err
		}
		senders, err := w.newSenders(policies.Current, tmpl)
		if err != nil {
			return err
		}
		d, err := w.newDispatcher(senders, policies.Current, m)
		if err != nil {
			return err
		}
		if err := d.Start(ctx); err != nil {
			return err
		}
		defer d.Stop()
	}
	if l == nil {
		fmt.Fprintln(c.base.Out, "herald: dispatcher running; stop with Ctrl-C")
		<-ctx.Done()
		return nil
	}
	srv, err := w.newAPI(ctx, policies.Current, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.base.Out, "herald: API on http://%s (role %s); stop with Ctrl-C\n", l.Addr(), role)
	return srv.Serve(ctx, l)
}
