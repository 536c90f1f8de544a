package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	ucli "github.com/urfave/cli/v2"
)

// Version is krole's version. Release builds set it with
// -ldflags "-X github.com/krabka/krole/internal/cli.Version=v1.2.3"; when it
// is empty, the module version and VCS revision of the build are used.
var Version = ""

func version() string {
	v := Version
	info, ok := debug.ReadBuildInfo()
	if v == "" && ok {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	if ok {
		var rev, dirty string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			v += " " + rev + dirty
		}
	}
	return v
}

func versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print krole's version (also: krole --version)",
		Action: func(c *ucli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if outputFormat(c) == FormatJSON {
				return writeJSON(stdout(c), map[string]string{"version": c.App.Version, "go": runtime.Version()})
			}
			_, err := fmt.Fprintf(stdout(c), "krole version %s %s\n", c.App.Version, runtime.Version())
			return err
		},
	}
}
