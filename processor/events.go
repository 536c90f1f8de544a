package processor

import (
	"fmt"
	"time"

	"github.com/krabka/krole/codec"
)

// Reason says why a member stopped holding a role.
type Reason string

// The revocation reasons.
const (
	// ReasonFenced: a later member took the role: the member session's
	// round found its token moved, the broker refused a lease rewrite, the
	// transport forgot the token after a fenced write, or the view showed
	// a newer token. Also when the role's transactional id expired under
	// the holding (nobody holds it: rule 5 of [Decide]), and when another
	// process took the member session over ([ErrMemberInUse]).
	ReasonFenced Reason = "fenced"
	// ReasonLeaseLost: no renewal succeeded within HeartbeatDeadline, so the
	// holder stopped on its own; also when the session's incarnation ended
	// under the holding, or the role's goroutine stopped checking in.
	ReasonLeaseLost Reason = "lease lost"
	// ReasonResigned: the holder handed the role over ([Member.Resign]).
	ReasonResigned Reason = "resigned"
	// ReasonContextEnded: Run's context ended (and, unless KeepOnExit, the
	// member let the role go).
	ReasonContextEnded Reason = "context ended"
	// ReasonWorkFailed: work returned an error (Event.Err); the member
	// resigned, and campaigns again after a backoff (see [Member.Run]).
	ReasonWorkFailed Reason = "work failed"
	// ReasonTokenRetired: the transport retired the holding's token after
	// a write under it got no definite answer (Event.Err); the member may
	// take its own lease back at once (rule 5 of [Decide]).
	ReasonTokenRetired Reason = "token retired"
	// ReasonDeregistered: someone else removed the holder's registration
	// (`krole resign --member`): it handed the role over as [Member.Resign]
	// does, and registers again at the back.
	ReasonDeregistered Reason = "deregistered"
	// ReasonHandedOver: the member's [Group] assigns the role to another
	// member (one joined, drains, or is below its share): the holder
	// handed it over as [Member.Resign] does.
	ReasonHandedOver Reason = "handed over"
)

// EventKind is the kind of an [Event].
type EventKind int

// The event kinds.
const (
	// Elected: this member took the role under Event.Token.
	Elected EventKind = iota + 1
	// Revoked: this member stopped holding the role (Event.Reason, Err).
	Revoked
	// HolderChanged: the holder as this member judges it from its view
	// (rule 5 of [Decide]) changed: another member, another token, or
	// vacant. Not on renewals.
	HolderChanged
)

// String returns the kind's name: "elected", "revoked", "holder
// changed", or "event(n)" for an unknown kind.
func (k EventKind) String() string {
	switch k {
	case Elected:
		return "elected"
	case Revoked:
		return "revoked"
	case HolderChanged:
		return "holder changed"
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// Event is a transition reported by a [Member] to Options.OnEvent.
//
// For each role, Elected and Revoked alternate: every Elected is followed
// by exactly one Revoked for the same token before the next Elected, and
// Revoked never comes without Elected. When Run returns, every Elected has
// had its Revoked. HolderChanged events interleave with them and report
// the view, which may lag this member's own transitions.
type Event struct {
	// Kind is what happened; it says which of the fields below are set.
	Kind EventKind
	// Role is the role the event is about (every kind).
	Role codec.Role
	// Member is this member, the one reporting (every kind).
	Member codec.MemberID
	// At is the local time of the transition (every kind): for Elected,
	// when the winning lease write began.
	At time.Time
	// Token is this member's token (Elected, Revoked).
	Token codec.Token
	// Fence is [Held].Fence (Elected, Revoked), or the holder's as the view
	// gives it (HolderChanged; 0 when vacant).
	Fence int64
	// Reason is why the role was revoked (Revoked).
	Reason Reason
	// Err is the cause of a revocation, when there is one (Revoked).
	Err error
	// Holder is the lease of the holder as the view shows it, nil when
	// the role is vacant (HolderChanged).
	Holder *codec.Lease
}

// String returns a one-line description for logs, such as
// "orders node-1: elected with token 7/3, fence 12" or "orders: vacant".
func (e Event) String() string {
	switch e.Kind {
	case Elected:
		return fmt.Sprintf("%s %s: elected with token %s, fence %d", e.Role, e.Member, e.Token, e.Fence)
	case Revoked:
		return fmt.Sprintf("%s %s: revoked (%s), token %s, fence %d", e.Role, e.Member, e.Reason, e.Token, e.Fence)
	case HolderChanged:
		if e.Holder == nil {
			return fmt.Sprintf("%s: vacant", e.Role)
		}
		return fmt.Sprintf("%s: held by %s with token %s", e.Role, e.Holder.Member, e.Holder.Token)
	}
	return e.Kind.String()
}
