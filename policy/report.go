package policy

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/internal/show"
	"github.com/heraldhq/herald/notify"
)

// Report is what `herald policy check` prints: every policy of a Set,
// defaults applied, with its Schedule, and the Set's topics.
type Report struct {
	File     string           `json:"file"`
	Policies []ReportPolicy   `json:"policies"`
	Topics   map[string]Topic `json:"topics"`
}

// ReportPolicy is one policy, defaults applied, and its schedule.
type ReportPolicy struct {
	Name string `json:"name"`
	Policy
	Schedule []ReportAttempt `json:"schedule"`
}

// ReportAttempt is one row of a schedule.
type ReportAttempt struct {
	Attempt int             `json:"attempt"`
	Wait    notify.Duration `json:"wait"`
	// SinceFirst is how long after the first attempt this one starts:
	// ScheduleCeiling when longer than a time.Duration holds.
	SinceFirst notify.Duration `json:"since_first_attempt"`
}

// NewReport returns the report of s, loaded from file. The credentials in
// its topics' targets and on_done URLs show as xxxxx (notify.RedactedURL),
// as the API and the dashboard show a target.
func NewReport(file string, s *Set) *Report {
	r := &Report{File: file, Topics: redactedTopics(s.Topics)}
	for _, name := range slices.Sorted(maps.Keys(s.Policies)) {
		p := s.Policies[name]
		pr := ReportPolicy{Name: name, Policy: p}
		// The schedule from the first attempt rather than from send_at,
		// since an offset that hit the ceiling cannot be taken back.
		fromFirst := slices.Clone(p.Backoff)
		fromFirst[0] = 0
		for i, at := range Schedule(fromFirst) {
			pr.Schedule = append(pr.Schedule, ReportAttempt{Attempt: i, Wait: p.Backoff[i], SinceFirst: notify.Duration(at)})
		}
		r.Policies = append(r.Policies, pr)
	}
	return r
}

// Print writes the report as text: per policy a summary line and its
// schedule as a table, then the topics. Text from the file goes through
// show, so it cannot drive the terminal.
func (r *Report) Print(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "policy %s: %s", show.Clean(p.Name), show.Count(len(p.Schedule), "attempt", "attempts"))
		if first := p.Schedule[0].Wait; first > 0 {
			fmt.Fprintf(tw, ", the first %s after the send time", first)
		}
		if len(p.Schedule) > 1 {
			fmt.Fprintf(tw, ", the last %s after the first", sinceFirst(p.Schedule[len(p.Schedule)-1]))
		}
		fmt.Fprintln(tw, ", then dead")
		fmt.Fprintf(tw, "  ttr %s, timeout %s, retry_on %s", p.TTR, p.Timeout, strings.Join(p.RetryOn, ","))
		if p.SuccessBody != "" {
			fmt.Fprintf(tw, ", success_body '%s'", show.Clean(p.SuccessBody))
		}
		if p.HonorRetryAfter {
			fmt.Fprintf(tw, ", honours Retry-After up to %s", p.MaxRetryAfter)
		}
		if p.Jitter > 0 {
			fmt.Fprintf(tw, ", jitter up to %g%%", p.Jitter*100)
		}
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "  ATTEMPT\tWAIT\tSINCE FIRST ATTEMPT")
		for _, a := range p.Schedule {
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", a.Attempt, a.Wait, sinceFirst(a))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Topics) > 0 {
		fmt.Fprintln(tw, "TOPIC\tCHANNEL\tPOLICY\tTEMPLATE\tTARGET")
		for _, name := range slices.Sorted(maps.Keys(r.Topics)) {
			t := r.Topics[name]
			// Policy names and templates are any string the file holds.
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, show.Dash(t.Channel), show.Dash(show.Clean(t.Policy)), show.Dash(show.Clean(t.Template)), show.Dash(topicTarget(t)))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "%s: ok, %s, %s\n", r.File, show.Count(len(r.Policies), "policy", "policies"), show.Count(len(r.Topics), "topic", "topics"))
	return tw.Flush()
}

// redactedTopics returns a copy of topics, each Redacted, leaving the Set,
// which senders read, as it is.
func redactedTopics(topics map[string]Topic) map[string]Topic {
	out := make(map[string]Topic, len(topics))
	for name, t := range topics {
		out[name] = t.Redacted()
	}
	return out
}

// Redacted returns t as an operator is shown it: its target and on_done
// URL through notify.RedactedURL, as the API shows a notification's
// target. The credentials in them are the receiver's, not the reader's.
func (t Topic) Redacted() Topic {
	t.Target = notify.RedactedURL(t.Target)
	if t.Poll != nil {
		poll := *t.Poll
		poll.OnDone = notify.RedactedURL(poll.OnDone)
		t.Poll = &poll
	}
	return t
}

// topicTarget is where a topic's notifications go by default: its target,
// or the endpoint it names instead.
func topicTarget(t Topic) string {
	if t.Endpoint != "" {
		return "endpoint " + t.Endpoint
	}
	return t.Target
}

// sinceFirst prints a row's time since the first attempt, saying so where
// it is past what a time.Duration holds rather than printing the ceiling
// as if it were the offset.
func sinceFirst(a ReportAttempt) string {
	if time.Duration(a.SinceFirst) == ScheduleCeiling {
		return ScheduleCeilingText
	}
	return a.SinceFirst.String()
}
