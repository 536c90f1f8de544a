package render

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/view"
)

// RowsTable writes rows as aligned columns, the time left judged at now.
func RowsTable(w io.Writer, rows []server.Row, now time.Time) error {
	tw := NewTable(w, "ROLE", "HOLDER", "VALUE", "TOKEN", "LEFT", "CANDIDATES")
	for _, r := range rows {
		var holder, value, token string
		if h := r.Holder; h != nil {
			holder, value, token = string(h.Member), ShownValue(h.Value), h.Token.String()
		}
		names := make([]string, len(r.Candidates))
		for i, cd := range r.Candidates {
			names[i] = string(cd.Member)
			if cd.Gone {
				names[i] += " (gone)"
			}
		}
		left := TimeLeft(r.Holder, now)
		if r.Dead {
			left = "dead"
		}
		tw.Row(string(r.Role), holder, value, token, left, strings.Join(names, ", "))
	}
	return tw.Flush()
}

// ShownValue is the VALUE column: the value as it is, or quoted when it
// has a space or a character that is not printable, so that it stays one
// cell.
func ShownValue(v string) string {
	if strings.IndexFunc(v, func(r rune) bool { return r == ' ' || !unicode.IsPrint(r) }) >= 0 || !utf8.ValidString(v) {
		return strconv.Quote(v)
	}
	return v
}

// TimeLeft is the LEFT column: the time left on the lease at now as this
// observer judges it (until h.Ends, see server.LeaseEnd; h.LeftMS in a row
// without Ends), "expired", "expired (released)" for a lease its holder
// released, or "none" without a lease.
func TimeLeft(h *server.Holder, now time.Time) string {
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
	return FormatLeft(d)
}

// FormatLeft is a time left as LEFT shows it: "expired" when none.
func FormatLeft(d time.Duration) string {
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

// WatchLines prints each row of the stream as one line of JSON, until the
// stream ends or a write fails. A row that differs from the last one
// printed of its role only in its times (the stream looks a role up again
// when its lease would end: a holder its heartbeats renewed shows again)
// is not printed.
func WatchLines(w io.Writer, c <-chan []server.Row) error {
	last := map[codec.Role]server.Row{}
	for rows := range c {
		for _, r := range rows {
			if old, ok := last[r.Role]; ok && sameButTimes(old, r) {
				continue
			}
			last[r.Role] = r
			if err := WriteJSON(w, r); err != nil {
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
	ha.LeftMS, ha.VouchedAt, ha.Ends, ha.Renewed = 0, 0, time.Time{}, time.Time{}
	hb.LeftMS, hb.VouchedAt, hb.Ends, hb.Renewed = 0, 0, time.Time{}, time.Time{}
	return ha == hb
}

// RedrawEvery is how often a terminal's table is redrawn without a change,
// for the time left to tick down.
const RedrawEvery = time.Second

// WatchTerminal keeps the table drawn on a terminal: redrawn on each batch
// of the stream and every interval, until the stream ends or a write
// fails, with a line about the view's health when it is not healthy.
// Roles that lose their last record leave the table, unless named in
// roles. At each interval the rows are read afresh with refresh (when not
// nil), so that the time left follows the heartbeats, which the stream
// does not bring.
func WatchTerminal(w io.Writer, st <-chan []server.Row, roles []codec.Role, topic string, now func() time.Time, health func() view.Health, every time.Duration, refresh func() ([]server.Row, error)) error {
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
		fmt.Fprintf(&body, "%s\n", HealthLine(h))
	}
	body.WriteString("\n")
	if len(rows) == 0 {
		fmt.Fprintf(&body, "topic %s has no roles\n", topic)
	} else {
		_ = RowsTable(&body, rows, now)
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

// HealthLine says in one line why the view is not current, since when the
// cluster is unreachable and as of when the data is current.
func HealthLine(h view.Health) string {
	var line string
	switch {
	case h.Unreachable && !h.LastContact.IsZero():
		line = "cluster unreachable since " + Clock(h.LastContact)
	case h.Unreachable:
		line = "cluster unreachable"
	default:
		line = "not current: " + h.Reason
	}
	if !h.CaughtUpAt.IsZero() {
		line += "; data as of " + Clock(h.CaughtUpAt)
	}
	return line
}

// NoteHealth writes a line to w each time the view stops or starts being
// healthy (after it first was), checking every interval until ctx ends;
// within one spell, once more when a view not current becomes unreachable
// (the first reading of an outage can be a catch-up that has not been
// confirmed yet), never twice for one state.
func NoteHealth(ctx context.Context, w io.Writer, health func() view.Health, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	const (
		healthy = iota
		notCurrent
		unreachable
	)
	said := healthy
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h := health()
		now := healthy
		switch {
		case h.Healthy:
		case h.Unreachable:
			now = unreachable
		default:
			now = notCurrent
		}
		switch {
		case now == healthy && said != healthy:
			fmt.Fprintln(w, "krole table: the view is current again")
			said = healthy
		case now > said:
			fmt.Fprintf(w, "krole table: %s; the rows are the table as of then\n", HealthLine(h))
			said = now
		}
	}
}

// LiveHolder returns r's holder when its lease is live, nil otherwise.
func LiveHolder(r server.Row) *server.Holder {
	if r.Holder == nil || r.Holder.Expired {
		return nil
	}
	return r.Holder
}

// holderKey is what a change of holder changes: the live holder's member
// and token, "" without one. A renewal keeps it.
func holderKey(r server.Row) string {
	h := LiveHolder(r)
	if h == nil {
		return ""
	}
	return string(h.Member) + " " + h.Token.String()
}

// HolderChanges passes on, from a stream's batches, the rows whose role's
// holder changed since the last row passed on for that role (every row of
// the first batch), and drops the rest: renewals, candidates joining and
// leaving. It closes its channel when in closes; the caller reads it to
// the end.
func HolderChanges(in <-chan []server.Row) <-chan []server.Row {
	out := make(chan []server.Row)
	go func() {
		defer close(out)
		last := map[codec.Role]string{}
		first := true
		for rows := range in {
			var pass []server.Row
			for _, r := range rows {
				k := holderKey(r)
				if old, seen := last[r.Role]; first || !seen || old != k {
					pass = append(pass, r)
				}
				last[r.Role] = k
			}
			if first || len(pass) > 0 {
				out <- pass
			}
			first = false
		}
	}()
	return out
}
