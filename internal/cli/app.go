// Package cli is the krole command line: the urfave/cli/v2 app that
// main.go runs, one file per command.
//
// # Adding a command
//
// Write the command in its own file as a func returning *ucli.Command and
// add it to [commands]. The app gives every command, without more code:
//
//   - the global flags (--brokers, --topic, --txn-prefix, -o, TLS, SASL),
//     read with [configFrom] and [outputFormat], wherever they appear on
//     the command line (see normalizeArgs);
//   - usage errors that print one line and a hint and exit 2: return
//     [Usagef] or [InvalidName] (roleArg and memberArg do);
//   - any other returned error printed as one line, exit 1;
//   - ctx (c.Context) cancelled on SIGINT and SIGTERM, for long-running
//     commands to return from cleanly with nil.
//
// Results go to stdout(c), notes to stderr(c): never os.Stdout, so tests
// can run the app in-process through [Run].
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/suggest"
	"github.com/krabka/krole/internal/supervise"
)

// commands lists the app's commands, in the order the help shows them.
// A new command is one line here.
func commands() []*ucli.Command {
	return []*ucli.Command{
		devCommand(),
		demoCommand(),
		initCommand(),
		registerCommand(),
		resignCommand(),
		drainCommand(),
		pruneCommand(),
		runCommand(),
		benchCommand(),
		leaderCommand(),
		observeCommand(),
		describeCommand(),
		recordsCommand(),
		tableCommand(),
		serveCommand(),
		checkCommand(),
		versionCommand(),
	}
}

// Run runs the krole command line with args (without the program name),
// writing results to stdout and messages to stderr, and returns the exit
// code: [ExitOK], [ExitUsage] for a usage error or an invalid name,
// [ExitFailure] for anything else, except the codes of `krole run`
// (CMD's own, [ExitRunTimeout], [ExitRunBusy], 126, 127) and `krole
// leader` ([ExitLeaderUnknown]). It never calls os.Exit and never prints
// a stack trace. Cancelling ctx stops a long-running command (`krole dev`),
// which then returns ExitOK.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	if len(args) > 0 && args[0] == supervise.WatchdogCommand {
		return supervise.Watchdog(args[1:]) // krole run's child, see supervise
	}
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "krole: internal error: %v (please report it; KROLE_DEBUG=1 prints the stack)\n", p)
			if os.Getenv("KROLE_DEBUG") != "" {
				fmt.Fprintf(stderr, "%s", debug.Stack())
			}
			code = ExitFailure
		}
	}()
	app := newApp(stdout, stderr)
	if va, ok := versionArgs(args); ok {
		args = va // --version is the version command, which knows -o json
	}
	err := misplacedFlag(app, args)
	if err == nil {
		err = app.RunContext(ctx, append([]string{app.Name}, normalizeArgs(app, args)...))
	}
	var ec ucli.ExitCoder
	if errors.As(err, &ec) && strings.HasPrefix(ec.Error(), "No help topic for ") {
		// `krole help nosuch`: urfave/cli's exit 3 is a usage error here.
		err = &UsageError{Err: fmt.Errorf("unknown command %s", strings.TrimPrefix(ec.Error(), "No help topic for ")),
			Hint: "see 'krole --help' for the commands"}
	}
	report(stderr, err)
	return exitCode(err)
}

// versionArgs returns the arguments of the version command, keeping -o,
// when args ask for --version (or -v, its alias) before any "--", so that
// both print what `krole version` prints.
func versionArgs(args []string) ([]string, bool) {
	out, found := []string{"version"}, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return out, found
		case a == "--version" || a == "-version" || a == "-v" || a == "--v":
			found = true
		case (a == "-o" || a == "--output") && i+1 < len(args):
			out = append(out, a, args[i+1])
			i++
		case strings.HasPrefix(a, "-o=") || strings.HasPrefix(a, "--output="):
			out = append(out, a)
		}
	}
	return out, found
}

// newApp builds the app: a fresh one per run, since urfave/cli keeps state
// in it.
func newApp(stdout, stderr io.Writer) *ucli.App {
	app := &ucli.App{
		Name:      "krole",
		HelpName:  "krole",
		Usage:     "role succession (leader election with broker-enforced fencing) on Apache Kafka",
		UsageText: "krole [global flags] COMMAND [flags] [ROLE]",
		Description: "krole keeps, for each role, a queue of candidate members in join order on one\n" +
			"compacted Kafka topic; one member holds the role under a lease, and the Kafka\n" +
			"transaction coordinator fences the previous holder at the broker.\n\n" +
			"Start a local cluster with `krole dev`, then in each member's terminal\n" +
			"`krole run ROLE --member M -- CMD`: one member runs CMD at a time.\n" +
			"Flags may follow the command and its ROLE.\n\n" +
			"Exit codes: 0 success (also dev, run, observe, table --watch and serve stopped\n" +
			"by SIGINT or SIGTERM); 2 a usage error or an invalid name; 1 anything else;\n" +
			"130 (143) when a second SIGINT (a SIGTERM 2s or more after the first signal)\n" +
			"ends krole before its clean-up.\n" +
			"krole run: CMD's own code when CMD exits by itself, 124 when --timeout passed,\n" +
			"75 when --try found the role held, 73 when another live process runs as its\n" +
			"--member, 126 when CMD cannot be executed, 127 when it is not found. krole leader: 1 when the role has no live holder, 3 when it could\n" +
			"not find out (no broker answered, no such topic, ...).",
		Version:        version(),
		Writer:         stdout,
		ErrWriter:      stderr,
		Flags:          globalFlags(),
		Commands:       commands(),
		Before:         validateOutput,
		Action:         rootAction,
		OnUsageError:   onUsageError,
		ExitErrHandler: func(*ucli.Context, error) {}, // Run maps errors to exit codes
	}
	var tame func([]*ucli.Command)
	tame = func(cmds []*ucli.Command) {
		for _, cmd := range cmds {
			if cmd.OnUsageError == nil {
				cmd.OnUsageError = onUsageError
			}
			if cmd.CustomHelpTemplate == "" {
				cmd.CustomHelpTemplate = ucli.CommandHelpTemplate + globalFlagsNote
			}
			tame(cmd.Subcommands)
		}
	}
	tame(app.Commands)
	return app
}

// globalFlagsNote ends the help of every command: urfave/cli shows only
// the command's own flags there.
const globalFlagsNote = `
GLOBAL OPTIONS (anywhere on the command line; see 'krole --help'):
   --brokers, --topic, --txn-prefix, -o/--output, --tls*, --sasl-*
`

// rootAction runs when no command was named, or an unknown one.
func rootAction(c *ucli.Context) error {
	if name := c.Args().First(); name != "" {
		hint := "see 'krole --help' for the commands"
		if s := suggest.Closest(name, commandNames(c.App.Commands)); s != "" {
			hint = fmt.Sprintf("did you mean 'krole %s'? %s", s, hint)
		}
		return &UsageError{Err: fmt.Errorf("unknown command %q", name), Hint: hint}
	}
	// No command: a short usage on stderr, and a usage exit (as `go`
	// does), so that a script that forgot its command fails; the whole
	// help is for --help.
	fmt.Fprintf(c.App.ErrWriter, "usage: %s\n\ncommands: %s\n\nsee 'krole --help' for what each does, and 'krole COMMAND --help' for its flags\n",
		c.App.UsageText, strings.Join(commandNames(c.App.Commands), ", "))
	return ucli.Exit("", ExitUsage)
}

// flagInMessage finds the flag the flag package names, with one dash, in
// its "invalid value" messages.
var flagInMessage = regexp.MustCompile(` for (?:flag )?(-[A-Za-z0-9][A-Za-z0-9-]*):`)

// onUsageError turns urfave/cli's flag parsing errors into one-line usage
// errors, with a suggestion for a misspelt flag.
func onUsageError(c *ucli.Context, err error, _ bool) error {
	msg := err.Error()
	hint := helpHint(c)
	const undefined = "flag provided but not defined: -"
	if n, ok := strings.CutPrefix(msg, undefined); ok {
		msg = "unknown flag " + dashes(n)
		var names []string
		for _, f := range append(append([]ucli.Flag{}, c.App.Flags...), commandFlags(c)...) {
			names = append(names, f.Names()...)
		}
		if s := suggest.Closest(n, names); s != "" {
			hint = fmt.Sprintf("did you mean %s? %s", dashes(s), hint)
		}
	} else if n, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		msg = "flag " + dashes(n) + " needs a value"
	} else if m := invalidDuration.FindStringSubmatch(msg); m != nil && isDurationFlag(c, m[2]) {
		// "invalid value "3" for flag -lease-duration: parse error"
		msg = fmt.Sprintf("invalid value %q for %s: %s", m[1], dashes(m[2]), durationProblem(m[1]))
	} else if m := invalidDurationEnv.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("invalid value %q in %s (for %s): %s", m[1], m[2], dashes(m[3]), durationProblem(m[1]))
	} else if m := flagInMessage.FindStringSubmatchIndex(msg); m != nil {
		// "invalid boolean value "x" for -tls: parse error"
		msg = msg[:m[2]] + dashes(msg[m[2]+1:m[3]]) + msg[m[3]:]
	}
	return &UsageError{Err: fmt.Errorf("%s", msg), Hint: hint}
}

// invalidDuration matches the flag package's message for a value a
// duration flag could not parse: the value, and the flag's name.
var invalidDuration = regexp.MustCompile(`^invalid value "(.*)" for flag -([A-Za-z0-9][A-Za-z0-9-]*): parse error$`)

// invalidDurationEnv matches urfave/cli's message for a duration in an
// environment variable: the value, the variable and the flag's name.
var invalidDurationEnv = regexp.MustCompile(`^could not parse "(.*)" as duration value from environment variable "([^"]+)" for flag ([A-Za-z0-9-]+): `)

// isDurationFlag reports whether the app or c's command has a duration
// flag called name.
func isDurationFlag(c *ucli.Context, name string) bool {
	for _, f := range append(append([]ucli.Flag{}, c.App.Flags...), commandFlags(c)...) {
		if _, ok := f.(*ucli.DurationFlag); ok && slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// durationProblem says what is wrong with v, a value time.ParseDuration
// refused: most often a number without its unit.
func durationProblem(v string) string {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return fmt.Sprintf("a duration needs a unit, e.g. %ss", v)
	}
	return "not a duration: a number and a unit (ms, s, m, h), e.g. 500ms, 3s or 1m30s"
}

func commandFlags(c *ucli.Context) []ucli.Flag {
	if c.Command == nil {
		return nil
	}
	return c.Command.Flags
}

func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func commandNames(cmds []*ucli.Command) []string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Names()...)
		}
	}
	return names
}
