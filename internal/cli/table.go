package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/view"
)

// DefaultTableTimeout is the default of `krole table --timeout`.
const DefaultTableTimeout = 30 * time.Second

func tableCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "table",
		Usage:     "show each role's holder, lease and ranked candidates, from a view of the role topic",
		UsageText: "krole table [ROLE...] [--watch] [--timeout D]\nkrole table --members [--group NAME] [--moves N] [--timeout D]",
		Description: "Restores the view of the role topic (reads it with read_committed isolation up\n" +
			"to its last stable offset) and prints a row per role: the holder of its latest\n" +
			"lease and its token, the time left on the lease, and the candidates in rank\n" +
			"order (join order). With no ROLE, every role the topic has a record of; a ROLE\n" +
			"it has none of shows with no holder and no candidates.\n\n" +
			"A holder is renewed by its member session's heartbeats (one per member and\n" +
			"heartbeat interval; the lease record itself is written again only hourly). LEFT is\n" +
			"the time left as this machine judges it, as a candidate would: the span of the\n" +
			"holder's latest renewal (its lease record or a heartbeat), counted from when\n" +
			"this view read it, on this machine's clock; never the holder's deadline alone,\n" +
			"which is off by as much as the holder's clock. A view that first reads a\n" +
			"renewal when it starts counts its whole span from then; LEFT also ends 1s\n" +
			"after the renewal's deadline by the holder's clock, and when that has passed,\n" +
			"table waits for a renewal, up to half the lease after it read the last, and\n" +
			"shows \"expired\" if none comes (see 'krole leader --help' for the bound).\n" +
			"\"expired\" once that time is up, \"none\" without a lease, \"dead\" when no holder\n" +
			"is live and every candidate is gone. A candidate shows as \"M (gone)\" when its\n" +
			"member session is gone: it ended, or its latest heartbeat ran out as a holder's\n" +
			"renewal does ('krole prune' removes such registrations).\n\n" +
			"This is what the topic says, not the broker's fence: a holder shown as live may\n" +
			"already be fenced by a newer token whose lease is not written yet.\n\n" +
			"JSON: an array in role order, [] when there are no roles:\n" +
			"  {\"role\":R,\"holder\":{\"member\":M,\"value\":V,\"token\":{\"producer_id\":N,\"epoch\":N},\"fence\":N,\"granted_at\":MS,\n" +
			"   \"deadline\":MS,\"vouched_at\":MS,\"expired\":BOOL,\"left_ms\":N} or null,\n" +
			"   \"candidates\":[{\"member\":M,\"offset\":N,\"registered_at\":MS,\"value\":V,\"rank\":0,\"gone\":true},...],\n" +
			"   \"dead\":true}\n" +
			"\"value\" is the member's --value, left out when it has none; VALUE shows the\n" +
			"holder's. \"fence\" is the holding's fencing number (see 'krole run --help').\n" +
			"granted_at and deadline are the lease record's; vouched_at is when\n" +
			"the holder's latest renewal began (its lease's or heartbeat's, by its clock).\n" +
			"\"gone\" and \"dead\" are left out when false.\n" +
			"Times are Unix milliseconds; \"expired\", \"left_ms\" (LEFT) and \"gone\" are\n" +
			"judged when the row is printed.\n" +
			"GET /v1/roles of 'krole serve' answers the same.\n\n" +
			"--watch keeps following the topic until interrupted (SIGINT or SIGTERM ends it\n" +
			"within 10s, whatever the cluster does). On a terminal (and without\n" +
			"-o json) the table is redrawn on each change and every second, read afresh.\n" +
			"Otherwise it prints one JSON row per line: first the current row of each role,\n" +
			"then the row of a role each time it changes, and again when a lease it showed\n" +
			"as live runs out (with \"expired\":true); never for a renewal alone. A role\n" +
			"that lost its last record shows as a row with no holder and no candidates.\n\n" +
			"When no broker has answered the view for 5s, or its data has not been confirmed\n" +
			"current for that long, --watch says so: on a terminal, a line above the table\n" +
			"(\"cluster unreachable since T; data as of T\"); otherwise a line on stderr, and\n" +
			"another when the view is current again. The rows keep showing the table as of\n" +
			"then.\n\n" + tableMembersHelp,
		ArgsUsage: "[ROLE...]",
		Flags: append([]ucli.Flag{
			&ucli.BoolFlag{Name: "watch", Aliases: []string{"w"},
				Usage: "keep the table live until interrupted: redrawn on a terminal, one JSON line per change otherwise"},
			&ucli.BoolFlag{Name: "changes",
				Usage: "with --watch: show a row only when the role's holder changes (a new holder or token, or none), not on renewals or candidates"},
			viewTimeoutFlag(),
		}, tableMembersFlags()...),
		Action: runTable,
	}
}

// roleArgs returns the command's ROLE arguments, validated.
func roleArgs(c *ucli.Context) ([]codec.Role, error) {
	var roles []codec.Role
	for _, a := range c.Args().Slice() {
		r, err := codec.NewRole(a)
		if err != nil {
			return nil, InvalidName(err)
		}
		roles = append(roles, r)
	}
	return roles, nil
}

func runTable(c *ucli.Context) error {
	if wantsMembers(c) {
		return runTableMembers(c)
	}
	roles, err := roleArgs(c)
	if err != nil {
		return err
	}
	watch := c.Bool("watch")
	lv, err := readyView(c, func() error {
		if c.Bool("changes") && !watch {
			return Usagef(c, "--changes needs --watch: it shows a live table's changes of holder")
		}
		return nil
	}, watch)
	if lv == nil {
		return err // nil when a watch was interrupted before it began
	}
	defer lv.Stop()
	if !watch {
		rows, err := server.SettledRows(c.Context, server.WithSessions(lv.View), time.Now, roles...)
		if err != nil {
			return err
		}
		if err := printRows(c, lv.Config().Topic, rows); err != nil {
			return err
		}
		return lv.Stop()
	}

	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	tbl := server.WithSessions(lv.View)
	st := server.Follow(ctx, tbl, time.Now, roles...)
	rowsC := st.C
	if c.Bool("changes") {
		rowsC = render.HolderChanges(st.C)
	}
	if outputFormat(c) == FormatTable && render.IsTerminal(stdout(c)) {
		refresh := func() ([]server.Row, error) { return server.Rows(ctx, tbl, time.Now, roles...) }
		err = render.WatchTerminal(stdout(c), rowsC, roles, lv.Config().Topic, time.Now, lv.Health, render.RedrawEvery, refresh)
	} else {
		noted := make(chan struct{})
		go func() {
			defer close(noted)
			render.NoteHealth(ctx, stderr(c), lv.Health, render.RedrawEvery)
		}()
		err = render.WatchLines(stdout(c), rowsC)
		cancel()
		<-noted
	}
	cancel()
	for range rowsC { // after a failed write: wait for the stream's end
	}
	if err != nil {
		return err
	}
	if errors.Is(st.Err(), view.ErrStopped) {
		if err := lv.Stop(); err != nil {
			return fmt.Errorf("following the role topic: %w", err)
		}
	}
	return st.Err()
}

// printRows prints rows as -o asks.
func printRows(c *ucli.Context, topic string, rows []server.Row) error {
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(stdout(c), "topic %s has no roles\n", topic)
		return err
	}
	return render.RowsTable(stdout(c), rows, time.Now())
}
