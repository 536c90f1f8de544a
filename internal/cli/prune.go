package cli

import (
	"context"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/liveness"
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

// pruned is one registration `krole prune` removes, or would.
type pruned struct {
	Role      codec.Role     `json:"role"`
	Member    codec.MemberID `json:"member"`
	GoneSince int64          `json:"gone_since"`
	Pruned    bool           `json:"pruned"`

	offset int64 // of the session record judged
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
	defer lv.stop()
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
	out := []pruned{}
	ended := map[codec.MemberID]int64{} // the last heartbeat's deadline before a session end; 0 unknown
	for _, st := range states {
		v := liveness.Judge(st, now)
		for _, cd := range st.Candidates {
			if v.Live && st.Lease.Member == cd.Member {
				continue // the live holder
			}
			se := cd.Session
			sv := liveness.Session(se, now)
			if !sv.Gone {
				continue
			}
			since := sv.RanOut.UnixMilli()
			if se.Heartbeat.End {
				d, ok := ended[cd.Member]
				if !ok {
					d, err = lastBeatBefore(c.Context, t, *se)
					if err != nil {
						return err
					}
					ended[cd.Member] = d
				}
				since = d
			}
			if since == 0 || now.Sub(time.UnixMilli(since)) <= olderThan {
				continue
			}
			out = append(out, pruned{Role: st.Role, Member: cd.Member, GoneSince: since, offset: se.Offset})
		}
	}
	if c.Bool("yes") {
		for i, p := range out {
			// A member back since it was judged keeps its registration.
			se, ok, err := lv.Session(c.Context, p.Member)
			if err != nil {
				return err
			}
			if ok && se.Offset != p.offset {
				fmt.Fprintf(stderr(c), "krole prune: note: %s wrote a new session record since it was judged; its registration for %s stays\n", p.Member, p.Role)
				continue
			}
			if err := t.Deregister(c.Context, p.Role, p.Member); err != nil {
				return err
			}
			out[i].Pruned = true
		}
	}
	if err := lv.stop(); err != nil {
		return err
	}
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), out)
	}
	if len(out) == 0 {
		_, err := fmt.Fprintf(stdout(c), "no registration of a member gone for longer than %v\n", olderThan)
		return err
	}
	tw := newTable(stdout(c), "ROLE", "MEMBER", "GONE SINCE", "ACTION")
	for _, p := range out {
		action := "would prune (--yes prunes)"
		if p.Pruned {
			action = "pruned"
		} else if c.Bool("yes") {
			action = "kept (came back)"
		}
		tw.row(string(p.Role), string(p.Member), humanTime(p.GoneSince, now), action)
	}
	return tw.flush()
}

// lastBeatBefore returns the deadline (Unix ms, the member's clock) of
// the latest heartbeat of end's incarnation before end, a session end, as
// the member's session partition still holds it; 0 when compaction left
// none.
func lastBeatBefore(ctx context.Context, t roleClient, end rolestate.SessionSeen) (int64, error) {
	recs, err := t.ReadSession(ctx, end.Heartbeat.Member)
	if err != nil {
		return 0, err
	}
	var last int64
	for _, r := range recs {
		if h := r.Record.Heartbeat; h != nil && !h.End && r.Offset < end.Offset && end.Heartbeat.Session.Keeps(h.Session) {
			last = h.Deadline
		}
	}
	return last, nil
}
