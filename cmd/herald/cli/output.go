package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"
)

// printJSON writes v as indented JSON: what --json prints. Records, stats
// and dead-letter answers take the shapes the HTTP API answers with, so a
// script can move between the two.
//
// encoding/json escapes the C0 controls but writes DEL and the C1 controls
// (U+0080 to U+009F, CSI among them) as they are, and a payload's bytes as
// the producer sent them, invalid UTF-8 included: printed to a terminal, a
// receiver's error or a payload could drive it. Those controls are escaped
// here, and an invalid byte becomes U+FFFD, as encoding/json makes it in
// any other string. They can only stand inside strings, where the escape
// means the same character, so the JSON decodes to the same values.
func printJSON(out io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := buf.Bytes()
	var safe []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			safe = append(safe, `\ufffd`...)
		case r == '\x7f' || r >= 0x80 && r <= 0x9f:
			safe = fmt.Appendf(safe, `\u%04x`, r)
		default:
			safe = append(safe, b[i:i+size]...)
		}
		i += size
	}
	_, err := out.Write(safe)
	return err
}

// isTerminal reports whether w is a terminal, where a progress bar can
// redraw its line; piped or redirected output gets none.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
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

// output prints what a command with --json got: v as JSON when asJSON,
// else what text writes.
func (c *app) output(asJSON bool, v any, text func(io.Writer) error) error {
	if asJSON {
		return printJSON(c.base.Out, v)
	}
	return text(c.base.Out)
}

// reply prints v as JSON, unless err says the command failed.
func (c *app) reply(err error, v any) error {
	if err != nil {
		return err
	}
	return printJSON(c.base.Out, v)
}

// say prints a line of a, unless err says the command failed.
func (c *app) say(err error, a ...any) error {
	if err == nil {
		_, err = fmt.Fprintln(c.base.Out, a...)
	}
	return err
}
