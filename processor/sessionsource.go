package processor

import (
	"context"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// SessionSource is a [Source] that can look up a member's latest session
// record (*view.View has it). A Member looks up the session of a role's
// holder each time it decides, since heartbeats are not role changes and
// do not come through Follow. A Source without it leaves
// rolestate.State.Session as Role, Follow and Confirm gave it.
type SessionSource interface {
	Session(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error)
}

// sessionSettler is a [SessionSource] that can wait until every session
// record of a member it has read is verified (*view.View's
// SessionSettled): the member's vetting at its start asks it, so that a
// live process's heartbeat, not verified yet, is not taken for none.
type sessionSettler interface {
	SessionSettled(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error)
}

// refreshSession looks up the session record of the role's lease's holder
// afresh, when the source can.
func (r *runner) refreshSession(ctx context.Context) {
	l := r.st.Lease
	if l == nil || l.Session == nil || l.Released() {
		return
	}
	ss, ok := r.m.src.(SessionSource)
	if !ok {
		return
	}
	se, found, err := ss.Session(ctx, l.Member)
	if err != nil || !found {
		return
	}
	if r.st.Session == nil || se.Offset >= r.st.Session.Offset {
		st := r.st
		st.Session = &se
		r.st = st
	}
}
