// Package cli is the herald command: its command tree, its configuration
// (file, then HERALD_* environment, then flags) and the exit status each
// failure maps to. cmd/herald's main only calls Execute and ExitCode.
//
// Every command gets what it needs through a Base, filled in once by the
// root command before the command runs, and prints to Base.Out, so tests
// run the whole tree in-process and read what it printed.
//
// # Adding a command
//
// Put each noun in its own file with a method on *app that builds the
// cobra command, and add it to the tree in rootCommand. A command that
// needs the configuration wraps its definition in withConfig (or
// withConfigFile, for one with a config file of its own, as demo has); by
// the time its RunE runs, Base.Config is loaded and validated and
// Base.Logger follows its log section. Flags that override a config key
// are bound with config.BindFlag, as serve binds --listen to api.listen. stats is
// the shape of a command that reads notifications:
//
//	func (c *app) statsCommand() *cobra.Command {
//		var asJSON bool
//		cmd := withConfig(&cobra.Command{
//			Use:  "stats",
//			Args: cobra.NoArgs,
//			RunE: func(cmd *cobra.Command, _ []string) error {
//				return c.withClient(cmd, false, func(cl *client.Client) error {
//					// ... ask cl, then print with c.output: a table,
//					// or JSON in the API's shape with --json.
//				})
//			},
//		})
//		cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
//		return cmd
//	}
//
// # Wiring
//
// Commands build what they run on from Base.Config in one place, wiring.go:
// c.base.wire connects to Redis (standalone, Sentinel, Cluster, or an
// embedded in-process Redis when redis.addrs is empty and the command
// allows it) and opens the store; the wiring then builds the client,
// templates, senders, dispatcher and API as the command needs them, and
// serve keeps the policies current with Base.StartPolicies. Commands that
// only read or change notifications use c.withClient.
//
// # Exit status
//
// 0 when the command succeeded; 2 for a usage or configuration error (an
// unknown command or flag, a wrong argument, a bad config or policies
// file), reported as a *UsageError, or a bad value refused with a
// *notify.FieldError wherever it was checked; 1 for any other failure.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/cmd/herald/config"
	"github.com/heraldhq/herald/notify"
)

// Deps are what the commands take from their process. Tests pass buffers.
type Deps struct {
	// Out receives command output: tables, JSON, help.
	Out io.Writer
	// Err receives logs.
	Err io.Writer
	// RedisLogs, when set, is handed each command's logger for go-redis's
	// own messages, which go-redis sends to one process-wide logger: the
	// program sets RouteRedisLogs; tests, running many commands in one
	// process, leave it nil.
	RedisLogs func(*slog.Logger)
	// TraceLogs, when set, is handed each command's logger for the
	// OpenTelemetry SDK's errors, which it sends to one process-wide
	// handler: the program sets RouteTraceLogs; tests leave it nil, as
	// for RedisLogs.
	TraceLogs func(*slog.Logger)
}

// Execute runs the herald command line args (without the program name)
// until it finishes or ctx ends. Map its error to an exit status with
// ExitCode.
func Execute(ctx context.Context, deps Deps, args []string) error {
	c := newApp(deps)
	return c.execute(ctx, c.rootCommand(), args)
}

// app builds the command tree and holds what its commands share. It lives
// for one Execute.
type app struct {
	deps Deps
	// base is filled in by setup before any command runs.
	base Base
	// started is set once cobra accepted the command line: the errors it
	// returns before that are usage errors.
	started bool

	// terminal reports whether output goes to a terminal, where progress
	// bars are drawn; tests stand in for one.
	terminal func(io.Writer) bool

	// The root's persistent flags.
	configFile string
	logLevel   string
	debug      bool
}

func newApp(deps Deps) *app {
	return &app{base: Base{Out: deps.Out}, deps: deps, terminal: isTerminal}
}

func (c *app) execute(ctx context.Context, root *cobra.Command, args []string) error {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && !c.started {
		// cobra refused the command line before any command ran.
		return &UsageError{Err: fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
	}
	return err
}

// Base is what every command runs with.
type Base struct {
	// Out receives the command's output.
	Out io.Writer
	// Logger writes to the error stream. Its handler is chosen once, before
	// the command runs: --debug, else --log-level, else (for commands that
	// load the configuration) log.level and log.format.
	Logger *slog.Logger
	// config.Config is the validated configuration for commands built with
	// withConfig, and nil for the others.
	Config *config.Config
}

// UsageError is a mistake in how herald was called or configured: an
// unknown command or flag, a wrong argument, a bad config or policies
// file. It exits with status 2.
type UsageError struct{ Err error }

// Error implements error.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the mistake.
func (e *UsageError) Unwrap() error { return e.Err }

// plainError says what went wrong in an operator's words, where err's
// own text is a store's or Redis's; err stays in the chain, for errors.Is
// and ExitCode.
type plainError struct {
	msg string
	err error
}

// Error implements error.
func (e *plainError) Error() string { return e.msg }

// Unwrap returns the error explained.
func (e *plainError) Unwrap() error { return e.err }

// refusedFull explains Redis's refusal of a write at maxmemory
// (notify.ErrOutOfMemory) as the API's 503 does: Redis is full, nothing
// changed, and how to free memory. Other errors come back as they are. Use
// it only for a command whose refused write changes nothing: an enqueue, a
// pause, an endpoint's registration.
func refusedFull(err error) error {
	if !errors.Is(err, notify.ErrOutOfMemory) {
		return err
	}
	return &plainError{err: err, msg: "Redis is full (its memory reached maxmemory) and refused the change, so nothing was changed; " +
		"free memory (" + notify.FreeingMemory + "), then run the command again"}
}

// named begins err with the command's name, unless the store began it
// so already ("enqueue: run scripts: ..."): a message that names the
// command twice reads as two failures.
func named(command string, err error) error {
	if msg := err.Error(); strings.HasPrefix(msg, command+":") || strings.HasPrefix(msg, command+" ") {
		return err
	}
	return fmt.Errorf("%s: %w", command, err)
}

// isUsage reports whether err is a mistake in how herald was called or
// configured: a *UsageError, or a *notify.FieldError, a bad value given on
// the command line, in the configuration or in the input. The client and
// the store check most values, so their *notify.FieldError counts however
// deep a command wrapped it.
func isUsage(err error) bool {
	var ue *UsageError
	var fe *notify.FieldError
	return errors.As(err, &ue) || errors.As(err, &fe)
}

// ExitCode maps the error of Execute to the process's exit status: 0 for
// nil, 2 for a usage error (a *UsageError or a *notify.FieldError), 1 for
// anything else.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case isUsage(err):
		return 2
	}
	return 1
}

// Annotations of the commands that load the configuration, of those with
// a config file of their own, and of those that only read.
const (
	configAnnotation     = "herald_needs_config"
	configFileAnnotation = "herald_config_file"
	readOnlyAnnotation   = "herald_read_only"
)

// withConfig marks cmd as needing the configuration: the root loads and
// validates it, into Base.Config, before cmd runs.
func withConfig(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[configAnnotation] = "true"
	return cmd
}

// readOnly is withConfig for a command that only reads Herald's keys: it
// opens the store store.Config.ReadOnly, so that pointed at the wrong Redis
// or namespace it finds nothing there and leaves nothing behind.
func readOnly(cmd *cobra.Command) *cobra.Command {
	withConfig(cmd).Annotations[readOnlyAnnotation] = "true"
	return cmd
}

// withConfigFile is withConfig for a command with a config file of its own
// (demo's configs/demo.yaml), read instead of config.FileDefault when
// --config is not given. Unlike config.FileDefault it must exist: the
// command depends on what it sets.
func withConfigFile(cmd *cobra.Command, file string) *cobra.Command {
	withConfig(cmd).Annotations[configFileAnnotation] = file
	return cmd
}

func (c *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "herald",
		Short: "Herald dispatches notifications on retry policies",
		Long: `Herald is a retry-policy notification dispatcher: services enqueue webhooks,
SMS, payment-status polls and jobs for their own workers, with a send time and
a backoff array; Herald keeps them in Redis, starts each attempt on time,
retries on the array's schedule, and moves what never succeeds to a
dead-letter set from which an operator can replay it.

Configuration comes from the file named by --config, then HERALD_*
environment variables (HERALD_ and the key path upper-cased with _, such as
HERALD_REDIS_ADDRS=a:6379,b:6379 or HERALD_API_LISTEN=:8080), then flags.

Exit status: 0 on success, 1 when something failed at run time (Redis
unreachable, an unknown id), 2 for a usage or configuration mistake (a bad
flag, argument or value, named in the message). Errors go to standard error
as text, with --json too: a command that fails prints nothing on standard
output, except a dlq replay or purge or an import that fails part way, and
a dlq replay or purge given ids that are not dead, which first print what
they did.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: c.setup,
	}
	root.SetOut(c.deps.Out)
	root.SetErr(c.deps.Err)

	pf := root.PersistentFlags()
	pf.StringVar(&c.configFile, "config", config.FileDefault, "config file; the default may be missing, a file named here may not")
	pf.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error (log.level)")
	config.BindFlag(pf, "log-level", "log.level")
	pf.BoolVar(&c.debug, "debug", false, "log at debug level, whatever else says")

	root.AddCommand(c.serveCommand(), c.demoCommand(), c.enqueueCommand(), c.statusCommand(), c.cancelCommand(),
		c.statsCommand(), c.dlqCommand(), c.benchCommand(), c.policyCommand(), c.versionCommand(), c.endpointCommand())
	root.AddCommand(c.pauseCommands()...)
	root.AddCommand(c.importCommand())
	// Built now rather than by cobra as the command runs, so that its
	// group refuses unknown subcommands too.
	root.InitDefaultCompletionCmd()
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command below cmd that only groups
// others (dlq, policy, ...) refuse an argument, which names none of them,
// as cobra refuses one after herald itself. Left alone, cobra prints such a
// group's help and succeeds, so a mistyped `herald dlq purg` would exit 0
// having done nothing. Without an argument the group still prints its help.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		if sub.HasSubCommands() && !sub.Runnable() {
			sub.Args = cobra.NoArgs
			sub.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
		refuseUnknownSubcommands(sub)
	}
}

// setup runs before every command: it loads the configuration for the
// commands that need it and chooses the log handler.
func (c *app) setup(cmd *cobra.Command, _ []string) error {
	c.started = true
	logCfg := config.LogConfig{Level: c.logLevel, Format: "text"}
	if cmd.Annotations[configAnnotation] != "" {
		src := &config.Source{File: c.configFile, FileRequired: cmd.Flags().Changed("config"), Flags: cmd.Flags()}
		if own := cmd.Annotations[configFileAnnotation]; own != "" && !src.FileRequired {
			src.File, src.FileRequired = own, true
		}
		cfg, err := config.Load(src)
		if own := cmd.Annotations[configFileAnnotation]; errors.Is(err, fs.ErrNotExist) && src.File == own {
			// The file is the command's own, found relative to the working
			// directory: the operator left the repository, not mistyped.
			return &UsageError{Err: fmt.Errorf("config: %w; run herald %s from the repository root, or name a config file with --config",
				err, cmd.Name())}
		}
		if err != nil {
			return &UsageError{Err: fmt.Errorf("config: %w", err)}
		}
		c.base.Config = cfg
		logCfg = cfg.Log
	} else if err := logCfg.Validate(); err != nil {
		return &UsageError{Err: err}
	}
	c.base.Logger = logCfg.NewLogger(c.deps.Err, c.debug)
	if c.deps.RedisLogs != nil {
		c.deps.RedisLogs(c.base.Logger)
	}
	if c.deps.TraceLogs != nil {
		c.deps.TraceLogs(c.base.Logger)
	}
	return nil
}
