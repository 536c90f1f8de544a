package cli

import (
	"context"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/roleread"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/rolestate"
)

// DefaultPruneOlderThan is the default of `krole prune --older-than`.
const DefaultPruneOlderThan = 24 * time.Hour

func pruneCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "prune",
		Usage:     "remove the registrations of members whose session has been gone for long",
		UsageText: "krole prune [ROLE...] [--older-than D] [--yes] [--timeout D]",
		Description: "Lists the registrations (of ROLE, or of every role) whose member's session is\n" +
			"gone, as 'krole table' shows \"(gone)\", and has been for longer than\n" +
			"--older-than: its latest heartbeat ran out more than D ago by the member's own\n" +
			"clock. With --yes it removes them, writing a tombstone on each registration as\n" +
			"'krole resign' does; without, it only lists them.\n\n" +
			"It leaves alone: a member whose session is alive (its heartbeats go on) or\n" +
			"was never read (registered with 'krole register' and never run), the role's\n" +
			"live holder, and a member whose session ended when the time of its last\n" +
			"heartbeat is no longer on the topic (compaction keeps only the session end).\n" +
			"Just before each tombstone it reads the member's session again and skips the\n" +
			"member when a new record came. A member that runs again after its\n" +
			"registration was removed registers again, at the back. Nothing prunes on its\n" +
			"own besides: a member that takes a role over removes the registrations of the\n" +
			"candidates that did not take their turn.\n\n" +
			"JSON: an array, [] when nothing is gone for long enough:\n" +
			"  {\"role\":R,\"member\":M,\"gone_since\":MS,\"pruned\":BOOL}\n" +
			"gone_since is the deadline of the member's latest heartbeat (Unix ms, its\n" +
			"clock); pruned is true once the tombstone is written.",
		ArgsUsage: "[ROLE...]",
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "older-than", Value: DefaultPruneOlderThan,
				Usage: "prune a member only when its session has been gone for longer than `D`"},
			&ucli.BoolFlag{Name: "yes",
				Usage: "write the tombstones (without it, prune only lists what it would remove)"},
			viewTimeoutFlag(),
		},
		Action: runPrune,
	}
}

func runPrune(c *ucli.Context) error {
	roles, err := roleArgs(c)
	if err != nil {
		return err
	}
	olderThan := c.Duration("older-than")
	lv, err := readyView(c, func() error {
		if olderThan <= 0 {
			return Usagef(c, "--older-than %v: must be positive", olderThan)
		}
		return nil
	}, false)
	if err != nil {
		return err
	}
	defer lv.Stop()
	tbl := server.WithSessions(lv.View)
	// Judged as a one-shot answer is: a session whose member's clock says
	// it ran out is read again until a heartbeat shows or the wait is up.
	states, err := liveness.Settle(c.Context, func(ctx context.Context) ([]rolestate.State, error) {
		if len(roles) == 0 {
			return tbl.Snapshot(ctx)
		}
		out := make([]rolestate.State, 0, len(roles))
		for _, r := range roles {
			st, _, err := tbl.Lookup(ctx, r)
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
		return out, nil
	}, time.Now)
	if err != nil {
		return err
	}
	t, err := openTransport(c)
	if err != nil {
		return err
	}
	defer t.Close()
	now := time.Now()
	out, err := roleread.Gone(c.Context, t, states, now, olderThan)
	if err != nil {
		return err
	}
	if c.Bool("yes") {
		for i, p := range out {
			// A member back since it was judged keeps its registration.
			se, ok, err := lv.Session(c.Context, p.Member)
			if err != nil {
				return err
			}
			if ok && se.Offset != p.Offset {
				fmt.Fprintf(stderr(c), "krole prune: note: %s wrote a new session record since it was judged; its registration for %s stays\n", p.Member, p.Role)
				continue
			}
			if err := t.Deregister(c.Context, p.Role, p.Member); err != nil {
				return err
			}
			out[i].Pruned = true
		}
	}
	if err := lv.Stop(); err != nil {
		return err
	}
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), out)
	}
	if len(out) == 0 {
		_, err := fmt.Fprintf(stdout(c), "no registration of a member gone for longer than %v\n", olderThan)
		return err
	}
	return render.Pruned(stdout(c), out, c.Bool("yes"), now)
}
