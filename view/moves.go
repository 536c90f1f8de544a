package view

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/rolestate"
)

// MaxMoves bounds the moves a view keeps ([View.GroupMoves]): the last
// MaxMoves of all groups together, in memory only.
const MaxMoves = 1000

// The moves of group roles: as the index applies a lease whose holder is
// another member than the role's previous lease's, it records the move,
// with its cause told from how the previous holding ended:
//
//   - a release carries its cause (codec.Cause): drain, leave, or
//     rebalance, which is a join when the new holder joined at most one
//     lease before the new lease: its first heartbeat counting it in the
//     group, after those of its warm-up (see joinMark). A release without a cause it
//     knows (an older writer's) is a drain when its holder's heartbeat
//     says it drains, else as a rebalance.
//   - no release: a leave when the holding's session ended (a session
//     end of its incarnation was read, before the move or after it: it
//     lies in another partition), else a failover.
//   - no previous lease: a join.
//
// The role's group is the one the new holder's heartbeats name, else the
// previous holder's. A move read before either holder's heartbeat (while
// the view catches up, partitions are read side by side) is kept with
// its group unknown and placed when one is read. A lease that waits for
// its producer id's verdict is noted as it is read, in offset order, and
// shown once own (waiting records of one producer id are applied as the
// latest of them, which would hide the moves between). Unheld is
// measured on the view's clock, so only for moves whose both ends the
// view applied after its first catch-up. A view restored from its state
// dir, or started on a compacted topic, knows the moves it reads from
// then on; a member's join is known only when the view read its warm-up.

// moveLog is the index's record of moves; ix.mu guards it.
type moveLog struct {
	// moves is a ring of at most MaxMoves: oldest first from head once
	// full.
	moves []moveRec
	head  int
	joins map[codec.MemberID]joinMark
	// readyAt is when the view first caught up, on its clock: an end of a
	// holding seen before is dated by when it was read, not when it was.
	readyAt time.Time
}

// moveRec is a move and what is needed to settle it later.
type moveRec struct {
	group.Move
	// fromSession is the previous holding's session, for a session end
	// read after the move (a failover becomes a leave).
	fromSession *codec.Session
	// joinOpen: a rebalance whose new holder's heartbeats the view had
	// not read when it was recorded, told again when GroupMoves reads it.
	joinOpen bool
	// pending: its lease waits for its producer id's verdict (pid):
	// not shown until own; dropped when not.
	pending, dropped bool
	pid              int64
}

// joinMark is when a member joined its group, as the view read its
// heartbeats: since is the GrantedAt (its own clock) of the first
// heartbeat of its incarnation naming the group that did not drain, after
// one that did (a member warms up, its heartbeats draining, before it
// takes a role); 0 until then, and for good when the first heartbeat of
// the incarnation the view read did not drain (it joined before the view
// started reading it).
type joinMark struct {
	nonce, group string
	warming      bool
	since        int64
	span         time.Duration
}

// moveFacts is what classifyMove tells a move's cause from.
type moveFacts struct {
	hadPrev      bool        // a previous lease of another member
	released     bool        // it was a release
	cause        codec.Cause // the release's
	fromDraining bool        // the previous holder's heartbeat says it drains
	sessionEnded bool        // the previous holding's session ended
	at           int64       // the new lease's GrantedAt
	join         joinMark    // the new holder's; since 0 when not known
}

// classifyMove returns the cause of a move (see moveLog).
func classifyMove(f moveFacts) group.MoveCause {
	switch {
	case !f.hadPrev:
		return group.MoveJoin
	case f.released:
		switch f.cause {
		case codec.CauseDrain:
			return group.MoveDrain
		case codec.CauseLeave:
			return group.MoveLeave
		case codec.CauseRebalance:
		default:
			if f.fromDraining {
				return group.MoveDrain
			}
		}
		if joinedBefore(f.join, f.at) {
			return group.MoveJoin
		}
		return group.MoveRebalance
	case f.sessionEnded:
		return group.MoveLeave
	}
	return group.MoveFailover
}

// joinedBefore reports whether a member that joined at j did so at most
// one lease (its heartbeat's span) before at, on its own clock.
func joinedBefore(j joinMark, at int64) bool {
	return j.since > 0 && j.since <= at && at-j.since <= j.span.Milliseconds()
}

// markBeatLocked keeps member's join mark in step with its session record
// hb, and settles the moves a session end explains. ix.mu must be held.
func (ix *index) markBeatLocked(member codec.MemberID, hb codec.Heartbeat) {
	ml := &ix.moves
	if hb.End {
		delete(ml.joins, member)
		for i := range ml.moves {
			if m := &ml.moves[i]; m.Cause == group.MoveFailover && m.From == member && m.fromSession != nil && hb.Session.Keeps(*m.fromSession) {
				m.Cause = group.MoveLeave
			}
		}
		return
	}
	if hb.Group == "" {
		delete(ml.joins, member)
		return
	}
	j, ok := ml.joins[member]
	if !ok || j.nonce != hb.Session.Nonce || j.group != hb.Group {
		j = joinMark{nonce: hb.Session.Nonce, group: hb.Group, warming: hb.Drain}
	}
	if j.warming && !hb.Drain {
		j.warming, j.since, j.span = false, hb.GrantedAt, rolestate.HeartbeatSpan(hb)
	}
	if ml.joins == nil {
		ml.joins = map[codec.MemberID]joinMark{}
	}
	ml.joins[member] = j
}

// prevLease returns the lease record of e before the next: the latest
// waiting for its verdict, else the lease applied, with when the view saw
// it (zero: not known).
func prevLease(e *roleEntry) (codec.Lease, bool, time.Time) {
	if p := e.pends(); len(p) > 0 {
		return p[len(p)-1].lease, true, time.Time{}
	}
	return e.lease, e.hasLease(), e.leaseSeenAt
}

// noteMoveLocked records the move of role, if its lease l at off, which
// the view saw at now (zero: not known), moved it from the lease record
// before, prev (hadPrev false: none), seen at prevSeen. pid, when set, is
// l's producer id, whose verdict l waits for. ix.mu must be held.
func (ix *index) noteMoveLocked(role codec.Role, prev codec.Lease, hadPrev bool, prevSeen time.Time, l codec.Lease, now time.Time, off int64, pid *int64) {
	if l.Released() || hadPrev && prev.Member == l.Member {
		return
	}
	ml := &ix.moves
	join, joinKnown := ml.joins[l.Member]
	f := moveFacts{hadPrev: hadPrev, at: l.GrantedAt, join: join}
	mv := moveRec{Move: group.Move{Role: role, To: l.Member, Offset: off, At: l.GrantedAt, Unheld: -1}}
	var end time.Time // the previous holding's end on the view's clock
	if hadPrev {
		mv.From = prev.Member
		fromBeat, fromKnown := ix.sessions[prev.Member]
		switch {
		case prev.Released():
			f.released, f.cause = true, prev.Cause
			f.fromDraining = fromKnown && fromBeat.hb.Drain && !fromBeat.hb.End
			end = prevSeen
		default:
			st := rolestate.State{Role: role, Lease: &prev, LeaseSeenAt: prevSeen, Session: ix.sessionLocked(&prev)}
			if r := st.Renewal(); !prevSeen.IsZero() && (r.Dropped || !r.End.After(now)) {
				end = r.End
			}
			if prev.Session != nil {
				s := *prev.Session
				mv.fromSession = &s
				f.sessionEnded = fromKnown && fromBeat.hb.End && fromBeat.hb.Session.Keeps(s)
			}
		}
	}
	if ix.ready && !now.IsZero() && !end.IsZero() && !end.Before(ml.readyAt) {
		mv.Unheld = max(now.Sub(end), 0)
	}
	mv.Cause = classifyMove(f)
	mv.joinOpen = mv.Cause == group.MoveRebalance && !joinKnown
	if pid != nil {
		mv.pending, mv.pid = true, *pid
	}
	mv.Group = ix.moveGroupLocked(mv.Move)
	if mv.Group == "" && ix.ready && ix.heartbeatsKnownLocked(mv.Move) {
		return // the role of no group
	}
	ml.add(mv)
}

// add appends m, dropping the oldest move once MaxMoves are kept.
func (ml *moveLog) add(m moveRec) {
	if len(ml.moves) < MaxMoves {
		ml.moves = append(ml.moves, m)
		return
	}
	ml.moves[ml.head] = m
	ml.head = (ml.head + 1) % MaxMoves
}

// settle applies the verdict on role's producer id pid to the moves
// whose lease waited for it: shown when own, dropped when not.
func (ml *moveLog) settle(role codec.Role, pid int64, own bool) {
	for i := range ml.moves {
		if m := &ml.moves[i]; m.pending && m.pid == pid && m.Role == role {
			m.pending, m.dropped = false, !own
		}
	}
}

// at returns the i-th move kept, oldest first.
func (ml *moveLog) at(i int) *moveRec { return &ml.moves[(ml.head+i)%len(ml.moves)] }

// moveGroupLocked returns the group of a move's role: the one the new
// holder's latest heartbeat names, else the previous holder's; "" when
// neither names one. ix.mu must be held.
func (ix *index) moveGroupLocked(m group.Move) string {
	for _, id := range []codec.MemberID{m.To, m.From} {
		if se, ok := ix.sessions[id]; ok && id != "" && !se.hb.End && se.hb.Group != "" {
			return se.hb.Group
		}
	}
	if j, ok := ix.moves.joins[m.To]; ok {
		return j.group
	}
	return ""
}

// heartbeatsKnownLocked reports whether the view has read a session
// record of both members of a move (of its new holder when it has no
// previous one). ix.mu must be held.
func (ix *index) heartbeatsKnownLocked(m group.Move) bool {
	if _, ok := ix.sessions[m.To]; !ok {
		return false
	}
	if m.From == "" {
		return true
	}
	_, ok := ix.sessions[m.From]
	return ok
}

// GroupMoves returns the moves of the roles of the group named name that
// the view has read, oldest first by their new leases' grant times (each
// on its holder's clock): each change of holder of a role whose
// holders name the group in their heartbeats, with its cause (see
// [group.MoveCause]). The view keeps the last [MaxMoves] of all groups,
// from when it started. It waits for the catch-up as every lookup does.
func (v *View) GroupMoves(ctx context.Context, name string) ([]group.Move, error) {
	if name == "" {
		return nil, nil // no group
	}
	if err := v.await(ctx); err != nil {
		return nil, err
	}
	if err := v.awaitBeats(ctx); err != nil {
		return nil, err
	}
	ix := v.index
	ix.mu.Lock() // placing a move once its group or join is known writes
	defer ix.mu.Unlock()
	var out []group.Move
	for i := range ix.moves.moves {
		m := ix.moves.at(i)
		if m.Group == "" {
			m.Group = ix.moveGroupLocked(m.Move)
		}
		if m.joinOpen {
			if j, ok := ix.moves.joins[m.To]; ok {
				m.joinOpen = false
				if joinedBefore(j, m.At) {
					m.Cause = group.MoveJoin
				}
			}
		}
		if m.Group == name && !m.pending && !m.dropped {
			out = append(out, m.Move)
		}
	}
	// The view applies the partitions' records side by side, so the order
	// it read moves of different roles in is its own; their grant times
	// give every reader the same order.
	slices.SortStableFunc(out, func(a, b group.Move) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Role, b.Role), cmp.Compare(a.Offset, b.Offset))
	})
	return out, nil
}
