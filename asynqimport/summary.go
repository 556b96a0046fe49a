package asynqimport

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/heraldhq/herald/internal/show"
)

// Summary is what an import did. Matched = Imported + Present + Skipped,
// also after an error: the tasks of a batch Herald's store failed to take
// are not counted.
type Summary struct {
	Queue  string  `json:"queue"`
	States []State `json:"states"`
	DryRun bool    `json:"dry_run"`
	Move   bool    `json:"move"`
	// Matched counts the tasks read in the chosen states.
	Matched int `json:"matched"`
	// Imported counts the tasks stored in Herald (with DryRun: that would
	// be).
	Imported int `json:"imported"`
	// Present counts the tasks Herald already held with the same content.
	Present int `json:"already_present"`
	// Skipped counts the tasks left out; Reasons says why.
	Skipped int       `json:"skipped"`
	Reasons []*Reason `json:"skipped_reasons"`
	// Base64 counts the payloads that were not JSON and became base64
	// strings.
	Base64 int `json:"base64_payloads"`
	// Deleted counts the tasks deleted from asynq (Move); NotDeleted says
	// why the others stored in Herald were not.
	Deleted    int       `json:"deleted"`
	NotDeleted []*Reason `json:"not_deleted,omitempty"`
	// Active and Aggregating count the tasks the queue held at the start
	// in states an import does not read: an asynq worker holds the active
	// ones, and the aggregating ones wait for their group to be aggregated
	// into one task. Until both are 0, asynq still holds work to import.
	Active      int `json:"active"`
	Aggregating int `json:"aggregating"`
}

// MaxReasonIDs is how many task ids a Reason lists.
const MaxReasonIDs = 5

// Reason is one cause of skipped (or not deleted) tasks: how many, and the
// ids of the first MaxReasonIDs.
type Reason struct {
	Reason string   `json:"reason"`
	Count  int      `json:"count"`
	IDs    []string `json:"ids"`
}

// add counts id under reason in list.
func add(list []*Reason, reason, id string) []*Reason {
	i := slices.IndexFunc(list, func(r *Reason) bool { return r.Reason == reason })
	if i < 0 {
		list, i = append(list, &Reason{Reason: reason, IDs: []string{}}), len(list)
	}
	r := list[i]
	r.Count++
	if len(r.IDs) < MaxReasonIDs {
		r.IDs = append(r.IDs, id)
	}
	return list
}

func (s *Summary) skip(reason, id string) {
	s.Skipped++
	s.Reasons = add(s.Reasons, reason, id)
}

// WriteTo writes s as `herald import asynq` prints it.
func (s *Summary) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	if s.DryRun {
		b.WriteString("dry run: nothing was stored in Herald or deleted from asynq\n")
	}
	states := make([]string, len(s.States))
	for i, st := range s.States {
		states[i] = string(st)
	}
	imported := "imported"
	if s.DryRun {
		imported = "to import"
	}
	row := func(label string, n int) { fmt.Fprintf(&b, "%-19s %d\n", label, n) }
	fmt.Fprintf(&b, "%-19s %d (queue %s: %s)\n", "matched", s.Matched, s.Queue, strings.Join(states, ", "))
	row(imported, s.Imported)
	row("already present", s.Present)
	row("skipped", s.Skipped)
	writeReasons(&b, s.Reasons)
	row("base64 payloads", s.Base64)
	if s.Move {
		row("deleted from asynq", s.Deleted)
		writeReasons(&b, s.NotDeleted)
	}
	if s.Active > 0 {
		fmt.Fprintf(&b, "%-19s %d (not read: let them finish; if their asynq server died, run one for this queue, "+
			"paused will do, until asynq puts them back in retry or archives them, within about 2 minutes; then run the import again)\n",
			"active", s.Active)
	}
	if s.Aggregating > 0 {
		fmt.Fprintf(&b, "%-19s %d (not read: they wait until an asynq server of this queue with a GroupAggregator "+
			"makes each group one pending task; then run the import again)\n", "aggregating", s.Aggregating)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// writeReasons writes one indented line per reason: its count, the reason
// and the first ids.
func writeReasons(b *strings.Builder, reasons []*Reason) {
	for _, r := range reasons {
		// Task ids and the reasons that quote tasks are any text asynq
		// held: escaped, they cannot drive the terminal.
		ids := make([]string, len(r.IDs))
		for i, id := range r.IDs {
			ids[i] = show.Clean(id)
		}
		list := strings.Join(ids, ", ")
		if r.Count > len(r.IDs) {
			list += ", ..."
		}
		fmt.Fprintf(b, "  %d: %s (%s)\n", r.Count, show.Clean(r.Reason), list)
	}
}

var _ io.WriterTo = (*Summary)(nil)
