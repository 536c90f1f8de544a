package group

import (
	"cmp"
	"hash/fnv"
	"slices"

	"github.com/krabka/krole/codec"
)

// Member is a live member of a group and its weight: its share of the
// group's roles is in proportion to it.
type Member struct {
	ID     codec.MemberID
	Weight int // positive
}

// Score ranks member m for role: rendezvous hashing, the same on every
// member. FNV-1a of role and m, then splitmix64's finalizer, since FNV
// alone leaves similar names close.
func Score(role codec.Role, m codec.MemberID) uint64 {
	h := fnv.New64a()
	h.Write([]byte(role))
	h.Write([]byte{0})
	h.Write([]byte(m))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Shares returns each member's share of n roles: ceil(weight/total × n),
// at most limit when limit is positive (a semaphore's one slot per
// member). Members with no positive weight get none.
func Shares(members []Member, n, limit int) map[codec.MemberID]int {
	total := 0
	for _, m := range members {
		if m.Weight > 0 {
			total += m.Weight
		}
	}
	shares := make(map[codec.MemberID]int, len(members))
	for _, m := range members {
		if m.Weight <= 0 || total == 0 {
			shares[m.ID] = 0
			continue
		}
		s := (m.Weight*n + total - 1) / total
		if limit > 0 {
			s = min(s, limit)
		}
		shares[m.ID] += s
	}
	return shares
}

// Assign returns the owner of each role every member computes alike from
// the same view: roles, their current holders (a role absent or held by
// someone not in members has none) and the live members.
//
// It is sticky first: a holder keeps up to its share of the roles it
// holds, first those it scores highest of all the members (of positive
// weight), then by its score. So holdings drift toward each role's
// highest scorer, and a member that drains and comes back takes back
// most of what it held: the others keep the roles they score highest
// and hand it the rest. The rest go, in role order, to the
// member of highest Score among those below their share. So a balanced
// holding is its own assignment (Assign is a fixed point: no
// oscillation), a member that leaves moves only its own roles, and one
// that joins takes about its share, each from a member above its new
// share. A role no member can take (every share full) has no owner.
func Assign(roles []codec.Role, holders map[codec.Role]codec.MemberID, members []Member, limit int) map[codec.Role]codec.MemberID {
	return AssignSince(roles, holders, nil, members, limit)
}

// AssignSince is [Assign] knowing since when each holder holds its role
// (since, Unix ms on the holder's clock, such as its lease's GrantedAt):
// a holder above its share keeps the roles it has held longest, and
// hands over those it took last. So a member that drains and comes back
// takes back what it held: the others took its roles last. Roles absent
// from since count as held longest.
func AssignSince(roles []codec.Role, holders map[codec.Role]codec.MemberID, since map[codec.Role]int64, members []Member, limit int) map[codec.Role]codec.MemberID {
	shares := Shares(members, len(roles), limit)
	owner := make(map[codec.Role]codec.MemberID, len(roles))
	held := make(map[codec.MemberID][]codec.Role)
	for _, r := range roles {
		if h, ok := holders[r]; ok {
			if _, live := shares[h]; live {
				held[h] = append(held[h], r)
			}
		}
	}
	count := make(map[codec.MemberID]int, len(members))
	type scored struct {
		role  codec.Role
		score uint64
		top   int // 1 when m scores highest of the members of positive weight
		since int64
	}
	for m, rs := range held {
		keep := min(len(rs), shares[m])
		count[m] = keep
		if keep == len(rs) {
			for _, r := range rs {
				owner[r] = m
			}
			continue
		}
		ss := make([]scored, len(rs))
		for i, r := range rs {
			ss[i] = scored{r, Score(r, m), top(r, m, members), since[r]}
		}
		slices.SortFunc(ss, func(a, b scored) int {
			return cmp.Or(cmp.Compare(a.since, b.since), -cmp.Compare(a.top, b.top), -cmp.Compare(a.score, b.score), cmp.Compare(a.role, b.role))
		})
		for _, s := range ss[:keep] {
			owner[s.role] = m
		}
	}
	rest := make([]codec.Role, 0, len(roles)-len(owner))
	for _, r := range roles {
		if _, ok := owner[r]; !ok {
			rest = append(rest, r)
		}
	}
	slices.Sort(rest)
	ids := make([]codec.MemberID, 0, len(members))
	for _, m := range members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for _, r := range rest {
		var best codec.MemberID
		var bestScore uint64
		found := false
		for _, m := range ids {
			if count[m] >= shares[m] {
				continue
			}
			if s := Score(r, m); !found || s > bestScore {
				best, bestScore, found = m, s, true
			}
		}
		if found {
			owner[r] = best
			count[best]++
		}
	}
	return owner
}

// top returns 1 when m scores highest for r among members of positive
// weight, else 0.
func top(r codec.Role, m codec.MemberID, members []Member) int {
	s := Score(r, m)
	for _, o := range members {
		if o.ID != m && o.Weight > 0 && Score(r, o.ID) > s {
			return 0
		}
	}
	return 1
}

// WeightOf is the weight a member's heartbeat gives it in its group: 0
// while it drains, else its Weight, at least 1.
func WeightOf(hb codec.Heartbeat) int {
	if hb.Drain {
		return 0
	}
	return max(1, hb.Weight)
}
