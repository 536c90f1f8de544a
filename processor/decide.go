package processor

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/rolestate"
)

// Held is a role this member holds, as [Work] is given it. The token is
// the authority: pass it with every write, or check it with
// fencing.Transport.Describe.
type Held struct {
	// Role is the role held.
	Role codec.Role
	// Member is this member, the holder.
	Member codec.MemberID
	// Token is the holding's token, minted when the member took the role
	// and the same for the whole holding. Pass it to a fenced writer
	// (fencing.BrokerTransport's Writer or Transact, stream.Run).
	Token codec.Token
	// Fence is the holding's fencing number (see "The fencing number" in
	// the package doc), carried by every lease of the holding. Pass it to a
	// target outside Kafka that is to refuse earlier holdings.
	Fence int64
	// Lease is the lease written at election; a rewrite moves its
	// deadline, never its token.
	Lease codec.Lease
}

// ActionKind is what [Decide] says to do next.
type ActionKind int

// The actions.
const (
	// DoWait: nothing to do until Action.Until or a change of the role's
	// state, whichever comes first.
	DoWait ActionKind = iota
	// DoRegister: append this member's registration (rule 4).
	DoRegister
	// DoChallenge: AcquireEpoch, a lease under the new token, then
	// deregister Action.Prune (rule 9); only right after a DoConfirm.
	DoChallenge
	// DoRewriteLease: write the held lease again under the same token with
	// a new deadline (rule 2).
	DoRewriteLease
	// DoStepDown: stop holding at once, writing nothing (Action.Revoke).
	DoStepDown
	// DoResign: stop holding, write the release if held, and deregister.
	DoResign
	// DoConfirm: confirm the state (Source.Confirm), record it with
	// [Local.Confirmed] and decide again at the same time (rule 8).
	DoConfirm
	// DoLookAhead: look up whether the candidates ranked ahead are alive,
	// record it at the same time, and decide again (rule 7).
	DoLookAhead
)

var actionNames = [...]string{"wait", "register", "challenge", "rewrite lease", "step down", "resign", "confirm", "look ahead"}

// String returns the action's name as logs show it ("rewrite lease"), or
// "action(n)" for an unknown kind.
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
	// Deferring, on a DoWait of rule 7, is when the deference to a live
	// candidate ahead ends (Until may be earlier); zero otherwise.
	Deferring time.Time
	// Prune lists the candidates to deregister once the challenge wins
	// (DoChallenge, rule 9).
	Prune []codec.MemberID

	paused bool // a DoWait only because the member's campaigns are paused
	replan bool // a DoWait for the group's next plan
}

// noKey is a vacancy key that matches no vacancy.
const noKey = math.MinInt64

// Local is what one member knows of one role beyond the shared state.
// [NewLocal] returns it for a member that has done nothing yet,
// [Local.Observe] folds in an observation, and the Member records the
// outcome of its actions. A Local is a value: methods return a copy.
//
// Its instants are [mono]s, zero for none, read as times with at(now).
type Local struct {
	held      *Held // the role as this member holds it; nil when it does not
	writtenAt mono  // when the last successful write of the held lease began (its election's at first)

	registered   int64 // offset of its live registration as it knows it; -1 none
	registeredAt mono  // when it wrote registered; zero when adopted from the state
	deregistered int64 // highest offset of an own registration it deregistered; -1 none

	// The lease record last seen and when this member first saw it, on its
	// own clock: expiry counts from here.
	leaseOff  int64
	leaseSeen mono
	// Likewise the session record of the lease's holder (see beatSeenAt).
	beatOff  int64
	beatSeen mono

	vacantSince mono  // when it first observed the current vacancy
	vacantKey   int64 // the vacancy: offset of the lease that ended, -1 never held, noKey none
	// Rule 7: aheadLive, until when a candidate ranked ahead counts as
	// alive (zero: none); aheadWon, when one was last seen taking a role.
	aheadLive, aheadWon mono
	// aheadAt: the last look-up (rule 7).
	aheadAt mono

	// lostAt, lostOff: when this member was fenced or lost a challenge
	// race, and the lease offset its state showed then (rule 6); zero
	// when there is no such loss.
	lostAt  mono
	lostOff int64

	// retiredTok: the token rule 5 lets this member take its own lease
	// back under; nil otherwise.
	retiredTok *codec.Token

	confAt   mono  // when the last confirmation was taken; zero for none
	confOpen int64 // its Confirmed.OpenProducerID
	confOff  int64 // its Confirmed.OpenOffset
	// openSince: when a confirmation first showed the open transaction at
	// (confOpen, confOff), zero for none (rule 8).
	openSince mono

	retryAt  mono // when to try again after a failed call; zero after a success
	failures int  // consecutive failed calls

	campaignAt mono // no campaigning before this (work failed)

	resign Reason // a resignation asked for, or ""

	// ext: the instance and a group member's inputs; nil when neither.
	ext *localExt

	// What the Member learned outside the role's state (rule 0; see
	// runner.inputs): instanceAct is the instance rules' verdict when
	// they decide, nil otherwise; jitter spreads the roles waiting on
	// paused campaigns over [0, HeartbeatInterval).
	tokenErr    error
	instanceAct *Action
	pausedUntil mono
	jitter      time.Duration

	// The flags, together (a bool alone takes a word): rewriteNow,
	// rewrite the lease at once (Member.RewriteLease: the holder's value
	// changed); lookAhead, the source can tell whether the candidates
	// ahead are alive (rule 7); regHeld, the view has shown this member's
	// registration during the holding, so its removal is an operator's
	// step-down (rule 2); moved, readers moved between the last two
	// confirmations (rule 8); withdrawn, Member.Withdraw (rule 0).
	rewriteNow, lookAhead, regHeld, moved, withdrawn bool
}

// localExt is the part of a Local that few members need, behind a
// pointer that copies of the Local share: never changed in place, a
// change makes a new one.
type localExt struct {
	// instance is this process's instance (see InstanceRegisterer); ""
	// when its registrations carry none. Every role's Local of a member
	// starts with the member's one localExt holding it.
	instance string
	// A member of a [Group] (rule 0): group is set; order is the role's
	// candidates in the group's order, nil before the first plan or
	// when this member is not among the live members; handOver names the
	// member the plan gives the held role to; draining, Member.Drain.
	group    bool
	draining bool
	order    []codec.MemberID
	handOver codec.MemberID
}

// same reports whether x and y say the same (order's nil included).
func (x *localExt) same(y *localExt) bool {
	return x.instance == y.instance && x.group == y.group && x.draining == y.draining && x.handOver == y.handOver &&
		(x.order == nil) == (y.order == nil) && slices.Equal(x.order, y.order)
}

// withExt returns l with x, unless l's says the same already (then l's
// is kept, so that a refill that changes nothing allocates nothing).
func (l Local) withExt(x localExt) Local {
	if l.ext != nil && l.ext.same(&x) {
		return l
	}
	nx := x // made here, so that a refill that changes nothing allocates nothing
	l.ext = &nx
	return l
}

// instance is this process's instance, "" for none.
func (l Local) instance() string {
	if l.ext == nil {
		return ""
	}
	return l.ext.instance
}

// inGroup reports whether the member is a [Group]'s (rule 0).
func (l Local) inGroup() bool { return l.ext != nil && l.ext.group }

// NewLocal returns the Local of a member that has not done anything yet.
func NewLocal() Local {
	return Local{registered: -1, deregistered: -1, leaseOff: -1, beatOff: -1, vacantKey: noKey, lostOff: noKey, confOpen: -1, confOff: -1}
}

// mono is an instant on the member's clock as nanoseconds since monoEpoch,
// zero for none: Local keeps its instants so, in 8 bytes rather than a
// time.Time's 24. A system clock's reading keeps its monotonic reading
// (monoOf subtracts, at adds), and every real instant is after monoEpoch,
// so monos order as the times they stand for, none first as the zero
// time is.
type mono int64

// monoEpoch is a century before the process started, with its monotonic
// reading (times up to two centuries later fit a mono).
var monoEpoch = time.Now().Add(-100 * 365 * 24 * time.Hour)

// monoOf returns t as a mono; the zero time is none.
func monoOf(t time.Time) mono {
	if t.IsZero() {
		return 0
	}
	return mono(t.Sub(monoEpoch)) + 1
}

// at returns m as a time on now's clock (its monotonic reading and
// location), the zero time for none.
func (m mono) at(now time.Time) time.Time {
	if m == 0 {
		return time.Time{}
	}
	return now.Add(time.Duration(m - monoOf(now)))
}

// Held returns the role as this member holds it, nil when it does not.
func (l Local) Held() *Held { return l.held }

// Observe returns l updated with an observation of st at now (this
// member's clock): it adopts a registration of this member newer than it
// knew (a restart keeps its rank; with instances, only its own or one of
// none), and notes when it first saw the current lease record, session
// record and vacancy.
func (l Local) Observe(st rolestate.State, me codec.MemberID, now time.Time) Local {
	if c, ok := candidate(st, me); ok && c.Offset > l.deregistered && c.Offset > l.registered &&
		(l.instance() == "" || c.Instance == "" || c.Instance == l.instance()) {
		l.registered, l.registeredAt = c.Offset, 0
	}
	if st.LeaseOffset != l.leaseOff || l.leaseSeen == 0 {
		l.leaseOff, l.leaseSeen = st.LeaseOffset, monoOf(now)
	}
	if se := st.Session; se != nil && (se.Offset != l.beatOff || l.beatSeen == 0) {
		l.beatOff, l.beatSeen = se.Offset, monoOf(beatSeenAt(se, now))
	}
	if c, ok := candidate(st, me); l.held == nil {
		l.regHeld = false
	} else if ok && c.Offset == l.registered {
		l.regHeld = true
	}
	key, vacant, _ := l.vacancy(st, me, now)
	switch {
	case l.held != nil || !vacant:
		l.vacantSince, l.vacantKey, l.aheadLive, l.aheadWon = 0, noKey, 0, 0
	case l.vacantKey != key || l.vacantSince == 0:
		l.vacantSince, l.vacantKey, l.aheadLive, l.aheadWon = monoOf(now), key, 0, 0
	}
	return l
}

// withAheadLive records a look-up of rule 7 at now: a candidate ahead is
// alive until until, and one was last seen taking a role at won.
func (l Local) withAheadLive(now, until, won time.Time) Local {
	l.aheadAt, l.aheadLive, l.aheadWon = monoOf(now), monoOf(until), monoOf(won)
	return l
}

// Confirmed returns l with a confirmation taken at now: c is what
// [Source].Confirm returned (its State is not kept here; see rule 8).
func (l Local) Confirmed(now time.Time, c rolestate.Confirmed) Local {
	recent := l.confAt != 0 && now.Sub(l.confAt.at(now)) < maxConfirmGap
	switch {
	case c.OpenProducerID < 0:
		l.openSince, l.moved = 0, false
	case recent && l.confOpen == c.OpenProducerID && l.confOff == c.OpenOffset && l.openSince != 0:
		l.moved = false // the same transaction, still open: readers frozen since openSince
	default:
		// A transaction not seen open before. Readers moved since the
		// last confirmation if that one, taken recently, stopped at
		// another offset.
		l.moved = recent && l.confOpen >= 0 && l.confOff != c.OpenOffset
		l.openSince = monoOf(now)
	}
	l.confAt, l.confOpen, l.confOff = monoOf(now), c.OpenProducerID, c.OpenOffset
	return l
}

// maxConfirmGap is how far apart two confirmations may be for the later
// one to tell, by comparing the two, whether readers moved in between.
const maxConfirmGap = 5 * time.Second

// Decide is the succession rules: given the role as the view sees it (st),
// this member (me), what it knows locally (l, after [Local.Observe]), the
// local time and the settings, it says what to do next. It is pure. This
// comment is the one statement of the rules; elsewhere they are referred
// to by number.
//
// Expiry is judged on this member's clock, never the writer's: a lease
// record expires its span (rolestate.LeaseSpan, at most
// rolestate.MaxLeaseSpan) after this member first observed it, so a member
// that has just started waits one span at most. A lease that names its
// holder's member session also lives one heartbeat span after this member
// first saw the latest heartbeat of that incarnation vouching for the role
// (the source's time for it when it gives one), whichever is later; a
// session record that drops the role (an exclusion, or the session end)
// makes it vacant at once, as a release does. What l records of a
// confirmation, a registration's wait and a loss is stamped with the time
// the call that learned it returned, never earlier.
//
// The rules, in order:
//
//  0. What the Member learned outside the role's state comes first. A
//     holder whose token the transport can no longer write under steps
//     down (DoStepDown): retired after an unknown outcome (see rule 5), or
//     forgotten after a fenced write (fenced, rule 6). The verdict of the
//     rules of one process per member id (instance.go) is taken as it is.
//     A member withdrawn from the queue waits for Rejoin.
//  1. A resignation asked for: DoResign. In a group ([Group]), a holder
//     the plan gives the role to another hands it over (DoResign, handed
//     over); a member that does not hold it waits while it drains, or
//     until a plan counts it.
//  2. A holder steps down (DoStepDown) when the view shows a lease under
//     a newer epoch of its token: fenced. (Its local deadline is the
//     member session's: see below.) When its registration, seen during
//     this holding, is removed, it hands the role over (DoResign,
//     deregistered); one removed before the holding showed it (pruned by
//     a challenger that raced it) it registers again (DoRegister) and
//     keeps the role. It rewrites its
//     lease (DoRewriteLease) when asked (Member.RewriteLease) and once
//     [LeaseRewriteInterval] has passed since its last lease write (or at
//     the retry time after a failed rewrite); otherwise it waits, at most
//     HeartbeatInterval: the member session's heartbeats renew it.
//  3. After a failed call (a confirmation included) it waits for its retry
//     time, RetryBackoff doubling up to HeartbeatInterval; after its work
//     failed, for the campaign backoff.
//  4. A member that is not a candidate registers (DoRegister): at start,
//     when pruned (the state shows records newer than its registration but
//     not it), or when its registration has not shown in the view for a
//     LeaseDuration. It waits while a new registration is on its way.
//  5. While the lease is live (not a release, not dropped by its session,
//     not expired) it waits for its expiry. Exception: this member's own
//     lease under a token the transport retired (its holding ended on an
//     unknown outcome, or its challenge's lease write got no definite
//     answer), or under which the member session found the role's
//     transactional id expired, is vacant at once for it: challenging it
//     fences only its former self.
//  6. A member that was fenced, or lost a challenge race, does not
//     challenge again until the view shows a lease at a higher offset than
//     it showed then, or a LeaseDuration has passed (by then the winner's
//     lease write has shown or failed). The loss ends rule 5's exception:
//     taking that lease back would fence the winner.
//  7. The role is vacant. Candidates rank by registration offset (join
//     order) when the holder let it go (a release, or its session dropped
//     the role or ended), and by [SplitScore] when its lease ran out while
//     its session still claimed it; either way the member named in the
//     lease that ended ranks last. The candidate of effective rank r
//     challenges r*Stagger after it observed the vacancy (a member taking
//     back its own retired lease goes at once and prunes nobody). While a
//     candidate ranked ahead is alive (a heartbeat of its session seen
//     within two HeartbeatIntervals), it defers to it until one
//     LeaseDuration past its turn or past the last time it saw that
//     candidate take a role, whichever is later; a member whose source can
//     tell looks them up (DoLookAhead) when it would confirm. Why:
//     docs/DESIGN.md, "Failover of a member holding many roles".
//  8. Before it challenges it confirms (DoConfirm): only a confirmation
//     taken at now lets it challenge, and only if the rules above still say
//     so on the confirmed state (a lease record it shows first is observed
//     at now). When it shows the partition's readers held back by an open
//     transaction of a producer other than the one of the role's lease (not
//     a release), it confirms again a RetryBackoff later; if the same
//     transaction is still open at the same offset it does not challenge,
//     and confirms again every HeartbeatInterval. Readers that moved since
//     the previous confirmation are not held back; after a thaw the Member
//     counts the turns of rule 7 again from the thaw (docs/DESIGN.md,
//     "Frozen partitions: the held-back rule"). While the member's
//     campaigns are paused (a challenge timed out), it waits, registered.
//  9. DoChallenge prunes the candidates of lower effective rank, who did
//     not challenge in their turn, and the member whose lease expired (not
//     one that released: it deregistered itself).
//
// Outside Decide, the member session ends a holding (lease lost) once
// HeartbeatDeadline has passed, on its local clock, since its last
// renewal began (its election, its last lease write, or the round that
// last vouched for it), or when its round finds the role's token moved
// (rule 6, or rule 5 when no producer is left); the Member ends one when a
// lease rewrite is refused (rule 6) or its token retired (rule 5).
func Decide(st rolestate.State, me codec.MemberID, l Local, now time.Time, s Settings) Action {
	if l.held != nil && l.tokenErr != nil {
		if retired(l.tokenErr) {
			return Action{Kind: DoStepDown, Revoke: ReasonTokenRetired, Reason: "the transport retired the holding's token"}
		}
		return Action{Kind: DoStepDown, Revoke: ReasonFenced, Reason: "the transport forgot the holding's token: a write under it was fenced"}
	}
	if l.instanceAct != nil {
		return *l.instanceAct
	}
	if l.withdrawn && l.held == nil && l.resign == "" {
		return Action{Kind: DoWait, Until: now.Add(time.Hour), Reason: "withdrawn from the role: not campaigning until Rejoin"}
	}
	if l.resign != "" {
		return Action{Kind: DoResign, Revoke: l.resign, Reason: string(l.resign)}
	}
	if l.inGroup() && l.held != nil && l.ext.handOver != "" {
		return Action{Kind: DoResign, Revoke: ReasonHandedOver,
			Reason: fmt.Sprintf("the group's assignment gives the role to %s: handing it over", l.ext.handOver)}
	}
	if l.inGroup() && l.held == nil {
		switch {
		case l.ext.draining:
			return Action{Kind: DoWait, Until: now.Add(time.Hour), Reason: "draining: not campaigning"}
		case l.ext.order == nil:
			return Action{Kind: DoWait, Until: now.Add(s.HeartbeatInterval), replan: true,
				Reason: "not among the group's live members in the view yet: waiting for a plan that counts it"}
		}
	}
	if h := l.held; h != nil {
		if st.Lease != nil && st.Lease.Token.Newer(h.Token) {
			return Action{Kind: DoStepDown, Revoke: ReasonFenced,
				Reason: fmt.Sprintf("the view shows %s holding under newer token %s (ours %s)", st.Lease.Member, st.Lease.Token, h.Token)}
		}
		if status, _, why := l.registration(st, me, now, s); status == regMissing && l.registered >= 0 {
			if l.regHeld {
				return Action{Kind: DoResign, Revoke: ReasonDeregistered,
					Reason: "holding, but our registration was removed (" + why + "): handing over"}
			}
			// Removed before this holding showed it (rule 2).
			return Action{Kind: DoRegister,
				Reason: "holding, but not a candidate since before this holding (" + why + "): registering again"}
		}
		retryAt := l.retryAt.at(now)
		if l.rewriteNow && !now.Before(retryAt) {
			return Action{Kind: DoRewriteLease, Reason: "asked to rewrite the lease at once (the holder's value changed)"}
		}
		rewrite := l.writtenAt.at(now).Add(LeaseRewriteInterval)
		if retryAt.After(rewrite) {
			rewrite = retryAt
		}
		if !now.Before(rewrite) {
			return Action{Kind: DoRewriteLease, Reason: "the lease rewrite interval passed (it keeps the role's transactional id from expiring)"}
		}
		// The session's heartbeats renew the holding; the role checks in at
		// least every HeartbeatInterval, or the session stops vouching.
		next := now.Add(s.HeartbeatInterval)
		if l.rewriteNow && retryAt.Before(next) {
			next = retryAt
		}
		return Action{Kind: DoWait, Until: earliest(next, rewrite), Reason: "holding; renewed by the member session"}
	}
	if retryAt := l.retryAt.at(now); now.Before(retryAt) {
		return Action{Kind: DoWait, Until: retryAt, Reason: fmt.Sprintf("backing off after %d failures", l.failures)}
	}
	if campaignAt := l.campaignAt.at(now); now.Before(campaignAt) {
		return Action{Kind: DoWait, Until: campaignAt, Reason: "work failed; backing off before campaigning again"}
	}
	if !l.inGroup() {
		switch status, until, why := l.registration(st, me, now, s); status {
		case regMissing:
			return Action{Kind: DoRegister, Reason: why}
		case regPending:
			return Action{Kind: DoWait, Until: until, Reason: why}
		}
	}
	_, vacant, expiry := l.vacancy(st, me, now)
	if !vacant {
		return Action{Kind: DoWait, Until: expiry,
			Reason: fmt.Sprintf("%s holds the role under token %s; its lease expires in %v on this member's clock",
				st.Lease.Member, st.Lease.Token, expiry.Sub(now))}
	}
	own := l.ownRetired(st, me)
	if !own && l.lostAt != 0 && st.LeaseOffset <= l.lostOff {
		if until := l.lostAt.at(now).Add(s.LeaseDuration); now.Before(until) {
			return Action{Kind: DoWait, Until: until,
				Reason: fmt.Sprintf("fenced or lost a challenge; waiting for a lease newer than offset %d", l.lostOff)}
		}
	}
	since := l.vacantSince.at(now)
	if since.IsZero() {
		since = now
	}
	if l.inGroup() && !own && st.Lease != nil && len(l.ext.order) > 0 && l.ext.order[0] == st.Lease.Member {
		if until := since.Add(s.HeartbeatInterval); now.Before(until) {
			return Action{Kind: DoWait, Until: until, replan: true,
				Reason: "vacant; the group's plan still names the member that let it go: waiting for the next plan"}
		}
	}
	var ahead, prune []codec.MemberID
	if !own {
		ahead, prune = l.turn(st, me)
	}
	rank := len(ahead)
	myTurn := since.Add(time.Duration(rank) * s.Stagger)
	if now.Before(myTurn) {
		return Action{Kind: DoWait, Until: myTurn, Reason: fmt.Sprintf("vacant; rank %d waits its turn", rank)}
	}
	if aheadLive := l.aheadLive.at(now); rank > 0 && now.Before(aheadLive) {
		from := myTurn
		if won := l.aheadWon.at(now); won.After(from) {
			from = won
		}
		if at := earliest(aheadLive, from.Add(s.LeaseDuration)); now.Before(at) {
			return Action{Kind: DoWait, Until: at, Deferring: from.Add(s.LeaseDuration),
				Reason: fmt.Sprintf("vacant; rank %d defers to a live candidate ranked ahead of it while it takes roles, until %v at most", rank, from.Add(s.LeaseDuration))}
		}
	}
	confAt := l.confAt.at(now)
	if fresh := !confAt.IsZero() && !now.Before(confAt) && now.Before(confAt.Add(s.HeartbeatInterval)); fresh && l.heldBack(st) {
		switch until := confAt.Add(s.RetryBackoff); {
		case l.openSince != l.confAt:
			return Action{Kind: DoWait, Until: confAt.Add(s.HeartbeatInterval),
				Reason: fmt.Sprintf("looks vacant, but readers of the partition are held back by an open transaction of producer %d since %v; not judging expiry on frozen time", l.confOpen, l.openSince.at(now))}
		case now.Before(until):
			// First seen: maybe a transaction in flight for
			// milliseconds. Confirm again shortly (rule 8).
			return Action{Kind: DoWait, Until: until,
				Reason: fmt.Sprintf("looks vacant, but an open transaction of producer %d holds readers of the partition back; confirming again to see whether it ends", l.confOpen)}
		}
	}
	if !confAt.Equal(now) {
		if rank > 0 && l.lookAhead && !l.aheadAt.at(now).Equal(now) {
			return Action{Kind: DoLookAhead, Reason: fmt.Sprintf("vacant; rank %d looks up the candidates ahead before it confirms", rank)}
		}
		if now.Before(l.pausedUntil.at(now)) {
			return Action{Kind: DoWait, Until: now.Add(s.HeartbeatInterval/2 + l.jitter), paused: true,
				Reason: "campaigns paused after a challenge timed out: registered, not campaigning"}
		}
		return Action{Kind: DoConfirm, Reason: fmt.Sprintf("vacant; rank %d confirms the state before it challenges", rank)}
	}
	if own {
		return Action{Kind: DoChallenge, Reason: fmt.Sprintf("this member's own lease, under token %s, which nothing writes under any more (retired, or its transactional id expired); taking the role back", st.Lease.Token)}
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
	if c, ok := candidate(st, me); ok && c.Offset == l.registered {
		return regVisible, time.Time{}, ""
	}
	switch {
	case l.registered < 0:
		return regMissing, time.Time{}, "not registered"
	case maxOffset(st) > l.registered:
		return regMissing, time.Time{}, fmt.Sprintf("registration at offset %d was pruned", l.registered)
	case l.registeredAt != 0 && now.Before(l.registeredAt.at(now).Add(s.LeaseDuration)):
		return regPending, l.registeredAt.at(now).Add(s.LeaseDuration), fmt.Sprintf("registration at offset %d not in the view yet", l.registered)
	}
	return regMissing, time.Time{}, fmt.Sprintf("registration at offset %d never showed in the view", l.registered)
}

// vacancy reports whether the role is vacant at now for this member (rule
// 5) and which vacancy: the offset of the lease that ended, or -1. When it
// is not, expiry is when the lease expires on this member's clock.
func (l Local) vacancy(st rolestate.State, me codec.MemberID, now time.Time) (key int64, vacant bool, expiry time.Time) {
	if st.Lease == nil {
		return -1, true, time.Time{}
	}
	if st.Lease.Released() || l.ownRetired(st, me) {
		return st.LeaseOffset, true, time.Time{}
	}
	seen := l.leaseSeen.at(now)
	if l.leaseOff != st.LeaseOffset || seen.IsZero() {
		seen = now // not observed before: it counts from now
	}
	expiry = seen.Add(rolestate.LeaseSpan(*st.Lease))
	switch st.SessionVouch() {
	case rolestate.Dropped:
		// The holder stopped acting on the role before it wrote that.
		return st.LeaseOffset, true, time.Time{}
	case rolestate.Vouched:
		beat := l.beatSeen.at(now)
		if l.beatOff != st.Session.Offset || beat.IsZero() {
			beat = beatSeenAt(st.Session, now)
		}
		if e := beat.Add(rolestate.HeartbeatSpan(st.Session.Heartbeat)); e.After(expiry) {
			expiry = e
		}
	}
	if !now.Before(expiry) {
		return st.LeaseOffset, true, time.Time{}
	}
	return noKey, false, expiry
}

// holder returns the lease of st and true when it holds at now as this
// member judges it.
func (l Local) holder(st rolestate.State, me codec.MemberID, now time.Time) (codec.Lease, bool) {
	if _, vacant, _ := l.vacancy(st, me, now); vacant {
		return codec.Lease{}, false
	}
	return *st.Lease, true
}

// ownRetired reports whether st's lease is this member's, under the token
// the transport retired.
func (l Local) ownRetired(st rolestate.State, me codec.MemberID) bool {
	return l.retiredTok != nil && st.Lease != nil && st.Lease.Member == me && st.Lease.Token == *l.retiredTok &&
		!st.Lease.Released()
}

// heldBack reports whether the last confirmation showed the partition's
// readers held back by an open transaction behind which st's lease may
// have been renewed (rule 8).
func (l Local) heldBack(st rolestate.State) bool {
	if l.confOpen < 0 || l.moved || st.Lease == nil || st.Lease.Released() {
		return false
	}
	return st.Lease.Token.ProducerID != l.confOpen
}

// turn returns the candidates ranked ahead of me in a vacancy (rule 7)
// and the candidates its challenge prunes (rule 9).
func (l Local) turn(st rolestate.State, me codec.MemberID) (ahead, prune []codec.MemberID) {
	var last codec.MemberID
	expired := false
	if st.Lease != nil {
		last, expired = st.Lease.Member, !st.Lease.Released()
	}
	if l.inGroup() {
		// The group's order; nobody registered, so nobody to prune.
		for _, m := range l.ext.order {
			if m == me && me != last {
				break
			}
			if m != me && m != last {
				ahead = append(ahead, m)
			}
		}
		return ahead, nil
	}
	split := expired && st.SessionVouch() != rolestate.Dropped
	mine, _ := candidate(st, me)
	var myScore uint64
	if split {
		myScore = SplitScore(st.Role, me)
	}
	before := func(c rolestate.Candidate) bool {
		if !split {
			return c.Offset < mine.Offset
		}
		s := SplitScore(st.Role, c.Member)
		return s > myScore || s == myScore && c.Offset < mine.Offset
	}
	for _, c := range st.Candidates {
		if c.Member == me {
			continue
		}
		if me == last || (c.Member != last && before(c)) {
			ahead = append(ahead, c.Member)
			prune = append(prune, c.Member)
		} else if expired && c.Member == last {
			prune = append(prune, c.Member)
		}
	}
	return ahead, prune
}

// SplitScore is m's rendezvous score for role, by which candidates rank in
// a vacancy left by a holder that died (rule 7 of [Decide]), highest
// first. Every member computes the same order from the names alone; it
// is the score a group's assignment ranks members by ([group.Score]).
func SplitScore(role codec.Role, m codec.MemberID) uint64 { return group.Score(role, m) }

func candidate(st rolestate.State, me codec.MemberID) (rolestate.Candidate, bool) {
	if i := st.Rank(me); i >= 0 {
		return st.Candidates[i], true
	}
	return rolestate.Candidate{}, false
}

func maxOffset(st rolestate.State) int64 {
	m := max(st.LeaseOffset, st.LastOffset)
	for _, c := range st.Candidates {
		m = max(m, c.Offset)
	}
	return m
}

func earliest(t time.Time, more ...time.Time) time.Time {
	for _, u := range more {
		if u.Before(t) {
			t = u
		}
	}
	return t
}

// LeaseRewriteInterval is how often a holder writes its lease again
// between heartbeats, so that the coordinator does not expire the role's
// transactional id (transactional.id.expiration.ms, 7 days by default),
// whose epoch fences a deposed holder's writes.
const LeaseRewriteInterval = time.Hour

// beatSeenAt is when a member observing se at now counts it from: the
// source's time for it when plausible on this clock (not after now, within
// MaxLeaseSpan of it; the view stamps records as it applies them), else now.
func beatSeenAt(se *rolestate.SessionSeen, now time.Time) time.Time {
	if at := se.SeenAt; !at.IsZero() && !at.After(now) && now.Sub(at) < rolestate.MaxLeaseSpan {
		return at
	}
	return now
}
