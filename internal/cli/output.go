package cli

import (
	"io"

	"github.com/krabka/krole/internal/render"
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
func writeJSON(w io.Writer, v any) error { return render.WriteJSON(w, v) }
