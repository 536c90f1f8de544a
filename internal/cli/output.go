package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"
)

// Format is the output format chosen with -o/--output.
type Format string

// The output formats.
const (
	// FormatTable is for people: aligned columns, times as RFC 3339 with
	// how long ago (or how far ahead) they are.
	FormatTable Format = "table"
	// FormatJSON is for programs: one JSON document per command, a stable
	// interface that later versions only extend with new fields.
	FormatJSON Format = "json"
)

// outputFormat returns the --output of the app (checked before any command
// runs, so it is one of the formats; empty means table).
func outputFormat(c *ucli.Context) Format {
	if f := Format(c.String("output")); f != "" {
		return f
	}
	return FormatTable
}

// stdout is where a command writes its result.
func stdout(c *ucli.Context) io.Writer { return c.App.Writer }

// stderr is where a command writes notes that are not its result.
func stderr(c *ucli.Context) io.Writer { return c.App.ErrWriter }

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns: header and rows, separated by two spaces.
// An empty cell shows as "-".
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// humanTime renders a Unix-millisecond time as RFC 3339 (UTC, with
// milliseconds) followed by its distance from now: "(3s ago)", "(in 12s)".
func humanTime(ms int64, now time.Time) string {
	t := time.UnixMilli(ms).UTC()
	return t.Format("2006-01-02T15:04:05.000Z07:00") + " (" + relative(t, now) + ")"
}

// relative says how far t is from now, rounded to a unit that reads well.
func relative(t, now time.Time) string {
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
