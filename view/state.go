package view

import (
	"sort"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// Candidate is a registered member of a role, ranked by the offset of its
// registration: rank 0 joined first.
type Candidate struct {
	// Member is the registered member.
	Member codec.MemberID `json:"member"`

	// Offset is the offset of the member's registration record in the
	// role's partition. It orders the candidates: a member that
	// re-registers gets a new, higher offset and moves to the back.
	Offset int64 `json:"offset"`

	// RegisteredAt is the registering member's wall clock (Unix ms) as its
	// registration record says. It is informative only: the rank is by
	// Offset, never by this clock.
	RegisteredAt int64 `json:"registered_at"`

	// Rank is the candidate's place among the role's candidates, 0 first.
	// The lookups, Fold and Rerank fill it in; it is not stored.
	Rank int `json:"rank"`
}

// RoleState is one role as the role topic says it is: its latest lease (nil
// when none was ever written) and its candidates in rank order.
type RoleState struct {
	// Role is the role's name.
	Role codec.Role `json:"role"`

	// Lease is the role's latest lease record as written, nil when there is
	// none (never written, or deleted by a lease tombstone). It may have
	// expired, or be a release (see [codec.Lease.Released]): use
	// [RoleState.Holder] to ask whether it holds at a given time.
	Lease *codec.Lease `json:"lease"`

	// LeaseOffset is the offset of Lease's record; -1 when Lease is nil.
	LeaseOffset int64 `json:"lease_offset"`

	// Candidates are the role's registered members in rank order, Rank
	// filled in; nil when there are none.
	Candidates []Candidate `json:"candidates"`
}

// Holder returns the lease and true when a lease exists and has not expired
// at nowMS (Unix ms). It is what the table believes, not what the broker
// enforces: only the broker's fence is authoritative.
func (s RoleState) Holder(nowMS int64) (codec.Lease, bool) {
	if s.Lease == nil || s.Lease.Expired(nowMS) {
		return codec.Lease{}, false
	}
	return *s.Lease, true
}

// Rank returns member's rank among the candidates, or -1 when it is not a
// candidate.
func (s RoleState) Rank(member codec.MemberID) int {
	for i, c := range s.Candidates {
		if c.Member == member {
			return i
		}
	}
	return -1
}

// Clone returns a deep copy, safe to hand to another goroutine.
func (s RoleState) Clone() RoleState {
	c := s
	if s.Lease != nil {
		l := *s.Lease
		c.Lease = &l
	}
	c.Candidates = append([]Candidate(nil), s.Candidates...)
	return c
}

// Fold applies records of one role, in offset order, to an empty state and
// returns the result: the same answer the view keeps incrementally. The
// succession rules use it on [fencing.Transport.ReadRoleRecords].
func Fold(role codec.Role, records []fencing.RoleRecord) RoleState {
	s := RoleState{Role: role, LeaseOffset: -1}
	regs := map[codec.MemberID]Candidate{}
	for _, r := range records {
		if r.Key.Role != role {
			continue
		}
		switch r.Key.Kind {
		case codec.KindLease:
			if r.Record.Lease != nil {
				l := *r.Record.Lease
				s.Lease, s.LeaseOffset = &l, r.Offset
			} else if r.Record.Tombstone() {
				s.Lease, s.LeaseOffset = nil, -1
			}
		case codec.KindRegistration:
			if g := r.Record.Registration; g != nil {
				regs[r.Key.Member] = Candidate{Member: r.Key.Member, Offset: r.Offset, RegisteredAt: g.RegisteredAt}
			} else if r.Record.Tombstone() {
				delete(regs, r.Key.Member)
			}
		}
	}
	for _, c := range regs {
		s.Candidates = append(s.Candidates, c)
	}
	Rerank(s.Candidates)
	return s
}

// Rerank sorts candidates by offset and renumbers their ranks.
func Rerank(cs []Candidate) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].Offset < cs[j].Offset })
	for i := range cs {
		cs[i].Rank = i
	}
}
