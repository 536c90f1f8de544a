package view

import (
	"hash/maphash"
	"slices"
	"sort"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// roleEntry is one role in the in-memory index. Its candidates are kept in
// offset order (rank order): a role lives in one partition, records arrive
// in offset order, so a registration is almost always appended at the end.
type roleEntry struct {
	lease       codec.Lease // the held lease when leaseOffset >= 0 (hasLease)
	leaseOffset int64       // -1 without a lease
	leaseSeenAt time.Time   // when the view applied or restored the lease, by its clock
	cands       []candidate // sorted by Offset
	lastOffset  int64       // offset of the latest record applied to the role

	// The member index, so that finding a member costs no scan of the
	// candidates' names. find builds it from indexFrom candidates (none
	// after a bulk load from the state dir, for roles that do not change):
	//
	//   - hashed, below mapFrom candidates: each candidate's member hash in
	//     cands' order, scanned, names compared only where a hash matches;
	//     and a bit per member placed (never cleared), so a member whose bit
	//     is clear is absent at once (nearly every record of a restore);
	//   - byMember, from mapFrom candidates: each candidate's registration
	//     offset by member, then a binary search by offset.
	//
	// The hashed index lives beside the candidates, in the cache lines a
	// restore loads anyway; a map per role is slower there.
	members *memberIndex

	// pending holds the lease records after leaseOffset that wait for
	// their producer id's verdict (see author.go), in offset order, the
	// latest of each producer id; nil when none waits (nearly always).
	// Lookups do not see them.
	pending *[]pendLease
}

// candidate is a registration as the table keeps it: a
// rolestate.Candidate without what a lookup fills in (Rank, Session,
// Gone). Its value and instance, the same in every registration of a
// member, sit behind one pointer the member's candidates share
// (names.extra), so that a candidate is 40 bytes: a restore's table is
// mostly candidates, and a process's first restore pays for every page
// of heap it grows by.
type candidate struct {
	Member       codec.MemberID
	Offset       int64
	RegisteredAt int64
	extra        *candExtra // nil when the registration has neither
}

// candExtra is a registration's value and instance.
type candExtra struct{ Value, Instance string }

func (c *candidate) value() string {
	if c.extra == nil {
		return ""
	}
	return c.extra.Value
}

func (c *candidate) instance() string {
	if c.extra == nil {
		return ""
	}
	return c.extra.Instance
}

// memberIndex is a role's member index (see roleEntry): byMember when
// set, else the hashes.
type memberIndex struct {
	memberHashes
	byMember map[codec.MemberID]int64
}

// memberHashes is a role's hashed member index (see roleEntry).
type memberHashes struct {
	seen [seenWords]uint64 // bit hash%512 of every member placed
	h    []uint64          // h[i] is the hash of cands[i].Member
}

// hashed returns the hashed member index, nil when it is not the one
// built.
func (e *roleEntry) hashed() *memberHashes {
	if e.members == nil || e.members.byMember != nil {
		return nil
	}
	return &e.members.memberHashes
}

// byMember returns the member index by member, nil when it is not the
// one built.
func (e *roleEntry) byMember() map[codec.MemberID]int64 {
	if e.members == nil {
		return nil
	}
	return e.members.byMember
}

// seenWords is the size of memberHashes.seen: 512 bits, which a role of
// 100 candidates fills to a fifth.
const seenWords = 8

// memberSeed seeds the member hashes.
var memberSeed = maphash.MakeSeed()

func memberHash(m codec.MemberID) uint64 { return maphash.String(memberSeed, string(m)) }

// mark sets h's bit in seen.
func (mh *memberHashes) mark(h uint64) { mh.seen[(h>>6)%seenWords] |= 1 << (h & 63) }

// marked reports whether h's bit in seen is set.
func (mh *memberHashes) marked(h uint64) bool { return mh.seen[(h>>6)%seenWords]&(1<<(h&63)) != 0 }

// indexFrom is the number of candidates from which a role indexes them by
// member; mapFrom the number from which the index is a map.
const (
	indexFrom = 16
	mapFrom   = 256
)

// pends returns the lease records waiting for their verdict (pending).
func (e *roleEntry) pends() []pendLease {
	if e.pending == nil {
		return nil
	}
	return *e.pending
}

// setPends makes p the records waiting; none lets their array go, so a
// role keeps no room for them while its leases are settled.
func (e *roleEntry) setPends(p []pendLease) {
	switch {
	case len(p) == 0:
		e.pending = nil
	case e.pending == nil:
		e.pending = &p
	default:
		*e.pending = p
	}
}

func (e *roleEntry) empty() bool { return !e.hasLease() && len(e.cands) == 0 && e.pending == nil }

// state copies the entry out as a rolestate.State, ranks filled in. Its cost is
// linear in the role's candidates.
func (e *roleEntry) state(role codec.Role) rolestate.State {
	s := rolestate.State{Role: role, LeaseOffset: -1}
	if e == nil {
		return s
	}
	if e.hasLease() {
		l := e.lease
		s.Lease, s.LeaseOffset, s.LeaseSeenAt = &l, e.leaseOffset, e.leaseSeenAt
	}
	s.Candidates = e.candidates()
	s.LastOffset = max(e.lastOffset, 0)
	return s
}

// candidates copies the candidates out in rank order, ranks filled in; nil
// when there are none.
func (e *roleEntry) candidates() []rolestate.Candidate {
	if e == nil || len(e.cands) == 0 {
		return nil
	}
	out := make([]rolestate.Candidate, len(e.cands))
	for i := range e.cands {
		c := &e.cands[i]
		out[i] = rolestate.Candidate{Member: c.Member, Offset: c.Offset, RegisteredAt: c.RegisteredAt, Value: c.value(), Instance: c.instance(), Rank: i}
	}
	return out
}

// find returns the position of member's registration in e.cands, or -1.
func (e *roleEntry) find(m codec.MemberID) int {
	if e.members == nil {
		if len(e.cands) < indexFrom {
			for i := range e.cands {
				if e.cands[i].Member == m {
					return i
				}
			}
			return -1
		}
		e.reindex()
	}
	if mh := e.hashed(); mh != nil {
		h := memberHash(m)
		if !mh.marked(h) {
			return -1 // never placed
		}
		if len(e.cands) < mapFrom {
			for i, x := range mh.h {
				if x == h && e.cands[i].Member == m {
					return i
				}
			}
			return -1
		}
		e.reindex() // grown past the hashed index
	}
	off, ok := e.byMember()[m]
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
	if mh := e.hashed(); mh != nil {
		mh.h = append(mh.h[:i], mh.h[i+1:]...)
	} else if by := e.byMember(); by != nil {
		delete(by, e.cands[i].Member)
	}
	e.cands = append(e.cands[:i], e.cands[i+1:]...)
}

// placed keeps the member index, if built, in step with the candidate just
// placed at position i.
func (e *roleEntry) placed(i int) {
	c := &e.cands[i]
	if mh := e.hashed(); mh != nil {
		h := memberHash(c.Member)
		mh.mark(h)
		mh.h = slices.Insert(mh.h, i, h)
	} else if by := e.byMember(); by != nil {
		by[c.Member] = c.Offset
	}
}

// reindex builds the member index from e.cands: hashed below mapFrom
// candidates, a map from then on.
func (e *roleEntry) reindex() {
	if len(e.cands) < mapFrom {
		mi := &memberIndex{memberHashes: memberHashes{h: make([]uint64, len(e.cands), 2*len(e.cands))}}
		for i := range e.cands {
			h := memberHash(e.cands[i].Member)
			mi.h[i] = h
			mi.mark(h)
		}
		e.members = mi
		return
	}
	by := make(map[codec.MemberID]int64, len(e.cands))
	for _, c := range e.cands {
		by[c.Member] = c.Offset
	}
	e.members = &memberIndex{byMember: by}
}

// register puts registration c (its member's, at its offset) in rank
// order. A registration older than the one held for the member (a replay)
// is ignored; a newer one moves the member to its new place (the back).
// It reports whether the entry changed.
func (e *roleEntry) register(c candidate) bool {
	offset := c.Offset
	if i := e.find(c.Member); i >= 0 {
		if e.cands[i].Offset >= offset {
			return false
		}
		e.remove(i)
	}
	n := len(e.cands)
	i := n
	if n > 0 && e.cands[n-1].Offset > offset {
		i = sort.Search(n, func(i int) bool { return e.cands[i].Offset > offset })
	}
	e.cands = slices.Insert(e.cands, i, c)
	e.placed(i)
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

// hasLease reports whether the entry holds a lease.
func (e *roleEntry) hasLease() bool { return e.leaseOffset >= 0 }

// seeLease records that the view saw the held lease at at: lookups judge
// it from then (see [rolestate.State.LeaseEnd]).
func (e *roleEntry) seeLease(at time.Time) { e.leaseSeenAt = at }

// leaseEnd is the held lease's end on the view's clock, as
// [rolestate.State.LeaseEnd] gives it for the lease alone: its span from
// when the view saw it.
func (e *roleEntry) leaseEnd() time.Time { return rolestate.LeaseEndSeen(e.lease, e.leaseSeenAt) }

// live reports whether the held lease holds at now, as
// [rolestate.State.Live] judges it.
func (e *roleEntry) live(now time.Time) bool {
	return e.hasLease() && rolestate.LiveUntil(e.lease, e.leaseEnd(), now)
}

// setLease replaces the lease unless the held one is newer (a replay).
func (e *roleEntry) setLease(l codec.Lease, offset int64) bool {
	if e.hasLease() && e.leaseOffset >= offset {
		return false
	}
	e.lease, e.leaseOffset = l, offset
	return true
}

// dropLease removes the lease on a lease tombstone.
func (e *roleEntry) dropLease(offset int64) bool {
	if !e.hasLease() || e.leaseOffset > offset {
		return false
	}
	e.lease, e.leaseOffset = codec.Lease{}, -1
	return true
}

// sortCands restores rank order after a bulk load in key order; the member
// index is dropped, and built again by the next find that needs it.
func (e *roleEntry) sortCands() {
	sort.Slice(e.cands, func(i, j int) bool { return e.cands[i].Offset < e.cands[j].Offset })
	e.members = nil
}

// applyTo applies one decoded record to e and reports whether e changed;
// x is a registration's value and instance as the table shares them.
func applyTo(e *roleEntry, k codec.Key, r codec.Record, offset int64, x *candExtra) bool {
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
			changed = e.register(candidate{Member: k.Member, Offset: offset, RegisteredAt: r.Registration.RegisteredAt, extra: x})
		} else {
			changed = e.deregister(k.Member, offset)
		}
	}
	if changed && offset > e.lastOffset {
		e.lastOffset = offset
	}
	return changed
}
