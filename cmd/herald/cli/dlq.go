package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/show"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/store"
)

// replayChunk is the most notifications a replay on a terminal moves
// without a progress bar.
const replayChunk = 500

func (c *app) dlqCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, replay or purge dead notifications",
		Long: `A notification is dead when its last attempt failed, or an attempt failed
permanently (a 4xx its policy does not retry, a bad target, a template that
does not render). Dead notifications stay, with their history, until replayed
or purged, or dead_retention passes when it is set. The filters are those of the HTTP API: --ids, or --topic with an
optional window of the time of death (--since inclusive, --until exclusive).
Ids given that are not dead (unknown, or in another state) are named and
fail the command, with exit status 1, once the others are done.`,
	}
	cmd.AddCommand(c.dlqListCommand(), c.dlqReplayCommand(), c.dlqPurgeCommand())
	return cmd
}

// deadFilterFlags are the filters replay and purge take.
type deadFilterFlags struct {
	ids          []string
	topic        string
	since, until string
}

func (f *deadFilterFlags) register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.ids, "ids", nil, "notification ids, comma-separated or repeated")
	fs.StringVar(&f.topic, "topic", "", "every dead notification of this topic (in the --since/--until window)")
	fs.StringVar(&f.since, "since", "", "died at or after: an RFC 3339 time, or a duration ago such as 24h")
	fs.StringVar(&f.until, "until", "", "died before: an RFC 3339 time, or a duration ago")
}

// filter returns the store's filter; a bad combination of flags, time or id
// is a *UsageError naming the flags. The store checks the rest, as it does
// for the API.
func (f *deadFilterFlags) filter(now time.Time) (store.DeadFilter, error) {
	out := store.DeadFilter{IDs: f.ids, Topic: f.topic}
	switch {
	case len(f.ids) == 0 && f.topic == "":
		return out, &UsageError{Err: errors.New("give --ids, or --topic with an optional --since and --until")}
	case len(f.ids) > 0 && f.topic != "":
		return out, &UsageError{Err: errors.New("give --ids or --topic, not both")}
	case len(f.ids) > 0 && (f.since != "" || f.until != ""):
		// The store would select the ids whenever they died.
		return out, &UsageError{Err: errors.New("--since and --until go with --topic, not --ids")}
	}
	for _, id := range f.ids {
		if err := checkID(id); err != nil {
			return out, fmt.Errorf("--ids: %w", err)
		}
	}
	for _, t := range []struct {
		flag, value string
		dst         **time.Time
	}{{"since", f.since, &out.Since}, {"until", f.until, &out.Until}} {
		if t.value == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, t.value)
		if err != nil {
			d, err := notify.ParseDuration(t.value)
			if err != nil {
				return out, &UsageError{Err: fmt.Errorf("--%s: %q is neither an RFC 3339 time nor a duration", t.flag, t.value)}
			}
			at = now.Add(-d)
		}
		*t.dst = &at
	}
	if out.Since != nil && out.Until != nil && !out.Until.After(*out.Since) {
		return out, &UsageError{Err: fmt.Errorf("--until %s must be later than --since %s (as durations ago, --until is the shorter)", f.until, f.since)}
	}
	return out, nil
}

// onDead runs do, a replay or a purge (verb), on the dead notifications f
// selects, handing it the ids given that are not dead, for its --json
// answer. A bad filter is a usage error. Ids that are not dead fail the
// command, named, once do has run on those that are: an operator who
// mistyped one would otherwise take "1 matched" for all of them.
func (c *app) onDead(cmd *cobra.Command, f *deadFilterFlags, verb string, do func(cl *client.Client, filter store.DeadFilter, notDead []client.IDState) error) error {
	filter, err := f.filter(time.Now())
	if err != nil {
		return err
	}
	return c.withClient(cmd, false, func(cl *client.Client) error {
		states, err := cl.NotDead(cmd.Context(), filter)
		if err != nil {
			return err
		}
		return cmp.Or(do(cl, filter, states), notDeadError(filter, states, verb))
	})
}

// notDeadError returns an error naming the ids of f that are not dead, with
// their states: nil when every one is.
func notDeadError(f store.DeadFilter, states []client.IDState, verb string) error {
	total := len(slices.Compact(slices.Sorted(slices.Values(f.IDs))))
	named := make([]string, len(states))
	for i, s := range states {
		named[i] = fmt.Sprintf("%s (%s)", s.ID, s.State)
		if s.State == client.StateUnknown {
			named[i] = s.ID + " (unknown id)"
		}
	}
	switch {
	case len(named) == 0:
		return nil
	case total == 1:
		return fmt.Errorf("the id given is not dead, so not %s: %s", verb, named[0])
	case len(named) == 1:
		return fmt.Errorf("1 of the %d ids given is not dead, so not %s: %s", total, verb, named[0])
	}
	return fmt.Errorf("%d of the %d ids given are not dead, so not %s: %s", len(named), total, verb, strings.Join(named, ", "))
}

// deadOutcome prints the outcome of a replay or purge (verb) that matched
// and changed done notifications, or with asJSON r, the API's answer, and
// returns err, the run's error. A run that failed after changing some says
// so before its error, as import does: an interrupted replay of thousands
// leaves the operator knowing how far it got.
func (c *app) deadOutcome(asJSON, dryRun bool, verb string, r any, matched, done int, err error) error {
	if err != nil && (dryRun || done == 0) {
		return err
	}
	return errors.Join(err, c.output(asJSON, r, func(out io.Writer) error {
		var werr error
		switch {
		case dryRun:
			_, werr = fmt.Fprintf(out, "dry run: %d dead notifications match; none %s\n", matched, verb)
		case err != nil:
			_, werr = fmt.Fprintf(out, "stopped part way: %d %s, of %d matched so far\n", done, verb, matched)
		default:
			_, werr = fmt.Fprintf(out, "%d matched, %d %s\n", matched, done, verb)
		}
		return werr
	}))
}

func (c *app) dlqListCommand() *cobra.Command {
	var (
		topic, cursor string
		limit         int
		asJSON        bool
	)
	cmd := readOnly(&cobra.Command{
		Use:   "list",
		Short: "List dead notifications",
		Long: `List prints dead notifications, oldest death first (of every topic, or of
--topic): id, topic, channel, target, attempts made, when it died (UTC) and
the last error. It stops after --limit; the next page starts at the cursor it
prints.`,
		Example: "  herald dlq list --topic order-notify\n  herald dlq list --json --limit 1000",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return &UsageError{Err: fmt.Errorf("--limit must be at least 1")}
			}
			return c.withClient(cmd, false, func(cl *client.Client) error {
				var items []*notify.Notification
				for {
					page, next, err := cl.ListDead(cmd.Context(), topic, min(limit-len(items), store.MaxBatch), cursor)
					if err != nil {
						return err
					}
					items, cursor = append(items, page...), next
					if cursor == "" || len(items) >= limit {
						break
					}
				}
				return c.output(asJSON, api.NewDeadPage(items, cursor), func(out io.Writer) error {
					return printDead(out, items, nextPage(cmd, cursor))
				})
			})
		},
	})
	f := cmd.Flags()
	f.StringVar(&topic, "topic", "", "only this topic (default: every topic)")
	f.IntVar(&limit, "limit", 100, "print at most this many")
	f.StringVar(&cursor, "cursor", "", "start where a previous list stopped")
	f.BoolVar(&asJSON, "json", false, "print JSON, as GET /v1/dead answers")
	return cmd
}

// nextPage returns the command line that lists the page after cursor, or
// "" when there is none: cmd with every flag the operator set, since the
// cursor holds only a position, and --topic, --limit or --config left out
// would list another page of another listing.
func nextPage(cmd *cobra.Command, cursor string) string {
	if cursor == "" {
		return ""
	}
	line := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "cursor" {
			line = append(line, "--"+f.Name+"="+shellQuote(f.Value.String()))
		}
	})
	return strings.Join(append(line, "--cursor="+shellQuote(cursor)), " ")
}

// shellSafeRe matches the words a POSIX shell takes as they are.
var shellSafeRe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote returns s as one word for a POSIX shell, so that a printed
// command line can be pasted back.
func shellQuote(s string) string {
	if shellSafeRe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printDead prints dead notifications as a table, then next, the command
// line of the next page, when there is one.
func printDead(out io.Writer, items []*notify.Notification, next string) error {
	if len(items) == 0 {
		_, err := fmt.Fprintln(out, "no dead notifications")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOPIC\tCHANNEL\tTARGET\tATTEMPTS\tDIED\tLAST ERROR")
	for _, n := range items {
		n = api.Redacted(n)
		last := ""
		if len(n.History) > 0 {
			last = n.History[len(n.History)-1].Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.ID, n.Topic, n.Channel, show.Line(show.Destination(n), 50),
			n.Attempts, show.Time(n.UpdatedAt), show.Dash(show.Line(last, 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		_, err := fmt.Fprintf(out, "\nmore: %s\n", next)
		return err
	}
	return nil
}

func (c *app) dlqReplayCommand() *cobra.Command {
	var (
		f             deadFilterFlags
		reset, dryRun bool
		asJSON        bool
	)
	cmd := withConfig(&cobra.Command{
		Use:   "replay",
		Short: "Send dead notifications again",
		Long: `Replay moves dead notifications back to their queue, due now. Each goes on
where its backoff array stopped: one that used the whole array gets one more
attempt and is dead again if it fails, one that died of a permanent failure
gets the attempts left in it. With --reset-attempts the whole array runs
again. Their history is kept. --dry-run only counts them.
On a terminal, a replay of many shows a progress bar. A replay that fails
part way (Redis lost, Ctrl-C) prints how many it replayed before its error;
running it again replays what is dead by then.`,
		Example: `  herald dlq replay --ids order-1001,order-1002
  herald dlq replay --topic order-notify --since 2h --reset-attempts
  herald dlq replay --topic order-notify --since 2026-03-01T00:00:00Z --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.onDead(cmd, &f, "replayed", func(cl *client.Client, filter store.DeadFilter, notDead []client.IDState) error {
				r := api.ReplayResult{NotDead: notDead}
				var err error
				r.Matched, r.Replayed, err = c.replay(cmd.Context(), cl, filter, reset, dryRun, !asJSON)
				return c.deadOutcome(asJSON, dryRun, "replayed", r, r.Matched, r.Replayed, err)
			})
		},
	})
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&reset, "reset-attempts", false, "run the whole backoff array again, not only what is left of it")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be replayed; change nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, as POST /v1/dead/replay answers")
	return cmd
}

// replay replays what f selects. With bar, on a terminal, it first counts
// what matches, then shows a progress bar that the store advances after
// each batch it moves; --json asks for none, so that what it prints is JSON
// alone.
func (c *app) replay(ctx context.Context, cl *client.Client, f store.DeadFilter, reset, dryRun, bar bool) (matched, replayed int, err error) {
	opts := store.DeadOptions{Reset: reset, DryRun: dryRun}
	if dryRun || !bar || !c.terminal(c.base.Out) {
		return cl.Replay(ctx, f, opts)
	}
	total, _, err := cl.Replay(ctx, f, store.DeadOptions{DryRun: true})
	if err != nil || total <= replayChunk {
		return cl.Replay(ctx, f, opts)
	}
	pb := &progressBar{out: c.base.Out, label: "replaying", total: total}
	pb.set(0)
	defer pb.finish()
	opts.Progress = func(matched, _ int) { pb.set(min(matched, total)) }
	return cl.Replay(ctx, f, opts)
}

func (c *app) dlqPurgeCommand() *cobra.Command {
	var (
		f      deadFilterFlags
		dryRun bool
		asJSON bool
	)
	cmd := withConfig(&cobra.Command{
		Use:   "purge",
		Short: "Delete dead notifications for good",
		Long: `Purge deletes dead notifications and their history; they cannot be replayed
afterwards. Try the same filters with --dry-run first: it only counts. A
purge that fails part way prints how many it purged before its error.`,
		Example: "  herald dlq purge --topic order-notify --until 720h --dry-run\n  herald dlq purge --ids order-1001",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.onDead(cmd, &f, "purged", func(cl *client.Client, filter store.DeadFilter, notDead []client.IDState) error {
				r := api.PurgeResult{NotDead: notDead}
				var err error
				r.Matched, r.Purged, err = cl.Purge(cmd.Context(), filter, store.DeadOptions{DryRun: dryRun})
				return c.deadOutcome(asJSON, dryRun, "purged", r, r.Matched, r.Purged, err)
			})
		},
	})
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be purged; change nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, as DELETE /v1/dead answers")
	return cmd
}
