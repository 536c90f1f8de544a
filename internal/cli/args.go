package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// normalizeArgs lets flags go anywhere on the command line, as users expect
// (`krole register controller --member node-1 -o json`), although
// urfave/cli v2 stops parsing flags at the first argument and reads global
// flags only before the command name. It rewrites args (without the program
// name) to the order urfave/cli parses:
//
//	[global flags] COMMAND [command flags] [--] [arguments]
//
// A flag after the command name is the command's when the command defines
// it, otherwise a global flag when the app defines one of that name; an
// unknown flag stays with the command, so that urfave/cli reports it. "--"
// ends flag parsing: everything after it is an argument. Commands with
// subcommands, or that skip flag parsing, get only their global flags moved.
// When no command is found, args are returned unchanged.
//
// For a command in [dashSeparated] (krole run ROLE -- CMD), the "--" the
// user wrote is kept among the arguments, after one that ends the flags,
// so that the command can tell the arguments before it (ROLE) from those
// after it (CMD): see [splitDash].
func normalizeArgs(app *ucli.App, args []string) []string {
	globals := flagIndex(app.Flags, ucli.HelpFlag, ucli.VersionFlag)

	// The global flags before the command name, and the command name.
	var head []string
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !isFlag(a) {
			break
		}
		takesValue, known := globals[flagName(a)]
		if !known {
			return args // urfave/cli reports the unknown flag
		}
		head = append(head, a)
		if takesValue && !strings.Contains(a, "=") && i+1 == len(args) {
			return args // a value is missing: urfave/cli reports it
		}
		if takesValue && !strings.Contains(a, "=") {
			i++
			head = append(head, args[i])
		}
	}
	if i >= len(args) || args[i] == "--" {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return args
	}
	name, rest := args[i], args[i+1:]

	local := flagIndex(cmd.Flags, ucli.HelpFlag)
	keepLocal := len(cmd.Subcommands) == 0 && !cmd.SkipFlagParsing
	keepDash := keepLocal && dashSeparated[name]
	var flags, positional []string
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" {
			if keepDash {
				positional = append(positional, a)
			}
			positional = append(positional, rest[j+1:]...)
			break
		}
		if !isFlag(a) {
			positional = append(positional, a)
			continue
		}
		n := flagName(a)
		takesValue, isLocal := local[n]
		gTakesValue, isGlobal := globals[n]
		dst := &flags
		switch {
		case isLocal && keepLocal:
		case isLocal: // a command that parses its own way: leave it be
			dst = &positional
		case isGlobal:
			dst, takesValue = &head, gTakesValue
		case keepLocal: // unknown: let urfave/cli name it
		default:
			dst = &positional
		}
		*dst = append(*dst, a)
		if !takesValue || strings.Contains(a, "=") {
			continue
		}
		if j+1 == len(rest) {
			// The last argument is a flag that needs a value: end the
			// command line with it, so that urfave/cli says so.
			if dst == &head {
				return head
			}
			if dst == &flags {
				return append(append(head, name), flags...)
			}
			break
		}
		j++
		*dst = append(*dst, rest[j])
	}

	out := make([]string, 0, len(args)+1)
	out = append(out, head...)
	out = append(out, name)
	out = append(out, flags...)
	if keepDash {
		out = append(out, "--")
	} else if keepLocal {
		for _, p := range positional {
			if isFlag(p) || p == "--" {
				out = append(out, "--")
				break
			}
		}
	}
	return append(out, positional...)
}

// dashSeparated names the commands whose arguments before "--" mean
// something else than those after it: `krole run ROLE -- CMD`.
var dashSeparated = map[string]bool{"run": true}

// splitDash splits the arguments of a [dashSeparated] command at the "--"
// the user wrote: before it, and after it (dash reports whether there was
// one). Without one, every argument is before it.
func splitDash(args []string) (before, after []string, dash bool) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:], true
		}
	}
	return args, nil, false
}

// isFlag reports whether a looks like a flag: "-x", "--xy", "--xy=z". A
// lone "-" is an argument (conventionally stdin).
func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' }

// flagName returns the name of flag argument a, without dashes or value.
func flagName(a string) string {
	a = strings.TrimLeft(a, "-")
	if k := strings.IndexByte(a, '='); k >= 0 {
		a = a[:k]
	}
	return a
}

// flagIndex maps every name and alias of flags to whether it takes a value.
func flagIndex(flags []ucli.Flag, extra ...ucli.Flag) map[string]bool {
	m := make(map[string]bool)
	for _, f := range append(append([]ucli.Flag{}, flags...), extra...) {
		if f == nil {
			continue
		}
		takes := true
		if df, ok := f.(ucli.DocGenerationFlag); ok { // every flag of urfave/cli's
			takes = df.TakesValue()
		}
		for _, n := range f.Names() {
			m[n] = takes
		}
	}
	return m
}

// misplacedFlag returns a usage error for a command's flag written before
// the command name (`krole --member x register controller`), which
// urfave/cli would call unknown: it names the command the flag belongs to
// and the command line with the flag in its place. It returns nil when
// the first flag that is not global belongs to no command named after it
// (urfave/cli then reports it), and for every other command line.
func misplacedFlag(app *ucli.App, args []string) error {
	globals := flagIndex(app.Flags, ucli.HelpFlag, ucli.VersionFlag)
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !isFlag(a) {
			return nil
		}
		takesValue, known := globals[flagName(a)]
		if !known {
			break
		}
		if takesValue && !strings.Contains(a, "=") {
			i++
		}
	}
	if i >= len(args) {
		return nil
	}
	flagArg := args[i]
	name := flagName(flagArg)
	for k := i + 1; k < len(args); k++ {
		if args[k] == "--" {
			return nil
		}
		cmd := app.Command(args[k])
		if cmd == nil {
			continue
		}
		takesValue, ok := flagIndex(cmd.Flags)[name]
		if !ok {
			return nil
		}
		moved := []string{flagArg}
		before := args[i+1 : k] // the flag's value, and anything else before the command
		if takesValue && !strings.Contains(flagArg, "=") && len(before) > 0 {
			moved = append(moved, before[0])
			before = before[1:]
		}
		line := append(append(append(append([]string{"krole"}, args[:i]...), before...), args[k]), moved...)
		line = append(line, args[k+1:]...)
		return &UsageError{
			Err:  fmt.Errorf("%s is a flag of `krole %s`: %s", dashes(name), args[k], shellJoin(line)),
			Hint: fmt.Sprintf("flags of a command follow its name; see 'krole %s --help'", args[k]),
		}
	}
	return nil
}

// shellJoin joins args into a command line a shell reads back as args.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@=,+%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
