package view

import (
	"sort"

	"github.com/krabka/krole/codec"
)

// roleEntry is one role in the in-memory index. Its candidates are kept in
// offset order (rank order): a role lives in one partition, records arrive
// in offset order, so a registration is almost always appended at the end.
type roleEntry struct {
	lease       codec.Lease
	hasLease    bool
	leaseOffset int64
	cands       []Candidate // sorted by Offset; Rank is filled in on the way out
	lastOffset  int64       // offset of the latest record applied to the role
}

func (e *roleEntry) empty() bool { return !e.hasLease && len(e.cands) == 0 }

// state copies the entry out as a RoleState, ranks filled in. Its cost is
// linear in the role's candidates.
func (e *roleEntry) state(role codec.Role) RoleState {
	s := RoleState{Role: role, LeaseOffset: -1}
	if e == nil {
		return s
	}
	if e.hasLease {
		l := e.lease
		s.Lease, s.LeaseOffset = &l, e.leaseOffset
	}
	s.Candidates = e.candidates()
	return s
}

// candidates copies the candidates out in rank order, ranks filled in; nil
// when there are none.
func (e *roleEntry) candidates() []Candidate {
	if e == nil || len(e.cands) == 0 {
		return nil
	}
	out := make([]Candidate, len(e.cands))
	for i, c := range e.cands {
		c.Rank = i
		out[i] = c
	}
	return out
}

func (e *roleEntry) find(m codec.MemberID) int {
	for i := range e.cands {
		if e.cands[i].Member == m {
			return i
		}
	}
	return -1
}

// register puts member's registration at offset in rank order. A
// registration older than the one held for the member (a replay) is
// ignored; a newer one moves the member to its new place (the back).
// It reports whether the entry changed.
func (e *roleEntry) register(m codec.MemberID, offset, registeredAt int64) bool {
	if i := e.find(m); i >= 0 {
		if e.cands[i].Offset >= offset {
			return false
		}
		e.cands = append(e.cands[:i], e.cands[i+1:]...)
	}
	c := Candidate{Member: m, Offset: offset, RegisteredAt: registeredAt}
	n := len(e.cands)
	if n == 0 || e.cands[n-1].Offset < offset {
		e.cands = append(e.cands, c)
		return true
	}
	i := sort.Search(n, func(i int) bool { return e.cands[i].Offset > offset })
	e.cands = append(e.cands, Candidate{})
	copy(e.cands[i+1:], e.cands[i:])
	e.cands[i] = c
	return true
}

// deregister removes member's registration unless the one held is newer
// than the tombstone at offset (a replay). It reports whether it changed.
func (e *roleEntry) deregister(m codec.MemberID, offset int64) bool {
	i := e.find(m)
	if i < 0 || e.cands[i].Offset > offset {
		return false
	}
	e.cands = append(e.cands[:i], e.cands[i+1:]...)
	return true
}

// setLease replaces the lease unless the held one is newer (a replay).
func (e *roleEntry) setLease(l codec.Lease, offset int64) bool {
	if e.hasLease && e.leaseOffset >= offset {
		return false
	}
	e.lease, e.hasLease, e.leaseOffset = l, true, offset
	return true
}

// dropLease removes the lease on a lease tombstone.
func (e *roleEntry) dropLease(offset int64) bool {
	if !e.hasLease || e.leaseOffset > offset {
		return false
	}
	e.lease, e.hasLease, e.leaseOffset = codec.Lease{}, false, -1
	return true
}

// sortCands restores rank order after a bulk load in key order.
func (e *roleEntry) sortCands() {
	sort.Slice(e.cands, func(i, j int) bool { return e.cands[i].Offset < e.cands[j].Offset })
}

// applyTo applies one decoded record to e and reports whether e changed.
func applyTo(e *roleEntry, k codec.Key, r codec.Record, offset int64) bool {
	changed := false
	switch k.Kind {
	case codec.KindLease:
		if r.Lease != nil {
			changed = e.setLease(*r.Lease, offset)
		} else {
			changed = e.dropLease(offset)
		}
	case codec.KindRegistration:
		if r.Registration != nil {
			changed = e.register(k.Member, offset, r.Registration.RegisteredAt)
		} else {
			changed = e.deregister(k.Member, offset)
		}
	}
	if changed && offset > e.lastOffset {
		e.lastOffset = offset
	}
	return changed
}
