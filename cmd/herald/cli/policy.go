package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/notify"
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
the real waits longer.

A bad file exits with status 2 and names the offending key, such as
policies.merchant-notify.backoff[2].`,
		Example: "  herald policy check configs/policies.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			s, err := policy.Load(args[0])
			if err != nil {
				return &UsageError{Err: err}
			}
			report := newCheckReport(args[0], s)
			if asJSON {
				return printJSON(c.base.Out, report)
			}
			return report.print(c.base.Out)
		},
	}
	check.Flags().BoolVar(&asJSON, "json", false, "print the policies, their schedules and the topics as JSON")
	cmd.AddCommand(check)
	return cmd
}

// checkReport is what `herald policy check` prints.
type checkReport struct {
	File     string                  `json:"file"`
	Policies []policyReport          `json:"policies"`
	Topics   map[string]policy.Topic `json:"topics"`
}

// policyReport is one policy, defaults applied, and its schedule.
type policyReport struct {
	Name string `json:"name"`
	policy.Policy
	Schedule []attemptReport `json:"schedule"`
}

// attemptReport is one row of a schedule.
type attemptReport struct {
	Attempt int             `json:"attempt"`
	Wait    notify.Duration `json:"wait"`
	// SinceFirst is how long after the first attempt this one starts.
	SinceFirst notify.Duration `json:"since_first_attempt"`
}

func newCheckReport(file string, s *policy.Set) *checkReport {
	r := &checkReport{File: file, Topics: s.Topics}
	for _, name := range slices.Sorted(maps.Keys(s.Policies)) {
		p := s.Policies[name]
		pr := policyReport{Name: name, Policy: p}
		offsets := policy.Schedule(p.Backoff)
		for i, at := range offsets {
			pr.Schedule = append(pr.Schedule, attemptReport{Attempt: i, Wait: p.Backoff[i], SinceFirst: notify.Duration(at - offsets[0])})
		}
		r.Policies = append(r.Policies, pr)
	}
	return r
}

func (r *checkReport) print(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "policy %s: %d attempts", p.Name, len(p.Schedule))
		if first := p.Schedule[0].Wait; first > 0 {
			fmt.Fprintf(tw, ", the first %s after the send time", shortDuration(first))
		}
		fmt.Fprintf(tw, ", the last %s after the first, then dead\n", shortDuration(p.Schedule[len(p.Schedule)-1].SinceFirst))
		fmt.Fprintf(tw, "  ttr %s, timeout %s, retry_on %s", shortDuration(p.TTR), shortDuration(p.Timeout), strings.Join(p.RetryOn, ","))
		if p.SuccessBody != "" {
			fmt.Fprintf(tw, ", success_body '%s'", p.SuccessBody)
		}
		if p.HonorRetryAfter {
			fmt.Fprintf(tw, ", honours Retry-After up to %s", shortDuration(p.MaxRetryAfter))
		}
		if p.Jitter > 0 {
			fmt.Fprintf(tw, ", jitter up to %g%%", p.Jitter*100)
		}
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "  ATTEMPT\tWAIT\tSINCE FIRST ATTEMPT")
		for _, a := range p.Schedule {
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", a.Attempt, shortDuration(a.Wait), shortDuration(a.SinceFirst))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Topics) > 0 {
		fmt.Fprintln(tw, "TOPIC\tCHANNEL\tPOLICY\tTEMPLATE\tTARGET")
		for _, name := range slices.Sorted(maps.Keys(r.Topics)) {
			t := r.Topics[name]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, dash(t.Channel), dash(t.Policy), dash(t.Template), dash(t.Target))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "%s: ok, %d policies, %d topics\n", r.File, len(r.Policies), len(r.Topics))
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortDuration drops the zero units Go prints: "2m" for 2m0s, "1h" for
// 1h0m0s, "24h22m" for 24h22m0s.
func shortDuration(d notify.Duration) string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// StartPolicies loads the policies file the configuration names and keeps
// it current: the Watcher rereads the file when it changes and on SIGHUP,
// until stop is called or ctx ends. A file that does not load is a
// *UsageError naming the offending key. Call it only from a command built
// with withConfig.
func (b *Base) StartPolicies(ctx context.Context) (w *policy.Watcher, stop func(), err error) {
	w, err = policy.NewWatcher(&policy.WatcherConfig{Path: b.Config.PoliciesFile, Logger: b.Logger})
	if err != nil {
		return nil, nil, &UsageError{Err: err}
	}
	w.Start(ctx)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				b.Logger.InfoContext(ctx, "herald: SIGHUP, reloading the policies file")
				_ = w.Reload(ctx) // the Watcher logs the outcome
			}
		}
	}()
	return w, func() {
		signal.Stop(hup)
		cancel()
		<-done
		w.Stop()
	}, nil
}
