package processor

import (
	"fmt"
	"github.com/krabka/krole/rolestate"
	"math"
	"time"

	"github.com/krabka/krole/codec"
)

// Held is a role this member holds: what work is given (see [Member.Run]).
// The token is the authority: a fenced writer passes it with every write,
// and a third party checks it with fencing.Transport.Describe.
type Held struct {
	// Role is the role held.
	Role codec.Role
	// Member is this member, the holder.
	Member codec.MemberID
	// Token is the token this member holds the role under, minted by the
	// cluster when the member took the role. It is the same for the whole
	// holding (renewals keep it). Pass it to fencing.BrokerTransport's
	// Writer or Transact, or to processor/stream.Run, to have writes
	// fenced; a write under it fails once a later member has taken the
	// role.
	Token codec.Token
	// Lease is the lease written when this member was elected. Renewals
	// move its deadline; the token stays.
	Lease codec.Lease
}

// ActionKind is what [Decide] says to do next.
type ActionKind int

// The actions.
const (
	// DoWait: nothing to do until Action.Until, or until the role's state
	// changes, whichever comes first.
	DoWait ActionKind = iota
	// DoRegister: append this member's registration (it has none, or it
	// was pruned).
	DoRegister
	// DoChallenge: take the role: AcquireEpoch, then WriteLease of a new
	// lease under the new token; once that succeeds, deregister
	// Action.Prune.
	DoChallenge
	// DoRenew: write the held lease again under the same token with a new
	// deadline.
	DoRenew
	// DoStepDown: stop acting as holder at once, writing nothing
	// (Action.Revoke says why).
	DoStepDown
	// DoResign: stop acting as holder, write the release lease (if the
	// role is held) and deregister this member.
	DoResign
)

var actionNames = [...]string{"wait", "register", "challenge", "renew", "step down", "resign"}

// String returns the action's name as logs show it: "wait", "register",
// "challenge", "renew", "step down", "resign", or "action(n)" for an
// unknown kind.
func (k ActionKind) String() string {
	if k >= 0 && int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", int(k))
}

// Action is the outcome of [Decide].
type Action struct {
	// Kind is what to do.
	Kind ActionKind
	// Until is when to decide again (DoWait only).
	Until time.Time
	// Reason says why, for logs.
	Reason string
	// Revoke is the revocation reason (DoStepDown, DoResign).
	Revoke Reason
	// Prune lists the candidates to deregister once a challenge wins
	// (DoChallenge only): those ranked ahead of this member, who did not
	// challenge in their turn, and the member whose lease expired.
	Prune []codec.MemberID
}

// noKey is a vacancy key that matches no vacancy.
const noKey = math.MinInt64

// Local is what a member knows of a role beyond the shared state: what it
// holds, its own registration, what it has observed and what it has
// tried. [NewLocal] returns the state of a member that has done nothing
// yet; [Local.Observe] folds in an observation of the role; the Member
// updates the rest as it performs actions.
type Local struct {
	// Held is the role as this member holds it; nil when it does not.
	Held *Held
	// RenewedAt is when the last successful write of the held lease
	// began, on the local clock.
	RenewedAt time.Time

	// Registered is the offset of this member's live registration as it
	// knows it: written by itself or seen in the state; -1 for none.
	Registered int64
	// RegisteredAt is when this member wrote Registered (local clock);
	// zero when it was adopted from the state.
	RegisteredAt time.Time
	// Retired is the highest offset of a registration of this member that
	// it has deregistered itself; the state may still show it for a
	// while. -1 for none.
	Retired int64

	// VacantSince is when this member first observed the current vacancy
	// (local clock); zero while the role is held (or this member holds
	// it).
	VacantSince time.Time
	// VacantKey names the vacancy VacantSince belongs to: the offset of
	// the lease that ended, or -1 when the role never had a lease;
	// math.MinInt64 (no vacancy) while the role is held. A new key
	// restarts the count of VacantSince.
	VacantKey int64

	// LostKey is the vacancy (a VacantKey) in which this member lost a
	// challenge race (its lease write was fenced): it does not challenge
	// the same vacancy again for a LeaseDuration after LostAt, so the
	// winner's lease has time to show instead of being fenced in turn.
	// math.MinInt64 when it has lost none.
	LostKey int64
	// LostAt is when this member lost the race of LostKey (local clock).
	LostAt time.Time

	// RetryAt is when to try again after a failed call (local clock);
	// zero when the last call succeeded.
	RetryAt time.Time
	// Failures counts the consecutive failed calls to the transport or
	// the source; 0 after a success. The wait before RetryAt doubles
	// with each, from RetryBackoff up to RenewInterval.
	Failures int

	// Resign, when set, asks to resign (or, leaving, to deregister) for
	// that reason.
	Resign Reason
}

// NewLocal returns the Local of a member that has not done anything yet.
func NewLocal() Local {
	return Local{Registered: -1, Retired: -1, VacantKey: noKey, LostKey: noKey}
}

// Observe returns l updated with an observation of st at now: it adopts
// this member's registration when the state shows one newer than it knew
// (a restart under the same member id keeps its rank), and records when
// the current vacancy was first seen.
func (l Local) Observe(st rolestate.State, me codec.MemberID, now time.Time) Local {
	if c, ok := candidate(st, me); ok && c.Offset > l.Retired && c.Offset > l.Registered {
		l.Registered, l.RegisteredAt = c.Offset, time.Time{}
	}
	key, vacant := vacancy(st, now.UnixMilli())
	switch {
	case l.Held != nil || !vacant:
		l.VacantSince, l.VacantKey = time.Time{}, noKey
	case l.VacantKey != key || l.VacantSince.IsZero():
		l.VacantSince, l.VacantKey = now, key
	}
	return l
}

// Decide is the succession rules: given the role as the view sees it (st),
// this member (me), what it knows locally (l, after [Local.Observe]), the
// local time and the settings, it says what to do next. It is pure.
//
// The rules, in order:
//
//  1. A resignation asked for (l.Resign) comes first: DoResign.
//  2. A holder stops (DoStepDown, lease lost) once RenewDeadline has passed
//     since its last successful write began, on its local clock. It stops
//     (DoStepDown, fenced) when the view shows a lease under a newer epoch
//     of its token. It renews every RenewInterval (or at RetryAt after a
//     failure), and otherwise waits.
//  3. A member that is not a candidate registers (DoRegister): at start,
//     when it was pruned (the state shows records newer than its
//     registration but not the registration), or when its registration
//     has not shown in the view for a LeaseDuration. It waits while its
//     new registration is on its way to the view.
//  4. After a failed call it waits until RetryAt.
//  5. While the lease is live (neither expired at now in wall-clock
//     milliseconds nor a release) it waits until the lease's deadline.
//  6. The role is vacant. Candidates rank by registration offset, except
//     that the member named in the lease that ended ranks last (it let
//     the lease go). The candidate of effective rank r challenges once
//     r*Stagger has passed since it observed the vacancy (l.VacantSince).
//     The challenge prunes the candidates of lower effective rank, who did
//     not challenge in their turn, and the member whose lease expired
//     (not one that released: it deregistered itself).
func Decide(st rolestate.State, me codec.MemberID, l Local, now time.Time, s Settings) Action {
	nowMS := now.UnixMilli()
	if l.Resign != "" {
		return Action{Kind: DoResign, Revoke: l.Resign, Reason: string(l.Resign)}
	}
	if h := l.Held; h != nil {
		expiry := l.RenewedAt.Add(s.RenewDeadline)
		if !now.Before(expiry) {
			return Action{Kind: DoStepDown, Revoke: ReasonLeaseLost,
				Reason: fmt.Sprintf("no successful renewal within the renew deadline %v", s.RenewDeadline)}
		}
		if st.Lease != nil && st.Lease.Token.Newer(h.Token) {
			return Action{Kind: DoStepDown, Revoke: ReasonFenced,
				Reason: fmt.Sprintf("the view shows %s holding under newer token %s (ours %s)", st.Lease.Member, st.Lease.Token, h.Token)}
		}
		next := l.RenewedAt.Add(s.RenewInterval)
		if l.RetryAt.After(next) {
			next = l.RetryAt
		}
		if !now.Before(next) {
			return Action{Kind: DoRenew, Reason: "renew interval passed"}
		}
		return Action{Kind: DoWait, Until: earliest(next, expiry), Reason: "holding; next renewal"}
	}
	if now.Before(l.RetryAt) {
		return Action{Kind: DoWait, Until: l.RetryAt, Reason: fmt.Sprintf("backing off after %d failures", l.Failures)}
	}
	switch status, until, why := l.registration(st, me, now, s); status {
	case regMissing:
		return Action{Kind: DoRegister, Reason: why}
	case regPending:
		return Action{Kind: DoWait, Until: until, Reason: why}
	}
	key, vacant := vacancy(st, nowMS)
	if !vacant {
		left := time.Duration(st.Lease.Deadline-nowMS) * time.Millisecond
		return Action{Kind: DoWait, Until: now.Add(left),
			Reason: fmt.Sprintf("%s holds the role under token %s until its deadline", st.Lease.Member, st.Lease.Token)}
	}
	if key == l.LostKey {
		if until := l.LostAt.Add(s.LeaseDuration); now.Before(until) {
			return Action{Kind: DoWait, Until: until, Reason: "lost a challenge race; waiting for the winner's lease"}
		}
	}
	rank, prune := turn(st, me)
	since := l.VacantSince
	if since.IsZero() {
		since = now
	}
	if at := since.Add(time.Duration(rank) * s.Stagger); now.Before(at) {
		return Action{Kind: DoWait, Until: at, Reason: fmt.Sprintf("vacant; rank %d waits its turn", rank)}
	}
	return Action{Kind: DoChallenge, Prune: prune, Reason: fmt.Sprintf("vacant; rank %d challenges", rank)}
}

type regStatus int

const (
	regVisible regStatus = iota
	regPending
	regMissing
)

// registration says whether this member is a candidate in st, on its way
// to becoming one (until when), or must register (and why).
func (l Local) registration(st rolestate.State, me codec.MemberID, now time.Time, s Settings) (regStatus, time.Time, string) {
	if c, ok := candidate(st, me); ok && c.Offset == l.Registered {
		return regVisible, time.Time{}, ""
	}
	switch {
	case l.Registered < 0:
		return regMissing, time.Time{}, "not registered"
	case maxOffset(st) > l.Registered:
		return regMissing, time.Time{}, fmt.Sprintf("registration at offset %d was pruned", l.Registered)
	case !l.RegisteredAt.IsZero() && now.Before(l.RegisteredAt.Add(s.LeaseDuration)):
		return regPending, l.RegisteredAt.Add(s.LeaseDuration), fmt.Sprintf("registration at offset %d not in the view yet", l.Registered)
	}
	return regMissing, time.Time{}, fmt.Sprintf("registration at offset %d never showed in the view", l.Registered)
}

// vacancy reports whether the role is vacant at nowMS (no lease, a
// release, or an expired lease) and which vacancy: the offset of the lease
// that ended, or -1.
func vacancy(st rolestate.State, nowMS int64) (key int64, vacant bool) {
	if st.Lease == nil {
		return -1, true
	}
	if st.Lease.Released() || st.Lease.Expired(nowMS) {
		return st.LeaseOffset, true
	}
	return noKey, false
}

// turn returns me's effective rank in a vacancy (the member named in the
// lease that ended ranks last) and the candidates its challenge prunes.
func turn(st rolestate.State, me codec.MemberID) (rank int, prune []codec.MemberID) {
	var last codec.MemberID
	expired := false
	if st.Lease != nil {
		last, expired = st.Lease.Member, !st.Lease.Released()
	}
	mine, _ := candidate(st, me)
	for _, c := range st.Candidates {
		if c.Member == me {
			continue
		}
		if me == last || (c.Member != last && c.Offset < mine.Offset) {
			rank++
			prune = append(prune, c.Member)
		} else if expired && c.Member == last {
			prune = append(prune, c.Member)
		}
	}
	return rank, prune
}

func candidate(st rolestate.State, me codec.MemberID) (rolestate.Candidate, bool) {
	if i := st.Rank(me); i >= 0 {
		return st.Candidates[i], true
	}
	return rolestate.Candidate{}, false
}

func maxOffset(st rolestate.State) int64 {
	m := st.LeaseOffset
	for _, c := range st.Candidates {
		m = max(m, c.Offset)
	}
	return m
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
