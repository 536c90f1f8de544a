package cli

import (
	"time"

	"github.com/krabka/krole/internal/liveview"
	ucli "github.com/urfave/cli/v2"
)

// viewTimeout reads --timeout, the bound of a command's wait for its view
// to catch up; a negative one is a usage error.
func viewTimeout(c *ucli.Context) (time.Duration, error) {
	timeout := c.Duration("timeout")
	if timeout < 0 {
		return 0, Usagef(c, "--timeout %v: must not be negative", timeout)
	}
	return timeout, nil
}

// viewTimeoutFlag is --timeout of the commands that read a view of the
// role topic: the bound of the wait for it to catch up.
func viewTimeoutFlag() ucli.Flag {
	return &ucli.DurationFlag{Name: "timeout", Value: DefaultTableTimeout,
		Usage: "give up when the view has not caught up with the topic within `D` (0: wait as long as it takes)"}
}

// readyView reads --timeout, runs validate (when not nil) on the command's
// other flags, starts a view of the role topic and waits up to --timeout
// for it to catch up. The caller stops the view. When the wait fails, the
// view is stopped and, with quiet and c.Context ended (an interrupt),
// readyView returns a nil view and a nil error: the command ends without
// one.
func readyView(c *ucli.Context, validate func() error, quiet bool) (*liveview.View, error) {
	timeout, err := viewTimeout(c)
	if err != nil {
		return nil, err
	}
	if validate != nil {
		if err := validate(); err != nil {
			return nil, err
		}
	}
	lv, err := startView(c, "")
	if err != nil {
		return nil, err
	}
	if err := lv.Ready(c.Context, timeout); err != nil {
		lv.Stop()
		if quiet && c.Context.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	return lv, nil
}

// startView starts a view of the role topic that the global flags name
// (with its table on disk under stateDir when set), its warnings on the
// command's stderr; see liveview.Start.
func startView(c *ucli.Context, stateDir string) (*liveview.View, error) {
	cfg, err := configFrom(c)
	if err != nil {
		return nil, err
	}
	return liveview.Start(c.Context, liveview.Options{Config: cfg, StateDir: stateDir, Stderr: stderr(c), Command: c.Command.Name})
}
