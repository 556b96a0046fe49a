package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/show"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

func (c *app) endpointCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "endpoint",
		Short: "List, show, register or remove endpoints",
		Long: `Endpoints are named receivers with their own URL, signing secrets and limits.
They come from the policies file (endpoints:, which wins on a name clash) and
from the API; these commands change the API's, stored in Redis. Secrets are
never printed: only their ids, expiries and, for ed25519, public keys.`,
	}
	// on runs do on a client that knows the policies file's endpoints. Its
	// error names the command and the endpoint: "endpoint not found" alone
	// does not say which.
	on := func(do func(cmd *cobra.Command, cl *client.Client, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				if err := checkEndpointName(args[0]); err != nil {
					return err
				}
			}
			return c.withClient(cmd, true, func(cl *client.Client) error {
				err := refusedFull(do(cmd, cl, args))
				if err != nil && len(args) > 0 {
					return fmt.Errorf("endpoint %s %s: %w", cmd.Name(), args[0], err)
				}
				return err
			})
		}
	}
	var asJSON bool
	list := readOnly(&cobra.Command{Use: "list", Short: "List every endpoint", Args: cobra.NoArgs,
		RunE: on(func(cmd *cobra.Command, cl *client.Client, _ []string) error {
			vs, err := cl.ListEndpoints(cmd.Context())
			if err != nil || asJSON {
				return c.reply(err, map[string]any{"endpoints": vs})
			}
			tw := tabwriter.NewWriter(c.base.Out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSOURCE\tURL\tSIGNING\tSECRETS\tMAX IN FLIGHT\tRATE\tSTATE")
			for _, v := range vs {
				src := v.Source
				if v.Shadowed {
					src += " (shadowed by file)"
				}
				// The URL came from whoever registered the endpoint.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%g\t%s\n", v.Name, src, show.Clean(v.URL), v.Signing, len(v.Secrets),
					v.MaxInFlight, v.Rate, endpointState(&v))
			}
			return tw.Flush()
		})})
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	get := readOnly(&cobra.Command{Use: "get NAME", Short: "Show an endpoint as JSON", Args: cobra.ExactArgs(1),
		RunE: on(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			v, err := cl.GetEndpoint(cmd.Context(), args[0])
			return c.reply(err, v)
		})})
	var file string
	put := withConfig(&cobra.Command{Use: "put NAME", Short: "Register or replace an endpoint from JSON", Args: cobra.ExactArgs(1),
		Long: `Put reads the endpoint as PUT /v1/endpoints/{name} takes it, from --file or
standard input, so that secrets stay out of the shell's history:
  {"url": "https://m.example/notify", "secrets": [{"value": "whsec_..."}], "rate": 50}`,
		RunE: on(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			var e endpoint.Endpoint
			if err := readEndpoint(cmd.InOrStdin(), file, &e); err != nil {
				return err
			}
			v, _, err := cl.PutEndpoint(cmd.Context(), args[0], &e)
			return c.reply(err, v)
		})})
	put.Flags().StringVarP(&file, "file", "f", "-", "JSON file of the endpoint; - for standard input")
	del := withConfig(&cobra.Command{Use: "delete NAME", Short: "Remove an endpoint registered over the API", Args: cobra.ExactArgs(1),
		RunE: on(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			err := cl.DeleteEndpoint(cmd.Context(), args[0])
			return c.say(err, "deleted", args[0])
		})})
	var enableJSON bool
	enable := withConfig(&cobra.Command{Use: "enable NAME", Short: "Enable an endpoint its disable_after disabled", Args: cobra.ExactArgs(1),
		RunE: on(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			pauses, err := cl.Pauses(cmd.Context())
			if err != nil {
				return err
			}
			n, err := cl.EnableEndpoint(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.pauseOutput(enableJSON, pauseAnswer(store.PauseEndpoint, args[0], false, &n), isPaused(pauses, store.PauseDisabled, args[0]),
				fmt.Sprint("enabled ", args[0], ": ", n, " due at once"), "endpoint "+args[0]+" was not disabled; nothing changed")
		})})
	enable.Flags().BoolVar(&enableJSON, "json", false, `print JSON, as POST /v1/endpoints/{name}/enable answers: {"endpoint": ..., "paused": false, "resumed": N}`)
	cmd.AddCommand(list, get, put, del, enable)
	return cmd
}

// endpointState says why an endpoint's notifications may not be attempted:
// "paused", "disabled at TIME" by its disable_after, or "failing since
// TIME" on the way there; "-" when none of these holds.
func endpointState(v *endpoint.View) string {
	var state []string
	if v.Paused {
		state = append(state, "paused")
	}
	switch {
	case v.Disabled:
		disabled := "disabled"
		if v.DisabledAt != nil {
			disabled += " at " + show.Time(*v.DisabledAt)
		}
		state = append(state, disabled)
	case v.FailingSince != nil:
		state = append(state, "failing since "+show.Time(*v.FailingSince))
	}
	return show.Dash(strings.Join(state, ", "))
}

// readEndpoint decodes an endpoint from path, or from stdin for "-";
// unknown keys are refused, as the API refuses them.
func readEndpoint(stdin io.Reader, path string, e *endpoint.Endpoint) error {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return &UsageError{Err: err}
		}
		defer f.Close()
		r = f
	}
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(e); err != nil {
		return &UsageError{Err: fmt.Errorf("endpoint JSON: %w", err)}
	}
	return nil
}

// pauseCommands are herald pause, herald resume and herald pauses, which
// lists what the other two act on. It is not "pause list": pause's first
// argument is the kind, and a subcommand would make pause both a verb and
// a group of commands.
func (c *app) pauseCommands() []*cobra.Command {
	build := func(verb, short string, do func(cmd *cobra.Command, cl *client.Client, set *policy.Set, kind, name string) error) *cobra.Command {
		return withConfig(&cobra.Command{
			Use: verb + " topic|endpoint NAME", Short: short, Args: cobra.ExactArgs(2),
			ValidArgs: []string{store.PauseTopic, store.PauseEndpoint},
			RunE: func(cmd *cobra.Command, args []string) error {
				if args[0] != store.PauseTopic && args[0] != store.PauseEndpoint {
					return &UsageError{Err: fmt.Errorf("%s what? topic or endpoint, not %q", verb, args[0])}
				}
				if args[0] == store.PauseEndpoint {
					if err := checkEndpointName(args[1]); err != nil {
						return err
					}
				}
				return c.withPolicies(cmd, clientLoads{policies: true}, func(cl *client.Client, set *policy.Set) error {
					if err := do(cmd, cl, set, args[0], args[1]); err != nil {
						return fmt.Errorf("%s %s %s: %w", verb, args[0], args[1], err)
					}
					return nil
				})
			},
		})
	}
	var pauseJSON, resumeJSON bool
	pause := build("pause", "Stop attempting a topic's or an endpoint's notifications, losing none",
		func(cmd *cobra.Command, cl *client.Client, set *policy.Set, kind, name string) error {
			pauses, err := cl.Pauses(cmd.Context())
			if err != nil {
				return err
			}
			if err := cl.Pause(cmd.Context(), kind, name); err != nil {
				return refusedFull(err)
			}
			if kind == store.PauseTopic {
				c.warnUnknownTopic(cmd.Context(), cl, set, name)
			}
			return c.pauseOutput(pauseJSON, pauseAnswer(kind, name, true, nil), !isPaused(pauses, kind, name),
				"paused "+kind+" "+name, kind+" "+name+" was paused already; nothing changed")
		})
	pause.Flags().BoolVar(&pauseJSON, "json", false, "print JSON, as POST /v1/topics/{topic}/pause answers")
	resume := build("resume", "Resume a paused topic or endpoint: what came due meanwhile starts at once",
		func(cmd *cobra.Command, cl *client.Client, _ *policy.Set, kind, name string) error {
			pauses, err := cl.Pauses(cmd.Context())
			if err != nil {
				return err
			}
			n, err := cl.Resume(cmd.Context(), kind, name)
			if err != nil {
				return err
			}
			wasPaused := isPaused(pauses, kind, name)
			if !wasPaused {
				// A resume of what is running is what the operator wanted,
				// so it succeeds; the warning names what is paused, in case
				// the name was mistyped.
				c.warnNotPaused(cmd.Context(), pauses, kind, name)
			}
			done := fmt.Sprint("resumed ", kind, " ", name, ": ", show.Count(n, "parked notification", "parked notifications"), " due at once")
			if kind == store.PauseTopic {
				// Read as "nothing was waiting", 0 would mislead: a pull
				// topic's due work is never parked, so never counted.
				done += " (a pull topic's due work is not parked: its consumers' next reservations take it)"
			}
			return c.pauseOutput(resumeJSON, pauseAnswer(kind, name, false, &n), wasPaused, done, kind+" "+name+" was not paused; nothing changed")
		})
	resume.Flags().BoolVar(&resumeJSON, "json", false, `print JSON, as POST /v1/topics/{topic}/resume answers: {"topic": ..., "paused": false, "resumed": N}`)
	return []*cobra.Command{pause, resume, c.pausesCommand()}
}

// pauseAnswer is what pause, resume and endpoint enable print with
// --json, the API's answer to POST .../pause, .../resume and .../enable:
// {"topic" or "endpoint": name, "paused": paused, "resumed": resumed},
// without resumed for a pause. kind is store.PauseTopic or
// store.PauseEndpoint, which are the keys.
func pauseAnswer(kind, name string, paused bool, resumed *int) map[string]any {
	a := map[string]any{kind: name, "paused": paused}
	if resumed != nil {
		a["resumed"] = *resumed
	}
	return a
}

// pauseOutput prints what pause, resume or endpoint enable did: answer
// with --json, else done, or unchanged when the command found nothing to
// change.
func (c *app) pauseOutput(asJSON bool, answer map[string]any, changed bool, done, unchanged string) error {
	return c.output(asJSON, answer, func(out io.Writer) error {
		line := done
		if !changed {
			line = unchanged
		}
		_, err := fmt.Fprintln(out, line)
		return err
	})
}

// isPaused reports whether pauses has what kind and name name.
func isPaused(pauses []client.Pause, kind, name string) bool {
	return slices.ContainsFunc(pauses, func(p client.Pause) bool { return p.Kind == kind && p.Name == name })
}

// warnNotPaused warns that what kind and name name was not among pauses,
// read before the resume: resuming it changed nothing, and if its name was
// mistyped, what was meant stays paused; the warning lists what is.
func (c *app) warnNotPaused(ctx context.Context, pauses []client.Pause, kind, name string) {
	var paused []string
	for _, p := range pauses {
		paused = append(paused, p.Kind+" "+p.Name)
	}
	c.base.Logger.WarnContext(ctx, "herald: "+kind+" "+name+" was not paused, so nothing changed; check its name against what is paused",
		"paused", cmp.Or(strings.Join(paused, ", "), "nothing"))
}

// warnUnknownTopic warns when topic, just paused, is neither in the
// policies file nor used by any notification: a topic needs no
// configuration, so the pause stands, but a name mistyped in an incident
// leaves the topic meant running, and the operator should hear of it.
func (c *app) warnUnknownTopic(ctx context.Context, cl *client.Client, set *policy.Set, topic string) {
	if _, ok := set.Topics[topic]; ok {
		return
	}
	stats, err := cl.Stats(ctx)
	if _, used := stats[topic]; used || err != nil {
		return
	}
	c.base.Logger.WarnContext(ctx, "herald: topic "+topic+" is not in the policies file and has no notifications; paused all the same: "+
		"check its name, and resume it if it is not the one meant", "topic", topic)
}

// pausesCommand is herald pauses: every paused topic and endpoint and every
// endpoint its disable_after disabled, so that an operator without the
// dashboard can tell what is held back.
func (c *app) pausesCommand() *cobra.Command {
	var asJSON bool
	cmd := readOnly(&cobra.Command{Use: "pauses", Args: cobra.NoArgs,
		Short: "List the paused topics and endpoints and the disabled endpoints, with since when",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withClient(cmd, false, func(cl *client.Client) error {
				ps, err := cl.Pauses(cmd.Context())
				if err != nil {
					return err
				}
				return c.output(asJSON, map[string]any{"pauses": ps}, func(out io.Writer) error {
					if len(ps) == 0 {
						_, err := fmt.Fprintln(out, "nothing is paused")
						return err
					}
					tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "KIND\tNAME\tSINCE")
					for _, p := range ps {
						fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Kind, show.Clean(p.Name), show.Time(p.Since))
					}
					return tw.Flush()
				})
			})
		}})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, as GET /v1/pauses answers")
	return cmd
}
