package cli

import (
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/view"
)

func observeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "observe",
		Usage:     "print a line each time a role's holder changes, until interrupted",
		UsageText: "krole observe ROLE [--timeout D]",
		Description: "Follows the role topic as 'krole table --watch' does, and prints the holder of\n" +
			"ROLE when it starts, then one line each time the holder changes: a new holder\n" +
			"or token, or no live holder (its lease released or run out). Renewals print\n" +
			"nothing. Like etcdctl elect -l. The holder is what the topic says, as this\n" +
			"machine judges the lease, not the broker's fence. SIGINT or SIGTERM ends it\n" +
			"within 10s, whatever the cluster does.\n\n" +
			"Text: \"HH:MM:SS.mmm ROLE held by M (token P/E, value V)\" or \"... ROLE has no holder\".\n" +
			"JSON (-o json), one object per line:\n" +
			"  {\"at\":MS,\"role\":R,\"holder\":{\"member\":M,\"value\":V,\"token\":{\"producer_id\":N,\"epoch\":N},\"fence\":N} or null}\n" +
			"\"at\" is when this machine saw the change (Unix ms); \"value\" is left out when none;\n" +
			"\"fence\" is the holding's fencing number (see 'krole run --help').",
		ArgsUsage: "ROLE",
		Flags: []ucli.Flag{
			viewTimeoutFlag(),
		},
		Action: runObserve,
	}
}

func runObserve(c *ucli.Context) error {
	rc, err := openRole(c, roleNeeds{view: true, quiet: true})
	if rc == nil {
		return err // nil when interrupted while the view caught up
	}
	defer rc.close()
	role, lv := rc.role, rc.lv
	st := server.Follow(c.Context, lv.View, time.Now, role)
	w, asJSON := stdout(c), outputFormat(c) == FormatJSON
	var werr error
	for rows := range render.HolderChanges(st.C) {
		if werr != nil {
			continue // drain: the stream ends with ctx
		}
		for _, r := range rows {
			werr = render.Observed(w, r, time.Now(), asJSON)
		}
	}
	if werr != nil {
		return werr
	}
	if errors.Is(st.Err(), view.ErrStopped) {
		if err := lv.Stop(); err != nil {
			return fmt.Errorf("following the role topic: %w", err)
		}
	}
	return nil
}
