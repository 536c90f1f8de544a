package view

import (
	"context"
	"math"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// Member sessions (package processor, "Member sessions"): the view keeps
// each member's latest authentic session record (a heartbeat or a session
// end) with when it applied it, and joins it to every role whose lease
// names that session (rolestate.State.Session). A session record counts
// when rolestate.CheckHeartbeatAuthor accepts its batch and its producer
// id is that of <prefix>session/<member> at its coordinator (asked by the
// verifier under rolestate.SessionAuthor, as for a lease); until its
// verdict it does not count. A heartbeat that only vouches is not
// published (it would wake every follower of the member's roles at every
// heartbeat; [View.Session] looks it up); a record that drops roles is
// published as a change of each, vacant then as after a release.
//
// A heartbeat waiting for its verdict is not kept in the state dir: a Run
// that ends first loses it, which costs liveness only (the next comes a
// heartbeat interval later). Heartbeats that counted are kept, and a
// restart credits them from when it restored them, as it does leases.

// sessionEntry is a member's latest session record that counts.
type sessionEntry struct {
	off  int64
	hb   codec.Heartbeat
	seen time.Time
}

// pendBeat is a member's latest session record waiting for its producer
// id's verdict.
type pendBeat struct {
	off int64
	hb  codec.Heartbeat
	p   int32
}

// checkBeat is checkAuthor for a session record of member: forged unless
// rolestate.CheckHeartbeatAuthor accepts it and its producer id is the
// session's own; hold when that is not known yet.
func (v *View) checkBeat(member codec.MemberID, rec codec.Record, b batchInfo) (SkipReason, error, bool) {
	if err := rolestate.CheckHeartbeatAuthor(rec, rolestate.Batch{ProducerID: b.producerID, Epoch: b.epoch, Transactional: b.transactional}); err != nil {
		return SkipForged, err, false
	}
	key := rolestate.SessionAuthor(member)
	switch v.verify.authors.Verdict(key, rec.Heartbeat.Session.ProducerID) {
	case rolestate.Own:
		return "", nil, false
	case rolestate.NotOwn:
		return SkipForged, rolestate.NotOwnSessionError(*rec.Heartbeat, v.cfg.TransactionalID(string(key))), false
	}
	return "", nil, true
}

// applyBeatLocked keeps the session record rec of member at off, unless
// a later one is kept. ix.mu must be held.
func (ix *index) applyBeatLocked(member codec.MemberID, rec codec.Record, off int64) bool {
	ix.applied++
	if rec.Heartbeat == nil {
		return false // a tombstone never counts (checkBeat skips it)
	}
	if se, ok := ix.sessions[member]; ok && se.off >= off {
		return false
	}
	hb := *rec.Heartbeat
	hb.Excluded = append([]codec.Role(nil), hb.Excluded...) // rec may point into a reused buffer
	dropped := ix.droppedLocked(member, hb)
	befores := make([]rolestate.State, len(dropped))
	for i, role := range dropped {
		if ix.needsBefore(role) {
			befores[i] = ix.stateLocked(ix.roles[role], role)
		}
	}
	ix.sessions[member] = sessionEntry{off: off, hb: hb, seen: ix.clock()}
	ix.markBeatLocked(member, hb)
	if pb, ok := ix.sessPend[member]; ok && pb.off <= off {
		delete(ix.sessPend, member)
	}
	for i, role := range dropped {
		ix.publish(role, befores[i], ix.roles[role].lastOffset)
	}
	return true
}

// droppedLocked returns the roles whose live lease the session record hb
// of member ends (it excludes them, or it ends their incarnation), for
// their subscribers: a heartbeat that vouches changes no follower's
// decision before the lease's end, which the follower looks at again
// when it wakes (View.Session), but one that drops a role makes it vacant
// at once, and its candidates must hear of it then, as of a release.
// ix.mu must be held.
func (ix *index) droppedLocked(member codec.MemberID, hb codec.Heartbeat) []codec.Role {
	if !ix.subscribed() {
		return nil
	}
	names := func(role codec.Role) bool {
		e := ix.roles[role]
		return e != nil && e.hasLease() && e.lease.Member == member && e.lease.Session != nil &&
			!e.lease.Released() && hb.Session.Keeps(*e.lease.Session)
	}
	var out []codec.Role
	if hb.End {
		// Rare (a member leaving): one pass over the table.
		for role := range ix.roles {
			if names(role) {
				out = append(out, role)
			}
		}
		return out
	}
	for _, role := range hb.Excluded {
		if names(role) && rolestate.ExclusionsReach(hb, ix.roles[role].lease) {
			out = append(out, role)
		}
	}
	return out
}

// holdBeatLocked keeps member's session record hb at off of partition p
// waiting for its producer id's verdict, and asks for it. Only the latest
// record of a member waits. ix.mu must be held.
func (ix *index) holdBeatLocked(p int32, member codec.MemberID, hb codec.Heartbeat, off int64) {
	ix.applied++
	if se, ok := ix.sessions[member]; ok && se.off >= off {
		return // a replay
	}
	if pb, ok := ix.sessPend[member]; ok && pb.off >= off {
		return
	}
	hb.Excluded = append([]codec.Role(nil), hb.Excluded...)
	ix.sessPend[member] = pendBeat{off: off, hb: hb, p: p}
	if ix.ask != nil {
		ix.ask(rolestate.SessionAuthor(member), hb.Session.ProducerID)
	}
}

// resolveBeat applies the verdict on member's session producer id pid to
// its waiting record.
func (v *View) resolveBeat(member codec.MemberID, pid int64, verdict rolestate.Verdict) {
	ix := v.index
	ix.mu.Lock()
	pb, ok := ix.sessPend[member]
	if !ok || pb.hb.Session.ProducerID != pid {
		ix.mu.Unlock()
		return
	}
	delete(ix.sessPend, member)
	close(ix.pendChanged) // wakes awaitBeat
	ix.pendChanged = make(chan struct{})
	if verdict == rolestate.Own {
		ix.applyBeatLocked(member, codec.Record{Heartbeat: &pb.hb}, pb.off)
		ix.applied-- // counted when held
		ix.mu.Unlock()
		return
	}
	ix.skipped[SkipForged]++
	ix.mu.Unlock()
	key := rolestate.SessionAuthor(member)
	v.logSkip(SkipForged, v.firstForged.CompareAndSwap(false, true), pb.p, pb.off, codec.SessionKey(member).String(),
		rolestate.NotOwnSessionError(pb.hb, v.cfg.TransactionalID(string(key))))
}

// dropSessionsLocked forgets the session records of partition p (its
// offsets went backwards: it is read again from its start). ix.mu must be
// held.
func (ix *index) dropSessionsLocked(p int32) {
	for m := range ix.sessions {
		if codec.SessionPartition(m, ix.nparts) == p {
			delete(ix.sessions, m)
		}
	}
	for m, pb := range ix.sessPend {
		if pb.p == p {
			delete(ix.sessPend, m)
		}
	}
}

// sessionLocked returns what st's lease's session says, to join to st;
// nil when the lease names no session or none was read. ix.mu must be
// held.
func (ix *index) sessionLocked(l *codec.Lease) *rolestate.SessionSeen {
	if l == nil || l.Session == nil {
		return nil
	}
	se, ok := ix.sessions[l.Member]
	if !ok {
		return nil
	}
	return &rolestate.SessionSeen{Offset: se.off, Heartbeat: se.hb, SeenAt: se.seen}
}

// stateLocked is e.state(role) joined to its lease's session. ix.mu must
// be held.
func (ix *index) stateLocked(e *roleEntry, role codec.Role) rolestate.State {
	st := e.state(role)
	st.Session = ix.sessionLocked(st.Lease)
	return st
}

// liveLocked is e.live(now) with the lease's session joined. ix.mu must be
// held.
func (ix *index) liveLocked(e *roleEntry, role codec.Role, now time.Time) bool {
	if e == nil || !e.hasLease() {
		return false
	}
	if e.lease.Session == nil {
		return e.live(now)
	}
	l := e.lease
	st := rolestate.State{Role: role, Lease: &l, LeaseOffset: e.leaseOffset, LeaseSeenAt: e.leaseSeenAt, Session: ix.sessionLocked(&l)}
	return st.Live(now)
}

// Session returns member's latest session record that counts, as the view
// holds it (its SeenAt on the view's clock), and whether there is one. It
// waits for the catch-up as every lookup does. A member waiting for a
// lease's end asks it when it wakes: heartbeats are not published.
func (v *View) Session(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error) {
	if err := v.await(ctx); err != nil {
		return rolestate.SessionSeen{}, false, err
	}
	v.index.mu.RLock()
	defer v.index.mu.RUnlock()
	se, ok := v.index.sessions[member]
	if !ok {
		return rolestate.SessionSeen{}, false, nil
	}
	hb := se.hb
	hb.Excluded = append([]codec.Role(nil), hb.Excluded...)
	return rolestate.SessionSeen{Offset: se.off, Heartbeat: hb, SeenAt: se.seen}, true, nil
}

// SessionSettled is [View.Session] once no session record of member that
// the view has read waits for its producer id's verdict (see "Who can
// write what" in the package documentation): a record whose author is not
// verified yet is not returned by Session, so a member vetting its own
// id's session at its start (package processor) asks this one, and does
// not take a live process's heartbeat, still unverified, for none. It
// blocks until then or until ctx ends.
func (v *View) SessionSettled(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error) {
	if err := v.await(ctx); err != nil {
		return rolestate.SessionSeen{}, false, err
	}
	if err := v.awaitBeat(ctx, member, math.MaxInt64); err != nil {
		return rolestate.SessionSeen{}, false, err
	}
	return v.Session(ctx, member)
}

// awaitBeats waits until none of the session records waiting for their
// producer ids' verdicts when it was called still waits (each resolved,
// or passed over for a later record of its member), or ctx ends: records
// read later do not hold it back.
func (v *View) awaitBeats(ctx context.Context) error {
	ix := v.index
	ix.mu.RLock()
	upTo := make(map[codec.MemberID]int64, len(ix.sessPend))
	for m, pb := range ix.sessPend {
		upTo[m] = pb.off
	}
	ix.mu.RUnlock()
	return v.awaitBeatsUpTo(ctx, upTo)
}

// awaitBeat waits until no session record of member below offset below
// waits for its producer id's verdict, or ctx ends: a confirmation
// answers with every heartbeat committed before it counted or skipped.
func (v *View) awaitBeat(ctx context.Context, member codec.MemberID, below int64) error {
	return v.awaitBeatsUpTo(ctx, map[codec.MemberID]int64{member: below - 1})
}

// awaitBeatsUpTo waits until, for each member of upTo, no session record
// at or below its offset there waits for its producer id's verdict, or
// ctx ends. It takes upTo over.
func (v *View) awaitBeatsUpTo(ctx context.Context, upTo map[codec.MemberID]int64) error {
	ix := v.index
	for {
		ix.mu.RLock()
		for m, off := range upTo {
			if pb, waiting := ix.sessPend[m]; !waiting || pb.off > off {
				delete(upTo, m)
			}
		}
		ch := ix.pendChanged
		ix.mu.RUnlock()
		if len(upTo) == 0 {
			return nil
		}
		if err := v.waitChan(ctx, ch); err != nil {
			return err
		}
	}
}
