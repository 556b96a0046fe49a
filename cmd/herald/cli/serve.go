package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

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
A dispatcher-only process serves just /metrics and /healthz on api.listen, so
that its attempt and lateness metrics are scraped too.

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

	// Listen before anything starts, so a taken port fails at once.
	l, err := net.Listen("tcp", w.cfg.API.Listen)
	if err != nil {
		return fmt.Errorf("api.listen: %w", err)
	}
	defer l.Close()
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
	if role == RoleDispatcher {
		fmt.Fprintf(c.base.Out, "herald: dispatcher running, metrics on http://%s/metrics; stop with Ctrl-C\n", l.Addr())
		return serveMetrics(ctx, l, m)
	}
	srv, err := w.newAPI(ctx, policies.Current, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.base.Out, "herald: API on http://%s (role %s); stop with Ctrl-C\n", l.Addr(), role)
	return srv.Serve(ctx, l)
}

// serveMetrics serves GET /metrics and GET /healthz on l until ctx ends:
// what a dispatcher-only process answers.
func serveMetrics(ctx context.Context, l net.Listener, m *metrics.Metrics) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	})
	defer stop()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
