package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// timeLayout prints times in tables: RFC 3339 in UTC, to the millisecond,
// since attempts of one notification can be milliseconds apart.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// printJSON writes v as indented JSON: what --json prints. Records, stats
// and dead-letter answers take the shapes the HTTP API answers with, so a
// script can move between the two.
func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// formatTime prints t in UTC with timeLayout.
func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// relative says how far t is from now: "in 1m58s" or "3.2s ago", to the
// tenth of a second.
func relative(t, now time.Time) string {
	d := t.Sub(now).Round(100 * time.Millisecond)
	if d >= 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

// truncate cuts s to n runes, marking the cut with "...".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:max(n-3, 0)]) + "..."
}

// isTerminal reports whether w is a terminal (a character device), where a
// progress bar can redraw its line; piped or redirected output gets none.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressWidth is the number of cells of a progress bar.
const progressWidth = 30

// progressBar redraws one terminal line as work advances:
// "replaying [#########.....................] 1500/5000".
type progressBar struct {
	out   io.Writer
	label string
	total int
}

// set draws the bar with done of total finished.
func (p *progressBar) set(done int) {
	filled := progressWidth
	if p.total > 0 {
		filled = min(progressWidth*done/p.total, progressWidth)
	}
	fmt.Fprintf(p.out, "\r%s [%s%s] %d/%d", p.label, strings.Repeat("#", filled), strings.Repeat(".", progressWidth-filled), done, p.total)
}

// finish ends the bar's line.
func (p *progressBar) finish() { fmt.Fprintln(p.out) }
