package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/view"
)

// DefaultTableTimeout is the default of `krole table --timeout`.
const DefaultTableTimeout = 30 * time.Second

func tableCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "table",
		Usage:     "show each role's holder, lease and ranked candidates, from a view of the role topic",
		UsageText: "krole table [ROLE...] [--watch] [--timeout D]",
		Description: "Restores the view of the role topic (reads it with read_committed isolation up\n" +
			"to its last stable offset) and prints a row per role: the holder of its latest\n" +
			"lease and its token, the time left on the lease, and the candidates in rank\n" +
			"order (join order). With no ROLE, every role the topic has a record of; a ROLE\n" +
			"it has none of shows with no holder and no candidates.\n\n" +
			"A holder is renewed by its member session's heartbeats (one per member and\n" +
			"renew interval; the lease record itself is written again only hourly). LEFT is\n" +
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
			"   \"deadline\":MS,\"renewed_at\":MS,\"expired\":BOOL,\"left_ms\":N} or null,\n" +
			"   \"candidates\":[{\"member\":M,\"offset\":N,\"registered_at\":MS,\"value\":V,\"rank\":0,\"gone\":true},...],\n" +
			"   \"dead\":true}\n" +
			"\"value\" is the member's --value, left out when it has none; VALUE shows the\n" +
			"holder's. \"fence\" is the holding's fencing number (see 'krole run --help').\n" +
			"granted_at and deadline are the lease record's; renewed_at is when\n" +
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
			"then.",
		ArgsUsage: "[ROLE...]",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "watch", Aliases: []string{"w"},
				Usage: "keep the table live until interrupted: redrawn on a terminal, one JSON line per change otherwise"},
			&ucli.BoolFlag{Name: "changes",
				Usage: "with --watch: show a row only when the role's holder changes (a new holder or token, or none), not on renewals or candidates"},
			viewTimeoutFlag(),
		},
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
	defer lv.stop()
	if !watch {
		rows, err := server.SettledRows(c.Context, server.WithSessions(lv.View), time.Now, roles...)
		if err != nil {
			return err
		}
		if err := printRows(c, lv.cfg.Topic, rows); err != nil {
			return err
		}
		return lv.stop()
	}

	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	tbl := server.WithSessions(lv.View)
	st := server.Follow(ctx, tbl, time.Now, roles...)
	rowsC := st.C
	if c.Bool("changes") {
		rowsC = holderChanges(st.C)
	}
	if outputFormat(c) == FormatTable && isTerminal(stdout(c)) {
		refresh := func() ([]server.Row, error) { return server.Rows(ctx, tbl, time.Now, roles...) }
		err = watchTerminal(stdout(c), rowsC, roles, lv.cfg.Topic, time.Now, lv.Health, redrawEvery, refresh)
	} else {
		noted := make(chan struct{})
		go func() {
			defer close(noted)
			noteHealth(ctx, stderr(c), lv.Health, redrawEvery)
		}()
		err = watchLines(stdout(c), rowsC)
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
		if err := lv.stop(); err != nil {
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
	return rowsTable(stdout(c), rows, time.Now())
}

// rowsTable writes rows as aligned columns, the time left judged at now.
func rowsTable(w io.Writer, rows []server.Row, now time.Time) error {
	tw := newTable(w, "ROLE", "HOLDER", "VALUE", "TOKEN", "LEFT", "CANDIDATES")
	for _, r := range rows {
		var holder, value, token string
		if h := r.Holder; h != nil {
			holder, value, token = string(h.Member), shownValue(h.Value), h.Token.String()
		}
		names := make([]string, len(r.Candidates))
		for i, cd := range r.Candidates {
			names[i] = string(cd.Member)
			if cd.Gone {
				names[i] += " (gone)"
			}
		}
		left := timeLeft(r.Holder, now)
		if r.Dead {
			left = "dead"
		}
		tw.row(string(r.Role), holder, value, token, left, strings.Join(names, ", "))
	}
	return tw.flush()
}

// shownValue is the VALUE column: the value as it is, or quoted when it
// has a space or a character that is not printable, so that it stays one
// cell.
func shownValue(v string) string {
	if strings.IndexFunc(v, func(r rune) bool { return r == ' ' || !unicode.IsPrint(r) }) >= 0 || !utf8.ValidString(v) {
		return strconv.Quote(v)
	}
	return v
}

// timeLeft is the LEFT column: the time left on the lease at now as this
// observer judges it (until h.Ends, see server.LeaseEnd; h.LeftMS in a row
// without Ends), "expired", "expired (released)" for a lease its holder
// released, or "none" without a lease.
func timeLeft(h *server.Holder, now time.Time) string {
	switch {
	case h == nil:
		return "none"
	case h.Released():
		return "expired (released)"
	}
	d := time.Duration(h.LeftMS) * time.Millisecond
	if !h.Ends.IsZero() {
		d = h.Ends.Sub(now)
	}
	if h.Expired && d > 0 {
		// Judged expired when the row was made; the clock cannot go back.
		d = 0
	}
	return formatLeft(d)
}

// formatLeft is a time left as LEFT shows it: "expired" when none.
func formatLeft(d time.Duration) string {
	switch {
	case d <= 0:
		return "expired"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", float64(d/(100*time.Millisecond))/10)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// watchLines prints each row of the stream as one line of JSON, until the
// stream ends or a write fails. A row that differs from the last one
// printed of its role only in its times (the stream looks a role up again
// when its lease would end: a holder its heartbeats renewed shows again)
// is not printed.
func watchLines(w io.Writer, c <-chan []server.Row) error {
	last := map[codec.Role]server.Row{}
	for rows := range c {
		for _, r := range rows {
			if old, ok := last[r.Role]; ok && sameButTimes(old, r) {
				continue
			}
			last[r.Role] = r
			if err := writeJSON(w, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameButTimes reports whether a and b show the same role alike but for
// when they were judged: the time left and the holder's latest renewal.
func sameButTimes(a, b server.Row) bool {
	if (a.Holder == nil) != (b.Holder == nil) || a.Dead != b.Dead || !slices.Equal(a.Candidates, b.Candidates) {
		return false
	}
	if a.Holder == nil {
		return true
	}
	ha, hb := *a.Holder, *b.Holder
	ha.LeftMS, ha.RenewedAt, ha.Ends, ha.Renewed = 0, 0, time.Time{}, time.Time{}
	hb.LeftMS, hb.RenewedAt, hb.Ends, hb.Renewed = 0, 0, time.Time{}, time.Time{}
	return ha == hb
}

// redrawEvery is how often a terminal's table is redrawn without a change,
// for the time left to tick down.
const redrawEvery = time.Second

// watchTerminal keeps the table drawn on a terminal: redrawn on each batch
// of the stream and every interval, until the stream ends or a write
// fails, with a line about the view's health when it is not healthy.
// Roles that lose their last record leave the table, unless named in
// roles. At each interval the rows are read afresh with refresh (when not
// nil), so that the time left follows the heartbeats, which the stream
// does not bring.
func watchTerminal(w io.Writer, st <-chan []server.Row, roles []codec.Role, topic string, now func() time.Time, health func() view.Health, every time.Duration, refresh func() ([]server.Row, error)) error {
	named := map[codec.Role]bool{}
	for _, r := range roles {
		named[r] = true
	}
	var shown []server.Row // sorted by role
	drawn := false
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case rows, ok := <-st:
			if !ok {
				return nil
			}
			for _, r := range rows {
				shown = upsertRow(shown, r, r.Empty() && !named[r.Role])
			}
			drawn = true
		case <-tick.C:
			if !drawn {
				continue
			}
			if refresh != nil {
				if rows, err := refresh(); err == nil {
					shown = shown[:0]
					for _, r := range rows {
						shown = upsertRow(shown, r, r.Empty() && !named[r.Role])
					}
				}
			}
		}
		if _, err := w.Write(frame(shown, topic, now(), health())); err != nil {
			return err
		}
	}
}

// upsertRow puts r into rows (sorted by role), or takes its role out when
// drop is set.
func upsertRow(rows []server.Row, r server.Row, drop bool) []server.Row {
	i := 0
	for i < len(rows) && rows[i].Role < r.Role {
		i++
	}
	switch {
	case i < len(rows) && rows[i].Role == r.Role && drop:
		return append(rows[:i], rows[i+1:]...)
	case i < len(rows) && rows[i].Role == r.Role:
		rows[i] = r
		return rows
	case drop:
		return rows
	}
	rows = append(rows, server.Row{})
	copy(rows[i+1:], rows[i:])
	rows[i] = r
	return rows
}

// frame is one full screen of the watched table: the cursor home, each
// line followed by "erase to the end of the line", and "erase below" at
// the end, so that a redraw never flickers through a blank screen.
func frame(rows []server.Row, topic string, now time.Time, h view.Health) []byte {
	var body bytes.Buffer
	fmt.Fprintf(&body, "krole table: topic %s, %s (Ctrl-C to stop)\n", topic, now.Format("15:04:05"))
	if !h.Healthy {
		fmt.Fprintf(&body, "%s\n", healthLine(h))
	}
	body.WriteString("\n")
	if len(rows) == 0 {
		fmt.Fprintf(&body, "topic %s has no roles\n", topic)
	} else {
		_ = rowsTable(&body, rows, now)
	}
	var out bytes.Buffer
	out.WriteString("\x1b[H")
	for _, line := range strings.SplitAfter(body.String(), "\n") {
		if line == "" {
			continue
		}
		out.WriteString(strings.TrimSuffix(line, "\n"))
		out.WriteString("\x1b[K\n")
	}
	out.WriteString("\x1b[J")
	return out.Bytes()
}

// healthLine says in one line why the view is not current, since when the
// cluster is unreachable and as of when the data is current.
func healthLine(h view.Health) string {
	var line string
	switch {
	case h.Unreachable && !h.LastContact.IsZero():
		line = "cluster unreachable since " + clock(h.LastContact)
	case h.Unreachable:
		line = "cluster unreachable"
	default:
		line = "not current: " + h.Reason
	}
	if !h.CaughtUpAt.IsZero() {
		line += "; data as of " + clock(h.CaughtUpAt)
	}
	return line
}

// clock shows t as this machine's time of day.
func clock(t time.Time) string { return t.Local().Format("15:04:05") }

// noteHealth writes a line to w each time the view stops or starts being
// healthy (after it first was), checking every interval until ctx ends.
func noteHealth(ctx context.Context, w io.Writer, health func() view.Health, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	wasHealthy := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h := health()
		switch {
		case !h.Healthy && wasHealthy:
			fmt.Fprintf(w, "krole table: %s; the rows are the table as of then\n", healthLine(h))
		case h.Healthy && !wasHealthy:
			fmt.Fprintln(w, "krole table: the view is current again")
		}
		wasHealthy = h.Healthy
	}
}
