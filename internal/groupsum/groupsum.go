// Package groupsum is the balance of each group of roles: its live
// members, their weights, whether they drain and how many roles each
// holds, and max/mean of the holdings. It is the one document of
// `krole table --members -o json` and GET /v1/groups of `krole serve`:
//
//	[{"group":G,"members":[{"member":M,"weight":N,"draining":BOOL,"roles":N},...],
//	  "roles":N,"max":N,"mean":F,"max_mean":F},...]
//
// Groups in name order, members in id order; "mean" is null when no
// member has a positive weight, "max_mean" also when they hold no role.
package groupsum

import (
	"cmp"
	"slices"

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

// Build returns each group's members and balance, in group order, from
// its live members (as view.View.Groups reads them) and the roles each
// member holds. A group with no member is there, with Members empty.
func Build(groups map[string][]group.Member, held map[codec.MemberID]int) []Group {
	out := make([]Group, 0, len(groups))
	for name, ms := range groups {
		g := Group{Group: name, Members: make([]Member, 0, len(ms))}
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
