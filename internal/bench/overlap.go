package bench

import (
	"sort"

	"github.com/krabka/krole/codec"
)

// Holding is one member's hold on one role: from its Elected event to its
// Revoked event, or to the end of what was watched, in Unix µs on the
// members' clocks (one machine's, in a bench).
type Holding struct {
	Member       codec.MemberID
	Role         codec.Role
	FromUS, ToUS int64
}

// Holdings returns member's holdings from its events, in the order it
// printed them; one still open after the last ends at endUS (for a member
// SIGKILLed, when it died: it printed no Revoked).
func Holdings(member codec.MemberID, events []Line, endUS int64) []Holding {
	open := map[codec.Role]int64{}
	var hs []Holding
	for _, e := range events {
		switch e.Event {
		case "elected":
			if _, ok := open[e.Role]; !ok {
				open[e.Role] = e.AtUS
			}
		case "revoked":
			if from, ok := open[e.Role]; ok {
				hs = append(hs, Holding{Member: member, Role: e.Role, FromUS: from, ToUS: e.AtUS})
				delete(open, e.Role)
			}
		}
	}
	for r, from := range open {
		hs = append(hs, Holding{Member: member, Role: r, FromUS: from, ToUS: max(from, endUS)})
	}
	return hs
}

// Overlap is a time two members both held one role: from FromUS for US µs.
type Overlap struct {
	Role    codec.Role        `json:"role"`
	Members [2]codec.MemberID `json:"members"`
	FromUS  int64             `json:"from_us"`
	US      int64             `json:"us"`
}

// LongestOverlap returns the longest time two different members both held
// one role in hs (zero when none did), and how many roles two members
// held at once for any time at all. Holdings that only touch (one ends
// the microsecond the next begins) do not overlap.
func LongestOverlap(hs []Holding) (longest Overlap, roles int) {
	byRole := map[codec.Role][]Holding{}
	for _, h := range hs {
		byRole[h.Role] = append(byRole[h.Role], h)
	}
	names := make([]codec.Role, 0, len(byRole))
	for r := range byRole {
		names = append(names, r)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	for _, r := range names {
		rh := byRole[r]
		overlapped := false
		for i := range rh {
			for _, b := range rh[i+1:] {
				a := rh[i]
				if a.Member == b.Member {
					continue
				}
				from, to := max(a.FromUS, b.FromUS), min(a.ToUS, b.ToUS)
				if to <= from {
					continue
				}
				overlapped = true
				if to-from > longest.US {
					longest = Overlap{Role: r, Members: [2]codec.MemberID{a.Member, b.Member}, FromUS: from, US: to - from}
				}
			}
		}
		if overlapped {
			roles++
		}
	}
	return longest, roles
}
