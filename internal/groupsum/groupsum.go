// Package groupsum is the balance of each group of roles: its live
// members, their weights, whether they drain and how many roles each
// holds, max/mean of the holdings, and its recent moves. It is the one
// document of `krole table --members -o json` and GET /v1/groups of
// `krole serve`:
//
//	[{"group":G,"members":[{"member":M,"weight":N,"draining":BOOL,"roles":N},...],
//	  "roles":N,"max":N,"mean":F,"max_mean":F,
//	  "moves":[{"role":R,"from":M,"to":M,"cause":C,"at":MS,"offset":N,"unheld_ms":N},...]},...]
//
// Groups in name order, members in id order, moves oldest first; "mean"
// is null when no member has a positive weight, "max_mean" also when they
// hold no role; a move's "from" is "" when nobody held the role before,
// its "unheld_ms" null when not known (package view, View.GroupMoves).
package groupsum

import (
	"cmp"
	"slices"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
)

// Group is one group's members and balance.
type Group struct {
	Group   string   `json:"group"`
	Members []Member `json:"members"`
	// Roles is what the members hold, Max the most one holds.
	Roles int `json:"roles"`
	Max   int `json:"max"`
	// Mean is Roles over the members of positive weight (nil when none);
	// MaxMean is Max over Mean, 1 when the roles are spread evenly (nil
	// without a Mean or a role held).
	Mean    *float64 `json:"mean"`
	MaxMean *float64 `json:"max_mean"`
	// Moves are the group's latest moves, oldest first.
	Moves []Move `json:"moves"`
}

// Move is one change of holder of a group's role (group.Move).
type Move struct {
	Role  codec.Role      `json:"role"`
	From  codec.MemberID  `json:"from"`
	To    codec.MemberID  `json:"to"`
	Cause group.MoveCause `json:"cause"`
	// At is the new lease's GrantedAt, Unix ms on the new holder's clock;
	// Offset its offset in the role topic.
	At     int64 `json:"at"`
	Offset int64 `json:"offset"`
	// UnheldMS is how long nobody held the role, in ms; nil when not known.
	UnheldMS *float64 `json:"unheld_ms"`
}

// Member is one live member of a group.
type Member struct {
	Member codec.MemberID `json:"member"`
	// Weight is as the group counts it: 0 while the member drains.
	Weight   int  `json:"weight"`
	Draining bool `json:"draining"`
	// Roles is how many roles the member holds (a live lease names it).
	Roles int `json:"roles"`
}

// Build returns each group's members, balance and moves, in group order,
// from its live members (as view.View.Groups reads them), the roles each
// member holds and each group's moves (view.View.GroupMoves, oldest
// first), of which it keeps the last lastMoves. A group with no member is
// there, with Members empty.
func Build(groups map[string][]group.Member, held map[codec.MemberID]int, moves map[string][]group.Move, lastMoves int) []Group {
	out := make([]Group, 0, len(groups))
	for name, ms := range groups {
		g := Group{Group: name, Members: make([]Member, 0, len(ms)), Moves: Moves(moves[name], lastMoves)}
		weighted := 0
		for _, m := range ms {
			n := held[m.ID]
			g.Members = append(g.Members, Member{Member: m.ID, Weight: m.Weight, Draining: m.Weight == 0, Roles: n})
			g.Roles += n
			g.Max = max(g.Max, n)
			if m.Weight > 0 {
				weighted++
			}
		}
		if weighted > 0 {
			mean := float64(g.Roles) / float64(weighted)
			g.Mean = &mean
			if mean > 0 {
				mm := float64(g.Max) / mean
				g.MaxMean = &mm
			}
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Group) int { return cmp.Compare(a.Group, b.Group) })
	return out
}

// Moves returns the last n of moves (oldest first) as the document shows
// them; [] when there are none or n is 0 or less.
func Moves(moves []group.Move, n int) []Move {
	out := []Move{}
	if n <= 0 {
		return out
	}
	for _, m := range moves[max(len(moves)-n, 0):] {
		mv := Move{Role: m.Role, From: m.From, To: m.To, Cause: m.Cause, At: m.At, Offset: m.Offset}
		if m.Unheld >= 0 {
			ms := float64(m.Unheld) / float64(time.Millisecond)
			mv.UnheldMS = &ms
		}
		out = append(out, mv)
	}
	return out
}
