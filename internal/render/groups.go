package render

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/krabka/krole/internal/groupsum"
)

// GroupTables writes the groups of `krole table --members` as aligned
// tables: the members, a balance line per group, then the groups' moves,
// if any (their times relative to now). named is the --group asked for,
// or "".
func GroupTables(w io.Writer, tables []groupsum.Group, named string, now time.Time) error {
	if len(tables) == 0 || len(tables) == 1 && len(tables[0].Members) == 0 {
		if named != "" {
			_, err := fmt.Fprintf(w, "group %s has no live members\n", named)
			return err
		}
		_, err := fmt.Fprintln(w, "no group has live members")
		return err
	}
	mt := NewTable(w, "GROUP", "MEMBER", "WEIGHT", "DRAINING", "ROLES")
	for _, g := range tables {
		for _, m := range g.Members {
			mt.Row(g.Group, string(m.Member), strconv.Itoa(m.Weight), yesNo(m.Draining), strconv.Itoa(m.Roles))
		}
	}
	if err := mt.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	bt := NewTable(w, "GROUP", "MEMBERS", "ROLES", "MAX", "MEAN", "MAX/MEAN")
	for _, g := range tables {
		bt.Row(g.Group, strconv.Itoa(len(g.Members)), strconv.Itoa(g.Roles), strconv.Itoa(g.Max), twoPlaces(g.Mean), twoPlaces(g.MaxMean))
	}
	if err := bt.Flush(); err != nil {
		return err
	}
	return groupMoves(w, tables, now)
}

// groupMoves writes the groups' moves as one table after a blank line;
// nothing when no group has one.
func groupMoves(w io.Writer, tables []groupsum.Group, now time.Time) error {
	n := 0
	for _, g := range tables {
		n += len(g.Moves)
	}
	if n == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	mt := NewTable(w, "GROUP", "ROLE", "FROM", "TO", "CAUSE", "AT", "UNHELD")
	for _, g := range tables {
		for _, m := range g.Moves {
			unheld := ""
			if m.UnheldMS != nil {
				unheld = time.Duration(*m.UnheldMS * float64(time.Millisecond)).Round(time.Millisecond).String()
			}
			mt.Row(g.Group, string(m.Role), string(m.From), string(m.To), string(m.Cause), HumanTime(m.At, now), unheld)
		}
	}
	return mt.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// twoPlaces renders f with two decimals, "" (a "-" cell) for none.
func twoPlaces(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(*f, 'f', 2, 64)
}
