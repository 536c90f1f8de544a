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
	// round found the role's token moved at its coordinator
	// (DescribeMany), the broker refused a lease rewrite
	// (fencing.ErrFenced), the transport forgot the token because a write
	// under it was fenced (fencing.ErrNotHeld, not a retirement), or the
	// view showed a lease under a newer epoch of the token. Also when the
	// round found the role's transactional id unknown to its coordinator
	// (expired under the holding): then nobody else holds the role, and
	// the member takes it back at once, under a new token. Also when
	// another process under the member id took the member session over
	// (see [ErrMemberInUse]).
	ReasonFenced Reason = "fenced"
	// ReasonLeaseLost: no renewal (a member session round that vouched
	// for the role, or a lease write) succeeded within RenewDeadline, so
	// the holder stopped on its own before anybody could take the role.
	// Also when the member session's incarnation ended under the holding
	// (a heartbeat committed after the member's own deadline, or the
	// session's producer id changed), and when the role's goroutine did
	// not check in with the session for TransactionTimeout +
	// RenewInterval (stuck: the heartbeats exclude the role).
	ReasonLeaseLost Reason = "lease lost"
	// ReasonResigned: the holder handed the role over ([Member.Resign]).
	ReasonResigned Reason = "resigned"
	// ReasonContextEnded: the Member's context ended; unless KeepOnExit
	// is set it resigned the role too.
	ReasonContextEnded Reason = "context ended"
	// ReasonWorkFailed: the work of [Member.Run] returned an error while
	// the role was held; the member resigned the role (Event.Err is the
	// error) and queues again after a campaign backoff that doubles with
	// each consecutive failure (from RenewInterval, at most
	// [MaxWorkBackoff]).
	ReasonWorkFailed Reason = "work failed"
	// ReasonTokenRetired: the transport retired the holding's token, so
	// nothing can be written under it any more: a write under it got no
	// definite answer (fencing.ErrUnknownOutcome), or the transport no
	// longer holds it (fencing.ErrNotHeld: it retired it after such an
	// answer or a fenced write through a Writer, Transact or a stream
	// sharing the transport). The holding ends at once (Event.Err is the
	// error of the lease rewrite, or the one the transport's
	// fencing.TokenChecker reported). While the view still shows this member's own lease
	// under that token, the member may challenge again at once: that
	// fences only its former self.
	ReasonTokenRetired Reason = "token retired"
	// ReasonDeregistered: while the member held the role, its
	// registration was removed by someone else (`krole resign --member`,
	// a tombstone on its key): it handed the role over as [Member.Resign]
	// does (a release), and registers again at the back, as a pruned
	// member does. It kept the holding renewed while its work stopped
	// (the member session's heartbeats went on vouching for the role),
	// and reports Revoked and releases once work has returned (see the
	// package documentation).
	ReasonDeregistered Reason = "deregistered"
)

// EventKind is the kind of an [Event].
type EventKind int

// The event kinds.
const (
	// Elected: this member took the role under Event.Token.
	Elected EventKind = iota + 1
	// Revoked: this member stopped holding the role (Event.Reason says
	// why, Event.Err gives the cause when there is one).
	Revoked
	// HolderChanged: the holder of the role, as this member judges it
	// from its view, changed (another member, another token, or vacant),
	// for observers. A lease counts until its span has passed since this
	// member first saw it (see the package doc). It does not fire on
	// renewals.
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
	// Fence is the holding's fencing number: [Held].Fence (Elected,
	// Revoked), or the holder's as the view gives it
	// (rolestate.State.Fence; HolderChanged, 0 when vacant).
	Fence int64
	// Reason is why the role was revoked (Revoked).
	Reason Reason
	// Err is the cause of a revocation when there is one: the fenced
	// write's error, or the error work returned (Revoked).
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
