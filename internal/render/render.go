// Package render draws what krole's commands print for people: aligned
// tables, times relative to now, one-line JSON, and the rows of the role
// table, once or live (krole table --watch). It reads nothing from the
// cluster: the commands hand it what to draw.
package render

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes v as one line of JSON, HTML characters unescaped.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Table writes aligned columns: a header and rows, separated by two
// spaces. An empty cell shows as "-". Nothing is written before Flush.
type Table struct {
	tw *tabwriter.Writer
}

// NewTable returns a table on w that starts with header.
func NewTable(w io.Writer, header ...string) *Table {
	t := &Table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.Row(header...)
	return t
}

// Row adds a row of cells.
func (t *Table) Row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// Flush writes the table.
func (t *Table) Flush() error { return t.tw.Flush() }

// HumanTime renders a Unix-millisecond time as RFC 3339 (UTC, with
// milliseconds) followed by its distance from now: "(3s ago)", "(in 12s)".
func HumanTime(ms int64, now time.Time) string {
	t := time.UnixMilli(ms).UTC()
	return t.Format("2006-01-02T15:04:05.000Z07:00") + " (" + Relative(t, now) + ")"
}

// Relative says how far t is from now, rounded to a unit that reads well.
func Relative(t, now time.Time) string {
	d := t.Sub(now)
	future := d > 0
	if d < 0 {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// Clock shows t as this machine's time of day.
func Clock(t time.Time) string { return t.Local().Format("15:04:05") }

// RoundDuration rounds d for a line: to 100ms below 10s, else to seconds.
func RoundDuration(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// IsTerminal reports whether w is a terminal (a character device).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Wrap returns head and text on lines of at most width characters
// (a word longer than a line keeps a line of its own), the lines after
// the first indented by the width of head, each ending in a newline.
func Wrap(head, text string, width int) string {
	var b strings.Builder
	b.WriteString(head)
	indent := strings.Repeat(" ", len(head))
	col := len(head)
	for i, w := range strings.Fields(text) {
		if i > 0 && col+1+len(w) > width {
			b.WriteString("\n" + indent)
			col = len(indent)
		} else if i > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	b.WriteByte('\n')
	return b.String()
}
