package view

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// index is the view's first concept: the table the lookups read (each
// role's lease and ranked candidates), its record counters, and the Watch
// subscribers it publishes changes to. It knows nothing of partitions,
// offsets to wait for, or goka: it is handed decoded records in offset
// order per role (see apply.go) and answers lookups.
//
// Each lease in the table carries when the index applied it, by the view's
// clock (roleEntry.leaseSeenAt, [rolestate.State].LeaseSeenAt): stamped
// when a lease record is applied, when it is restored from the state dir,
// and again when a rebuilt table replaces the old one (adopt), so that a
// lease is never credited with a span that began before lookups could see
// it.
//
// Every field but clock is guarded by mu. A subscriber's pending changes are added
// under mu and taken under mu (see watch.go), so a change and the state
// before it are always paired.
type index struct {
	clock func() time.Time // the view's clock; set once by newIndex
	mu    sync.RWMutex
	roles map[codec.Role]*roleEntry
	// Subscribers, indexed so that publishing a change of a role costs
	// O(subscribers that want it), not O(all subscribers): all holds the
	// subscribers of every role (Watch with no roles), byRole those of
	// each role named (Watch with roles, Follow). A member following K
	// roles adds K entries to byRole, and a record of one role reaches
	// one of them.
	all     map[*subscriber]struct{}
	byRole  map[codec.Role]map[*subscriber]struct{}
	subWG   sync.WaitGroup // one per subscriber goroutine
	stopped bool           // no subscriber is added any more
	// follows holds each role's followers (Follow, follow.go), offered
	// the role's state at each change once ready (the first catch-up).
	follows map[codec.Role]*follower // the first of each role's followers
	ready   bool
	applied int64
	skipped map[SkipReason]int64

	// rebuilding holds the partitions being read again from their start
	// after their offsets went backwards (see rebuild.go). Records of those
	// partitions' roles are applied to rebuild instead of roles, and
	// nothing is published, until adopt moves them into roles. nparts
	// (set once, before any record) maps a role to its partition.
	rebuilding map[int32]bool
	rebuild    map[codec.Role]*roleEntry
	nparts     int32

	// pendRoles holds the roles with a lease record waiting for its
	// producer id's verdict (roleEntry.pending, see author.go); pendChanged
	// is closed and replaced whenever a role leaves it. ask (set once,
	// before any record) queues a producer id for a verdict.
	pendRoles   map[codec.Role]struct{}
	pendChanged chan struct{}
	ask         func(codec.Role, int64)
	// pendWaits holds, per role, the awaitVerified calls waiting for its
	// records' verdicts.
	pendWaits map[codec.Role][]pendWait

	// sessions holds each member's latest session record that counts,
	// sessPend the latest waiting for its producer id's verdict (see
	// session.go).
	sessions map[codec.MemberID]sessionEntry
	sessPend map[codec.MemberID]pendBeat
	// drains holds each member's latest drain request (see drain.go).
	drains map[codec.MemberID]drainEntry
	// moves records the moves of group roles (see moves.go).
	moves moveLog
	// names shares the strings and sessions the table's records repeat.
	names names
}

func newIndex(clock func() time.Time) *index {
	return &index{
		clock:       clock,
		roles:       map[codec.Role]*roleEntry{},
		all:         map[*subscriber]struct{}{},
		byRole:      map[codec.Role]map[*subscriber]struct{}{},
		follows:     map[codec.Role]*follower{},
		skipped:     map[SkipReason]int64{},
		rebuilding:  map[int32]bool{},
		rebuild:     map[codec.Role]*roleEntry{},
		pendRoles:   map[codec.Role]struct{}{},
		pendChanged: make(chan struct{}),
		pendWaits:   map[codec.Role][]pendWait{},
		sessions:    map[codec.MemberID]sessionEntry{},
		sessPend:    map[codec.MemberID]pendBeat{},
		drains:      map[codec.MemberID]drainEntry{},
	}
}

func (ix *index) setPartitions(n int32) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.nparts = n
}

// skip counts a skipped record and reports whether it is the first of its
// reason.
func (ix *index) skip(reason SkipReason) (first bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.skipped[reason]++
	return ix.skipped[reason] == 1
}

// apply folds one decoded record at offset of partition p into the table
// and publishes the change. It reports whether the table changed.
func (ix *index) apply(p int32, k codec.Key, rec codec.Record, off int64) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.applyLocked(p, k, rec, off)
}

// applyChunk applies or counts as skipped each record of recs (records of
// partition p in offset order; a record with a reason is skipped) above
// offset from, under one hold of the lock, and sets its changed or first.
// The partitions' goroutines would otherwise take turns at the lock for
// every record.
func (ix *index) applyChunk(p int32, recs []decoded, from int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i := range recs {
		d := &recs[i]
		switch {
		case d.off <= from:
		case d.reason != "":
			ix.skipped[d.reason]++
			d.first = ix.skipped[d.reason] == 1
		case d.hold && d.k.Kind == codec.KindSession:
			ix.holdBeatLocked(p, d.k.Member, *d.rec.Heartbeat, d.off)
		case d.hold:
			ix.holdLocked(p, d.k.Role, *d.rec.Lease, d.off, string(d.src.key()), d.src.value())
		default:
			d.changed = ix.applyLocked(p, d.k, d.rec, d.off)
		}
	}
}

// applyLocked is apply; ix.mu must be held.
func (ix *index) applyLocked(p int32, k codec.Key, rec codec.Record, off int64) bool {
	if k.Kind == codec.KindSession {
		return ix.applyBeatLocked(k.Member, rec, off)
	}
	if k.Kind == codec.KindDrain {
		return ix.applyDrainLocked(k.Member, rec, off)
	}
	ix.applied++
	roles, live := ix.roles, true
	if len(ix.rebuilding) > 0 && ix.rebuilding[p] {
		roles, live = ix.rebuild, false
	}
	e := roles[k.Role]
	isNew := e == nil
	if isNew {
		e = &roleEntry{leaseOffset: -1, lastOffset: -1}
	}
	moved := live && k.Kind == codec.KindLease && rec.Lease != nil
	var prev codec.Lease
	var hadPrev bool
	var prevSeen time.Time
	if moved {
		prev, hadPrev, prevSeen = prevLease(e)
	}
	live = live && ix.subscribed() // nobody to publish to otherwise
	var before rolestate.State
	if live && ix.needsBefore(k.Role) {
		before = e.state(k.Role)
	}
	if rec.Lease != nil {
		l := ix.names.lease(*rec.Lease)
		rec.Lease = &l
	}
	var x *candExtra
	if k.Kind == codec.KindRegistration {
		k.Member = ix.names.member(k.Member)
		if rec.Registration != nil {
			x = ix.names.extra(rec.Registration.Value, rec.Registration.Instance)
		}
	}
	if !applyTo(e, k, rec, off, x) {
		return false
	}
	if k.Kind == codec.KindLease && e.hasLease() {
		e.seeLease(ix.clock())
	}
	if moved && e.hasLease() {
		ix.noteMoveLocked(k.Role, prev, hadPrev, prevSeen, e.lease, e.leaseSeenAt, off, nil)
	}
	if k.Kind == codec.KindLease && len(e.pends()) > 0 {
		// A lease that counts supersedes the records waiting before it.
		e.setPends(slices.DeleteFunc(e.pends(), func(pl pendLease) bool { return pl.off < off }))
		ix.notePendLocked(k.Role)
	}
	switch {
	case e.empty():
		delete(roles, k.Role)
	case isNew:
		roles[ownRole(k)] = e
	}
	if live {
		ix.publish(k.Role, before, off)
	}
	return true
}

// hold keeps lease record l of role at offset off of partition p waiting
// for its producer id's verdict (see author.go); key and value are the
// record's as read.
func (ix *index) hold(p int32, role codec.Role, l codec.Lease, off int64, key string, value []byte) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.holdLocked(p, role, l, off, key, value)
}

// holdLocked is hold; ix.mu must be held.
func (ix *index) holdLocked(p int32, role codec.Role, l codec.Lease, off int64, key string, value []byte) {
	ix.applied++
	roles, live := ix.roles, true
	if len(ix.rebuilding) > 0 && ix.rebuilding[p] {
		roles, live = ix.rebuild, false
	}
	e := roles[role]
	if e == nil {
		e = &roleEntry{leaseOffset: -1, lastOffset: -1}
		roles[role] = e
	}
	if e.hasLease() && e.leaseOffset >= off {
		return // a replay
	}
	prev, hadPrev, prevSeen := prevLease(e)
	l = ix.names.lease(l)
	ix.holdLease(e, role, l, off, key, value)
	if live {
		// Noted now, in offset order, as it waits: records of one producer
		// id that wait together are applied as the latest of them.
		pid := l.Token.ProducerID
		ix.noteMoveLocked(role, prev, hadPrev, prevSeen, l, time.Time{}, off, &pid)
	}
}

// ownRole returns k's role for a key of the table: a registration key's
// role is cut from the string it shares with the member id, which the
// table keeps apart (names), so the role gets a string of its own.
func ownRole(k codec.Key) codec.Role {
	if k.Kind == codec.KindRegistration {
		return codec.Role(strings.Clone(string(k.Role)))
	}
	return k.Role
}

// subscribed reports whether the index has a subscriber. ix.mu must be
// held.
func (ix *index) subscribed() bool {
	return len(ix.all) > 0 || len(ix.byRole) > 0 || len(ix.follows) > 0
}

// seed loads a block of stored records of one partition (in any order;
// fastest in key order) into the table; they must have decoded cleanly. A
// partition's blocks are loaded while its storage opens, before any of its
// records is applied and before a lookup can read its roles (lookups wait
// for the first catch-up), so the roles it touches, gathered in touched,
// are put in rank order only by seedDone, after the last block.
func (ix *index) seed(recs []decodedRecord, touched map[codec.Role]*roleEntry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	now := ix.clock()
	var e *roleEntry // the entry of role: the state dir is in key order, so a role's records come together
	var role codec.Role
	for i := range recs {
		r := &recs[i]
		if r.rec.Tombstone() {
			continue
		}
		if r.key.Kind == codec.KindSession {
			if se, ok := ix.sessions[r.key.Member]; (!ok || se.off < r.offset) && r.rec.Heartbeat != nil {
				hb := *r.rec.Heartbeat
				hb.Excluded = append([]codec.Role(nil), hb.Excluded...)
				ix.sessions[r.key.Member] = sessionEntry{off: r.offset, hb: hb, seen: now}
			}
			continue
		}
		if r.key.Kind == codec.KindDrain {
			if d, ok := ix.drains[r.key.Member]; (!ok || d.off < r.offset) && r.rec.Drain != nil {
				ix.drains[r.key.Member] = drainEntry{off: r.offset, req: *r.rec.Drain}
			}
			continue
		}
		if e == nil || r.key.Role != role {
			role = r.key.Role
			if e = ix.roles[role]; e == nil {
				e = &roleEntry{leaseOffset: -1, lastOffset: -1}
				ix.roles[ownRole(r.key)] = e
			}
			touched[role] = e
			n := 0 // the role's registrations that follow in this block: room for them at once
			for j := i; j < len(recs) && recs[j].key.Role == role; j++ {
				if recs[j].rec.Registration != nil {
					n++
				}
			}
			e.cands = slices.Grow(e.cands, n)
		}
		switch {
		case r.rec.Lease != nil:
			e.setLease(ix.names.lease(*r.rec.Lease), r.offset)
			e.seeLease(now)
		case r.rec.Registration != nil:
			g := r.rec.Registration
			e.cands = append(e.cands, candidate{Member: ix.names.member(r.key.Member), Offset: r.offset, RegisteredAt: g.RegisteredAt,
				extra: ix.names.extra(g.Value, g.Instance)})
		}
		if r.offset > e.lastOffset {
			e.lastOffset = r.offset
		}
	}
}

// seedDone puts the roles a partition's seed touched in rank order and
// publishes them.
func (ix *index) seedDone(touched map[codec.Role]*roleEntry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for role, e := range touched {
		e.sortCands()
		if ix.needsBefore(role) || ix.follows[role] != nil {
			ix.publish(role, rolestate.State{Role: role, LeaseOffset: -1}, e.lastOffset)
		}
	}
}

// startRebuild makes partition p's records go to an empty table,
// invisible to lookups, until adopt. The table keeps p's roles as they
// were meanwhile.
func (ix *index) startRebuild(p int32) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.rebuilding[p] = true
	ix.dropSessionsLocked(p)
	ix.dropDrainsLocked(p)
	for role := range ix.rebuild {
		if codec.Partition(role, ix.nparts) == p {
			delete(ix.rebuild, role)
			ix.notePendLocked(role)
		}
	}
}

// adopt makes the rebuilt table of each partition of parts that is being
// rebuilt the table, publishing to subscribers every role of it whose
// state changes (a role gone from the rebuilt table changes to an unknown
// role). It returns the partitions adopted.
func (ix *index) adopt(parts []int32) []int32 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var done []int32
	for _, p := range parts {
		if ix.rebuilding[p] {
			done = append(done, p)
			delete(ix.rebuilding, p)
		}
	}
	if len(done) == 0 {
		return nil
	}
	adopted := map[int32]bool{}
	for _, p := range done {
		adopted[p] = true
	}
	// The state before of every role of the adopted partitions, old or
	// new, and the offset of its latest record in the rebuilt table.
	befores := map[codec.Role]rolestate.State{}
	offsets := map[codec.Role]int64{}
	for role, e := range ix.roles {
		if adopted[codec.Partition(role, ix.nparts)] {
			befores[role] = e.state(role)
			offsets[role] = -1
			delete(ix.roles, role)
		}
	}
	now := ix.clock()
	for role, e := range ix.rebuild {
		if adopted[codec.Partition(role, ix.nparts)] {
			if e.hasLease() {
				e.seeLease(now) // lookups see the lease from now on
			}
			if _, ok := befores[role]; !ok {
				befores[role] = rolestate.State{Role: role, LeaseOffset: -1}
			}
			offsets[role] = e.lastOffset
			ix.roles[role] = e
			delete(ix.rebuild, role)
		}
	}
	for role, before := range befores {
		ix.publish(role, before, offsets[role])
		ix.notePendLocked(role)
	}
	return done
}

// rebuildPending reports whether a partition is being rebuilt.
func (ix *index) rebuildPending() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.rebuilding) > 0
}

// stop marks the index stopped (Watch then gives closed channels) and
// waits for the subscribers' goroutines, which the caller has woken.
func (ix *index) stop() {
	ix.mu.Lock()
	ix.stopped = true
	ix.closeFollowersLocked()
	ix.mu.Unlock()
	ix.subWG.Wait()
}

// decodedRecord is a record of the state dir, decoded.
type decodedRecord struct {
	key    codec.Key
	rec    codec.Record
	offset int64
}
