package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/krabka/krole/internal/explain"
	ucli "github.com/urfave/cli/v2"
)

// Exit codes of [Run].
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitFailure: anything that is not the caller's mistake on the command
	// line: no broker answered, the cluster refused a request, a record did
	// not decode.
	ExitFailure = 1
	// ExitUsage: a usage error (unknown command or flag, a missing or extra
	// argument, a bad flag value) or an invalid role or member name.
	ExitUsage = 2
)

// UsageError is a mistake on the command line. [Run] prints it on one line,
// followed by a one-line hint when Hint is set, and exits with [ExitUsage].
// Commands return one through [Usagef] or [InvalidName].
type UsageError struct {
	Err  error
	Hint string // e.g. "see 'krole register --help'"; empty for none
}

func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a [*UsageError] whose hint points at the help of the
// command that c runs.
func Usagef(c *ucli.Context, format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...), Hint: helpHint(c)}
}

// InvalidName returns err (a [*codec.InvalidError] from codec.NewRole or
// codec.NewMemberID) as a usage error. Its message names the broken rule, so
// no hint follows it.
func InvalidName(err error) error { return &UsageError{Err: err} }

func helpHint(c *ucli.Context) string {
	if c == nil || c.Command == nil || c.Command.Name == "" || c.Command.Name == c.App.Name {
		return "see 'krole --help'"
	}
	name := c.Command.Name
	if full, ok := strings.CutPrefix(c.Command.HelpName, c.App.Name+" "); ok && strings.HasSuffix(full, " "+name) {
		name = full // a subcommand: "bench renew"
	}
	return fmt.Sprintf("see 'krole %s --help'", name)
}

// exitCode maps the error a command returned to the process exit code.
func exitCode(err error) int {
	var ue *UsageError
	var ec ucli.ExitCoder
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &ec):
		if code := ec.ExitCode(); code != 0 {
			return code
		}
		return ExitFailure
	}
	return ExitFailure
}

// report prints err to w: one line ("krole: ..."), without the package
// names the libraries begin their errors with, and the hint of a usage
// error on a second line. Nothing for a nil error, or a cli.Exit error with
// an empty message.
func report(w io.Writer, err error) {
	if err == nil {
		return
	}
	msg := explain.OneLine(explain.WithoutPackagePrefixes(explain.Describe(err)))
	if msg == "" {
		return
	}
	fmt.Fprintf(w, "krole: %s\n", msg)
	var ue *UsageError
	if errors.As(err, &ue) && ue.Hint != "" {
		fmt.Fprintf(w, "%s\n", ue.Hint)
	}
}

// addrInUse reports whether err says that a listen address is taken.
func addrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
