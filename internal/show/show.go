// Package show formats values for a terminal: short durations, times, cut
// text, a notification's record, and text from outside (payloads,
// receivers' answers, errors) with its control characters made visible, so
// that stored data cannot move the cursor, clear the screen or retitle the
// window of whoever prints it. It is internal plumbing shared by the herald
// command, the demo and policy's check report.
package show

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Truncate cuts s to n runes, marking the cut with "...".
func Truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:max(n-3, 0)]) + "..."
}

// Dash is s, or "-" when s is empty, for a table cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Clean makes text from outside safe to print on a terminal: every control
// character (C0 such as ESC and BEL, DEL, C1) and every invalid byte is
// written as a Go escape (\x1b, \a, \u009b), so nothing of it reaches the
// terminal as a command, and the operator still sees that it was there.
// Tabs and newlines are escaped too: they would break a table's rows.
func Clean(s string) string {
	clean := true
	for _, r := range s {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == unicode.ReplacementChar && strings.HasPrefix(s[i:], "\uFFFD"):
			b.WriteRune(r)
		case r == unicode.ReplacementChar:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r):
			q := fmt.Sprintf("%+q", string(r))
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Line is Clean for one cell of a table: runs of white space (newlines
// included) become one space, then the rest is escaped and cut to n runes.
func Line(s string, n int) string {
	return Truncate(Clean(strings.Join(strings.Fields(s), " ")), n)
}

// Count says n of a thing, one in the singular for 1 and many for any
// other n: "1 text", "0 texts", "2 policies".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
