package group

import (
	"time"

	"github.com/krabka/krole/codec"
)

// MoveCause says why a role of a group moved to another member.
type MoveCause string

// The causes of a move, as a reader of the role topic tells them (package
// view, View.GroupMoves).
const (
	// MoveJoin: the role went to a member that joined the group: it had no
	// holder before, or its holder handed it over to a member whose first
	// heartbeat counting it in the group came at most one lease before.
	MoveJoin MoveCause = "join"
	// MoveLeave: the holder let it go of its own accord (it stopped,
	// resigned or withdrew; its release says so), or its member session
	// ended.
	MoveLeave MoveCause = "leave"
	// MoveDrain: the holder drains and handed it over.
	MoveDrain MoveCause = "drain"
	// MoveRebalance: the holder handed it over to a member below its
	// share, not one that just joined.
	MoveRebalance MoveCause = "rebalance"
	// MoveFailover: the holding ended without a release or a session end:
	// the lease ran out, its session stopped vouching for it, or another
	// member's token fenced it.
	MoveFailover MoveCause = "failover"
)

// Move is one change of the holder of a group's role.
type Move struct {
	Role  codec.Role
	Group string
	// From held the role before, "" when nobody did; To holds it now.
	From, To codec.MemberID
	// Offset is the new lease's offset in the role topic; At its
	// GrantedAt (Unix ms, the new holder's clock).
	Offset int64
	At     int64
	Cause  MoveCause
	// Unheld is how long nobody held the role, from the end of From's
	// holding (its release, or when its lease ran out or its session
	// ended) to To's lease, on the reader's clock; negative when not known.
	Unheld time.Duration
}
