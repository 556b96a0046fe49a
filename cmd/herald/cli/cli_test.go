package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

// result is what one run of the command line printed and returned, and
// the Base its command ran with.
type result struct {
	out, logs string
	err       error
	base      Base
}

// code is the exit status the run would have had.
func (r *result) code() int { return ExitCode(r.err) }

// run runs the herald command line in-process. extra builds more commands
// into the tree, as rootCommand builds the real ones, so tests can stand in
// for the commands that use the configuration.
func run(t *testing.T, args []string, extra ...func(*app) *cobra.Command) *result {
	t.Helper()
	var out, logs bytes.Buffer
	c := newApp(Deps{Out: &out, Err: &logs})
	err := execute(t.Context(), c, args, extra...)
	return &result{out: out.String(), logs: logs.String(), err: err, base: c.base}
}

// execute runs the command line on c until it finishes or ctx ends, for
// tests that set c up themselves or run a command in the background.
func execute(ctx context.Context, c *app, args []string, extra ...func(*app) *cobra.Command) error {
	root := c.rootCommand()
	for _, build := range extra {
		root.AddCommand(build(c))
	}
	return c.execute(ctx, root, args)
}

// probeCommand needs the configuration, as serve will, and logs one line
// at each level.
func probeCommand(c *app) *cobra.Command {
	return withConfig(&cobra.Command{
		Use:  "probe",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.base.Logger.DebugContext(cmd.Context(), "probe: debug line")
			c.base.Logger.InfoContext(cmd.Context(), "probe: info line", "config", c.base.Config)
			return nil
		},
	})
}

func TestExitCode(t *testing.T) {
	t.Parallel()

	require.Equal(t, 0, ExitCode(nil))
	require.Equal(t, 1, ExitCode(errors.New("redis: connection refused")))
	require.Equal(t, 2, ExitCode(&UsageError{Err: errors.New("bad flag")}))
	require.Equal(t, 2, ExitCode(fmt.Errorf("serve: %w", &UsageError{Err: errors.New("bad config")})))
	require.Equal(t, 2, ExitCode(fmt.Errorf("pause: %w", notify.Errorf("topic", "must match [a-z0-9._-]{1,64}"))),
		"a value the client or the store refused")
}

func TestRoot(t *testing.T) {
	t.Parallel()

	t.Run("HelpWithoutCommand", func(t *testing.T) {
		t.Parallel()

		r := run(t, nil)
		require.NoError(t, r.err)
		require.Contains(t, r.out, "Available Commands:")
		require.Contains(t, r.out, "policy")
	})

	t.Run("UnknownCommand", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"bogus"})
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, `unknown command "bogus"`)
		require.ErrorContains(t, r.err, "see 'herald --help'")
	})

	t.Run("UnknownSubcommand", func(t *testing.T) {
		t.Parallel()

		for _, args := range [][]string{
			{"policy", "chek", "configs/policies.yaml"},
			{"dlq", "purg"},
			{"endpoint", "lst"},
			{"import", "asnyq"},
			{"completion", "bsh"},
		} {
			r := run(t, args)
			require.Equal(t, 2, r.code(), "%v: %v", args, r.err)
			require.ErrorContains(t, r.err, fmt.Sprintf("unknown command %q for \"herald %s\"", args[1], args[0]))
			require.ErrorContains(t, r.err, fmt.Sprintf("see 'herald %s --help'", args[0]))
			require.Empty(t, r.out, "%v printed help", args)
		}
	})

	t.Run("GroupWithoutSubcommand", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"dlq"})
		require.NoError(t, r.err)
		require.Contains(t, r.out, "Available Commands:")
		require.Contains(t, r.out, "replay")
	})

	t.Run("UnknownFlag", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"version", "--verbose"})
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "unknown flag: --verbose")
		require.ErrorContains(t, r.err, "see 'herald version --help'")
	})

	t.Run("BadLogLevel", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"--log-level", "loud", "version"})
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "log.level")
	})
}
