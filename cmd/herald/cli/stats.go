package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/store"
)

// printStats prints stats as a table.
func printStats(out io.Writer, r *api.Stats) error {
	if len(r.Topics) == 0 {
		_, err := fmt.Fprintln(out, "no notifications yet")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tSCHEDULED\tWAITING\tRESERVED\tDEAD\tSUCCEEDED\tFAILED ATTEMPTS")
	row := func(name string, t store.TopicStats) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", name, t.Scheduled, t.Waiting, t.Reserved, t.Dead, t.SucceededTotal, t.FailedAttemptsTotal)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Topics)) {
		row(name, r.Topics[name])
	}
	row("total", r.Totals)
	return tw.Flush()
}

func (c *app) statsCommand() *cobra.Command {
	var asJSON bool
	cmd := readOnly(&cobra.Command{
		Use:   "stats",
		Short: "Count notifications per topic",
		Long: `Stats prints, per topic, how many notifications are scheduled, waiting
(held behind an earlier one of their order key), reserved (an attempt
running) and dead now, and how many have succeeded and how many attempts
have failed since the topic's first notification. --json prints what
GET /v1/stats answers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withClient(cmd, false, func(cl *client.Client) error {
				topics, err := cl.Stats(cmd.Context())
				if err != nil {
					return err
				}
				r := api.NewStats(topics)
				return c.output(asJSON, r, func(out io.Writer) error { return printStats(out, r) })
			})
		},
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
