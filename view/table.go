package view

import (
	"hash/maphash"
	"sort"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// roleEntry is one role in the in-memory index. Its candidates are kept in
// offset order (rank order): a role lives in one partition, records arrive
// in offset order, so a registration is almost always appended at the end.
type roleEntry struct {
	lease       codec.Lease
	hasLease    bool
	leaseOffset int64
	leaseSeenAt time.Time             // when the view applied or restored the lease, by its clock
	cands       []rolestate.Candidate // sorted by Offset; Rank is filled in on the way out
	lastOffset  int64                 // offset of the latest record applied to the role

	// byMember maps each candidate to its registration offset, so that
	// finding a member costs a map lookup and a binary search instead of a
	// scan (which made loading a role of n candidates cost n²). find builds
	// it when the role has indexFrom candidates or more; nil until then,
	// and after a bulk load (a restore from the state dir builds none for
	// roles that do not change).
	byMember map[codec.MemberID]int64

	// seen has a bit set for each member ever placed in cands (a bit per
	// hash of the member id; never cleared), so that find answers "not
	// there" for a member whose bit is clear without a lookup: a member
	// registering for the first time, the common case (every record of a
	// restore but re-registrations). Every candidate placed in cands goes
	// through note.
	seen [seenWords]uint64
}

// seenWords is the size of roleEntry.seen: 512 bits, which a role of 100
// candidates fills to a fifth.
const seenWords = 8

// memberSeed seeds the hash of roleEntry.seen.
var memberSeed = maphash.MakeSeed()

// seenBit returns the word and bit of m in roleEntry.seen.
func seenBit(m codec.MemberID) (int, uint64) {
	h := maphash.String(memberSeed, string(m))
	return int(h>>6) % seenWords, 1 << (h & 63)
}

// note records that m is placed in cands.
func (e *roleEntry) note(m codec.MemberID) {
	w, b := seenBit(m)
	e.seen[w] |= b
}

// indexFrom is the number of candidates from which a role indexes them by
// member.
const indexFrom = 16

func (e *roleEntry) empty() bool { return !e.hasLease && len(e.cands) == 0 }

// state copies the entry out as a rolestate.State, ranks filled in. Its cost is
// linear in the role's candidates.
func (e *roleEntry) state(role codec.Role) rolestate.State {
	s := rolestate.State{Role: role, LeaseOffset: -1}
	if e == nil {
		return s
	}
	if e.hasLease {
		l := e.lease
		s.Lease, s.LeaseOffset, s.LeaseSeenAt = &l, e.leaseOffset, e.leaseSeenAt
	}
	s.Candidates = e.candidates()
	return s
}

// candidates copies the candidates out in rank order, ranks filled in; nil
// when there are none.
func (e *roleEntry) candidates() []rolestate.Candidate {
	if e == nil || len(e.cands) == 0 {
		return nil
	}
	out := make([]rolestate.Candidate, len(e.cands))
	for i, c := range e.cands {
		c.Rank = i
		out[i] = c
	}
	return out
}

// find returns the position of member's registration in e.cands, or -1.
func (e *roleEntry) find(m codec.MemberID) int {
	if w, b := seenBit(m); e.seen[w]&b == 0 {
		return -1 // never placed
	}
	if e.byMember == nil && len(e.cands) >= indexFrom {
		e.reindex()
	}
	if e.byMember == nil {
		for i := range e.cands {
			if e.cands[i].Member == m {
				return i
			}
		}
		return -1
	}
	off, ok := e.byMember[m]
	if !ok {
		return -1
	}
	i := sort.Search(len(e.cands), func(i int) bool { return e.cands[i].Offset >= off })
	if i < len(e.cands) && e.cands[i].Member == m {
		return i
	}
	return -1 // cannot happen: byMember follows cands
}

// remove takes the candidate at position i out.
func (e *roleEntry) remove(i int) {
	if e.byMember != nil {
		delete(e.byMember, e.cands[i].Member)
	}
	e.cands = append(e.cands[:i], e.cands[i+1:]...)
}

// indexed keeps byMember, if built, in step with a candidate just placed.
func (e *roleEntry) indexed(c rolestate.Candidate) {
	if e.byMember != nil {
		e.byMember[c.Member] = c.Offset
	}
}

// reindex builds byMember from e.cands.
func (e *roleEntry) reindex() {
	e.byMember = make(map[codec.MemberID]int64, len(e.cands))
	for _, c := range e.cands {
		e.byMember[c.Member] = c.Offset
	}
}

// register puts member's registration at offset in rank order. A
// registration older than the one held for the member (a replay) is
// ignored; a newer one moves the member to its new place (the back).
// It reports whether the entry changed.
func (e *roleEntry) register(m codec.MemberID, offset int64, g codec.Registration) bool {
	if i := e.find(m); i >= 0 {
		if e.cands[i].Offset >= offset {
			return false
		}
		e.remove(i)
	}
	c := rolestate.Candidate{Member: m, Offset: offset, RegisteredAt: g.RegisteredAt, Value: g.Value}
	n := len(e.cands)
	if n == 0 || e.cands[n-1].Offset < offset {
		e.cands = append(e.cands, c)
	} else {
		i := sort.Search(n, func(i int) bool { return e.cands[i].Offset > offset })
		e.cands = append(e.cands, rolestate.Candidate{})
		copy(e.cands[i+1:], e.cands[i:])
		e.cands[i] = c
	}
	e.indexed(c)
	e.note(m)
	return true
}

// deregister removes member's registration unless the one held is newer
// than the tombstone at offset (a replay). It reports whether it changed.
func (e *roleEntry) deregister(m codec.MemberID, offset int64) bool {
	i := e.find(m)
	if i < 0 || e.cands[i].Offset > offset {
		return false
	}
	e.remove(i)
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

// sortCands restores rank order after a bulk load in key order; the member
// index is dropped, and built again by the next find that needs it.
func (e *roleEntry) sortCands() {
	sort.Slice(e.cands, func(i, j int) bool { return e.cands[i].Offset < e.cands[j].Offset })
	e.byMember = nil
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
			changed = e.register(k.Member, offset, *r.Registration)
		} else {
			changed = e.deregister(k.Member, offset)
		}
	}
	if changed && offset > e.lastOffset {
		e.lastOffset = offset
	}
	return changed
}
