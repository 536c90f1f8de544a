package view

import (
	"sync"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// index is the view's first concept: the table the lookups read (each
// role's lease and ranked candidates), its record counters, and the Watch
// subscribers it publishes changes to. It knows nothing of partitions,
// offsets to wait for, or goka: it is handed decoded records in offset
// order per role (see apply.go) and answers lookups.
//
// Every field is guarded by mu. A subscriber's pending changes are added
// under mu and taken under mu (see watch.go), so a change and the state
// before it are always paired.
type index struct {
	mu      sync.RWMutex
	roles   map[codec.Role]*roleEntry
	subs    map[*subscriber]struct{}
	subWG   sync.WaitGroup // one per subscriber goroutine
	stopped bool           // no subscriber is added any more
	applied int64
	skipped map[SkipReason]int64

	// rebuild, when not nil, is the table being read again from the start
	// after the topic's offsets went backwards (see rebuild.go): records
	// are applied to it instead of roles, and nothing is published, until
	// adopt makes it the table.
	rebuild map[codec.Role]*roleEntry
}

func newIndex() *index {
	return &index{
		roles:   map[codec.Role]*roleEntry{},
		subs:    map[*subscriber]struct{}{},
		skipped: map[SkipReason]int64{},
	}
}

// skip counts a skipped record and reports whether it is the first of its
// reason.
func (ix *index) skip(reason SkipReason) (first bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.skipped[reason]++
	return ix.skipped[reason] == 1
}

// apply folds one decoded record at offset into the table and publishes
// the change. It reports whether the table changed.
func (ix *index) apply(k codec.Key, rec codec.Record, off int64) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.applied++
	roles, live := ix.roles, true
	if ix.rebuild != nil {
		roles, live = ix.rebuild, false
	}
	e := roles[k.Role]
	isNew := e == nil
	if isNew {
		e = &roleEntry{leaseOffset: -1, lastOffset: -1}
	}
	var before rolestate.State
	if live && ix.needsBefore(k.Role) {
		before = e.state(k.Role)
	}
	if !applyTo(e, k, rec, off) {
		return false
	}
	switch {
	case e.empty():
		delete(roles, k.Role)
	case isNew:
		roles[k.Role] = e
	}
	if live {
		ix.publish(k.Role, before, off)
	}
	return true
}

// seed loads stored records of one partition (in any order) into the
// table; recs must have decoded cleanly.
func (ix *index) seed(recs []decodedRecord) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	touched := map[codec.Role]*roleEntry{}
	for _, r := range recs {
		if r.rec.Tombstone() {
			continue
		}
		e := ix.roles[r.key.Role]
		if e == nil {
			e = &roleEntry{leaseOffset: -1, lastOffset: -1}
			ix.roles[r.key.Role] = e
		}
		touched[r.key.Role] = e
		switch {
		case r.rec.Lease != nil:
			e.setLease(*r.rec.Lease, r.offset)
		case r.rec.Registration != nil:
			e.cands = append(e.cands, rolestate.Candidate{Member: r.key.Member, Offset: r.offset, RegisteredAt: r.rec.Registration.RegisteredAt})
		}
		if r.offset > e.lastOffset {
			e.lastOffset = r.offset
		}
	}
	for role, e := range touched {
		e.sortCands()
		if ix.needsBefore(role) {
			ix.publish(role, rolestate.State{Role: role, LeaseOffset: -1}, e.lastOffset)
		}
	}
}

// startRebuild makes records go to an empty table, invisible to lookups,
// until adopt.
func (ix *index) startRebuild() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.rebuild = map[codec.Role]*roleEntry{}
}

// adopt makes the rebuilt table the table, publishing to subscribers every
// role whose state differs (a role gone from the rebuilt table changes to
// an unknown role). It does nothing when no rebuild is under way.
func (ix *index) adopt() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.rebuild == nil {
		return
	}
	old, next := ix.roles, ix.rebuild
	type change struct {
		role   codec.Role
		before rolestate.State
		offset int64
	}
	var changes []change
	for role, e := range old {
		c := change{role: role, offset: -1}
		if ix.needsBefore(role) {
			c.before = e.state(role)
		}
		if n := next[role]; n != nil {
			c.offset = n.lastOffset
		}
		changes = append(changes, c)
	}
	for role, e := range next {
		if old[role] == nil {
			changes = append(changes, change{role: role, before: rolestate.State{Role: role, LeaseOffset: -1}, offset: e.lastOffset})
		}
	}
	ix.roles, ix.rebuild = next, nil
	for _, c := range changes {
		ix.publish(c.role, c.before, c.offset)
	}
}

// stop marks the index stopped (Watch then gives closed channels) and
// waits for the subscribers' goroutines, which the caller has woken.
func (ix *index) stop() {
	ix.mu.Lock()
	ix.stopped = true
	ix.mu.Unlock()
	ix.subWG.Wait()
}

// decodedRecord is a record of the state dir, decoded.
type decodedRecord struct {
	key    codec.Key
	rec    codec.Record
	offset int64
}
