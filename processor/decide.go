package processor

import (
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
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
	// Fence is the holding's fencing number: the offset of the lease
	// record the member's challenge wrote (see "The fencing number" in
	// the package documentation). It is strictly greater than the number
	// of every earlier holding of the role, and the same for the whole
	// holding: every later lease of the holding carries it
	// (codec.Lease.Fence). Pass it, with the token, to a target outside
	// Kafka that is to refuse writes of earlier holdings.
	Fence int64
	// Lease is the lease written when this member was elected. The
	// member session's heartbeats renew the holding without writing it
	// again; a lease rewrite (Member.RenewNow, every
	// LeaseRewriteInterval) moves its deadline; the token stays.
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
	// Action.Prune. Decide says it only right after a confirmation (see
	// DoConfirm) taken at the same time.
	DoChallenge
	// DoRenew: write the held lease again under the same token with a new
	// deadline (a lease rewrite: asked for by Member.RenewNow, or every
	// [LeaseRewriteInterval]; the member session's heartbeats renew the
	// holding between rewrites).
	DoRenew
	// DoStepDown: stop acting as holder at once, writing nothing
	// (Action.Revoke says why).
	DoStepDown
	// DoResign: stop acting as holder, write the release lease (if the
	// role is held) and deregister this member.
	DoResign
	// DoConfirm: the rules say challenge, on the state the member has;
	// confirm that state first (Source.Confirm), record the confirmation
	// with [Local.Confirmed] and decide again at the same time, on the
	// confirmed state.
	DoConfirm
)

var actionNames = [...]string{"wait", "register", "challenge", "renew", "step down", "resign", "confirm"}

// String returns the action's name as logs show it: "wait", "register",
// "challenge", "renew", "step down", "resign", "confirm", or "action(n)"
// for an unknown kind.
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
	// candidate ahead ends unless that candidate stops heartbeating
	// first (Until is the earlier of the two); zero otherwise.
	Deferring time.Time
	// Prune lists the candidates to deregister once a challenge wins
	// (DoChallenge only): those ranked ahead of this member, who did not
	// challenge in their turn, and the member whose lease expired.
	Prune []codec.MemberID
}

// noKey is a vacancy key that matches no vacancy.
const noKey = math.MinInt64

// Local is what one member knows of one role beyond the shared state: what
// it holds, its own registration, when it observed the role's lease, what
// it has tried and what it confirmed. Its bookkeeping is unexported:
// [NewLocal] returns the state of a member that has done nothing yet,
// [Local.Observe] folds in an observation of the role, and the Member
// records the outcome of its actions. A Local is a value: the methods
// return an updated copy.
type Local struct {
	held      *Held     // the role as this member holds it; nil when it does not
	renewedAt time.Time // the holding's local deadline is renewedAt + RenewDeadline: the start of its election, of its last lease write, or of the last member-session round that vouched for it
	writtenAt time.Time // when the last successful write of the held lease began
	renewNow  bool      // rewrite the lease at once (Member.RenewNow: the holder's value changed)

	registered   int64     // offset of its live registration as it knows it; -1 none
	registeredAt time.Time // when it wrote registered; zero when adopted from the state
	retired      int64     // highest offset of an own registration it deregistered; -1 none

	// The lease as observed: the offset of the lease record last seen
	// (a renewal is a new record, at a new offset) and when this member
	// first saw that record, on its own clock. Expiry is judged from
	// here, never from the writer's wall clock.
	leaseOff  int64
	leaseSeen time.Time
	// The session record of the lease's holder as observed: its offset
	// in the session's partition and when this member first saw it (or
	// the source saw it, when the source says, on the same clock).
	beatOff  int64
	beatSeen time.Time

	vacantSince time.Time // when it first observed the current vacancy
	vacantKey   int64     // the vacancy: offset of the lease that ended, -1 never held, noKey none
	// aheadLive: until when a candidate ranked ahead of this member in
	// the current vacancy counts as alive (two RenewIntervals after its
	// member session's latest heartbeat was seen); zero when none does.
	// aheadWon: when this member last saw a live candidate ahead take a
	// role (any role); zero for never. Rule 7 defers to it.
	aheadLive, aheadWon time.Time

	// lostAt is when this member was fenced or lost a challenge race;
	// lostOff is the offset of the lease its state showed then. Until a
	// lease at a higher offset shows (or a LeaseDuration has passed) it
	// does not challenge again. lostAt is zero when there is no such loss.
	lostAt  time.Time
	lostOff int64

	// retiredTok is the token of this member's last holding, or of its
	// last challenge's lease write, when the transport retired it (a
	// write under it got ErrUnknownOutcome or ErrNotHeld), or of its last
	// holding when the member session found the role's transactional id
	// unknown to its coordinator (expired: nobody holds the role); nil
	// otherwise.
	retiredTok *codec.Token

	// regHeld: while this member holds the role, its view has shown its
	// registration. Only a registration removed after that is an
	// operator's step-down (rule 2); one removed before (by a challenger
	// that raced this member's challenge and pruned it) is registered
	// again.
	regHeld bool

	confAt   time.Time // when the last confirmation was taken; zero for none
	confOpen int64     // its Confirmed.OpenProducerID
	confOff  int64     // its Confirmed.OpenOffset
	// openSince is when a confirmation first showed the open transaction
	// at (confOpen, confOff); zero when the last showed none. moved: the
	// confirmation before the last, taken less than a RenewInterval
	// earlier, showed readers at another offset, so they are not frozen.
	openSince time.Time
	moved     bool

	retryAt  time.Time // when to try again after a failed call; zero after a success
	failures int       // consecutive failed calls

	campaignAt time.Time // no campaigning before this (work failed)

	resign Reason // a resignation asked for, or ""

	// instance is this process's instance (see InstanceRegisterer); ""
	// when its registrations carry none.
	instance string
}

// withInstance returns l for a member whose registrations carry instance:
// it adopts only registrations of its id that carry instance or none.
func (l Local) withInstance(instance string) Local {
	l.instance = instance
	return l
}

// NewLocal returns the Local of a member that has not done anything yet.
func NewLocal() Local {
	return Local{registered: -1, retired: -1, leaseOff: -1, beatOff: -1, vacantKey: noKey, lostOff: noKey, confOpen: -1, confOff: -1}
}

// Held returns the role as this member holds it, nil when it does not.
func (l Local) Held() *Held { return l.held }

// Observe returns l updated with an observation of st at now (this
// member's clock): it adopts this member's registration when the state
// shows one newer than it knew (a restart under the same member id keeps
// its rank; with instances, only a registration written by this process
// or by a writer of none: see "One process per member id"), notes when it first saw the role's current lease record, and
// when it first saw the current vacancy.
func (l Local) Observe(st rolestate.State, me codec.MemberID, now time.Time) Local {
	if c, ok := candidate(st, me); ok && c.Offset > l.retired && c.Offset > l.registered &&
		(l.instance == "" || c.Instance == "" || c.Instance == l.instance) {
		l.registered, l.registeredAt = c.Offset, time.Time{}
	}
	if st.LeaseOffset != l.leaseOff || l.leaseSeen.IsZero() {
		l.leaseOff, l.leaseSeen = st.LeaseOffset, now
	}
	if se := st.Session; se != nil && (se.Offset != l.beatOff || l.beatSeen.IsZero()) {
		l.beatOff, l.beatSeen = se.Offset, beatSeenAt(se, now)
	}
	if c, ok := candidate(st, me); l.held == nil {
		l.regHeld = false
	} else if ok && c.Offset == l.registered {
		l.regHeld = true
	}
	key, vacant, _ := l.vacancy(st, me, now)
	switch {
	case l.held != nil || !vacant:
		l.vacantSince, l.vacantKey, l.aheadLive, l.aheadWon = time.Time{}, noKey, time.Time{}, time.Time{}
	case l.vacantKey != key || l.vacantSince.IsZero():
		l.vacantSince, l.vacantKey, l.aheadLive, l.aheadWon = now, key, time.Time{}, time.Time{}
	}
	return l
}

// withAheadLive returns l knowing that a candidate ranked ahead of this
// member in the current vacancy is alive until until (zero: none is
// known to be), and that such a candidate was last seen taking a role at
// won (zero: never). The Member looks them up when rule 7 would have it
// campaign (see [Decide]).
func (l Local) withAheadLive(until, won time.Time) Local {
	l.aheadLive, l.aheadWon = until, won
	return l
}

// Confirmed returns l with a confirmation of the role's state taken at
// now: c is what [Source].Confirm returned (its State is not kept here).
// [Decide] challenges only on a confirmation taken at the time it is
// given.
func (l Local) Confirmed(now time.Time, c rolestate.Confirmed) Local {
	recent := !l.confAt.IsZero() && now.Sub(l.confAt) < maxConfirmGap
	switch {
	case c.OpenProducerID < 0:
		l.openSince, l.moved = time.Time{}, false
	case recent && l.confOpen == c.OpenProducerID && l.confOff == c.OpenOffset && !l.openSince.IsZero():
		l.moved = false // the same transaction, still open: readers frozen since openSince
	default:
		// A transaction not seen open before. Readers moved since the
		// last confirmation if that one, taken recently, stopped at
		// another offset.
		l.moved = recent && l.confOpen >= 0 && l.confOff != c.OpenOffset
		l.openSince = now
	}
	l.confAt, l.confOpen, l.confOff = now, c.OpenProducerID, c.OpenOffset
	return l
}

// maxConfirmGap is how far apart two confirmations may be for the later
// one to tell, by comparing the two, whether readers moved in between.
const maxConfirmGap = 5 * time.Second

// Decide is the succession rules: given the role as the view sees it (st),
// this member (me), what it knows locally (l, after [Local.Observe]), the
// local time and the settings, it says what to do next. It is pure. This
// comment is the one statement of the rules; the package documentation,
// docs/DESIGN.md and the code refer to them by number.
//
// Expiry is judged on this member's clock, never on the writer's: a lease
// record expires LeaseSpan (rolestate.LeaseSpan: its Deadline - GrantedAt,
// capped at rolestate.MaxLeaseSpan) after this member first observed it,
// so a member that has just started waits one span at most. A lease that
// names its holder's member session lives, too, one heartbeat span
// (rolestate.HeartbeatSpan) after this member first saw the latest
// heartbeat of that incarnation that vouches for the role (the source's
// time for it when the source gives one), whichever is later; a session
// record that drops the role (one that excludes it, or the session end)
// makes it vacant at once, as a release does. The Member stamps what it
// records in l of a confirmation, of a registration's wait to show and of
// a loss with the time the call that learned it returned, never earlier.
//
// The rules, in order:
//
//  1. A resignation asked for comes first: DoResign.
//  2. A holder stops (DoStepDown, lease lost) once RenewDeadline has passed
//     since its last renewal began (the member session round that last
//     vouched for it, or its election or last lease write), on its local
//     clock. It stops (DoStepDown, fenced) when the view shows a lease
//     under a newer epoch of its token. It hands the role over (DoResign,
//     deregistered) when the view shows its registration, seen during this
//     holding, removed by someone else (records newer than it, not it),
//     and registers again by rule 4 after; a registration removed before
//     the holding showed it (pruned by a challenger that raced it) it
//     registers again at once (DoRegister) and keeps the role. It rewrites
//     its lease (DoRenew) when asked to (Member.RenewNow) and once
//     [LeaseRewriteInterval] has passed since its last lease write (or at
//     the retry time after a failed rewrite), and otherwise waits, at most
//     RenewInterval: the member session's heartbeats renew the holding.
//  3. After a failed call (a failed confirmation included) it waits for
//     its retry time, RetryBackoff doubling up to RenewInterval; after its
//     work failed it waits for the campaign backoff.
//  4. A member that is not a candidate registers (DoRegister): at start,
//     when it was pruned (the state shows records newer than its
//     registration but not the registration), or when its registration
//     has not shown in the view for a LeaseDuration. It waits while its
//     new registration is on its way to the view.
//  5. While the lease is live (not a release, not dropped by its session,
//     and not expired as above) it waits for its expiry. Exception: a
//     lease of this member under a token that the transport retired (its
//     holding ended on an unknown outcome, or its challenge's lease write
//     got no definite answer and committed unseen), or under which the
//     member session found the role's transactional id expired at its
//     coordinator, is vacant at once for this member: challenging it
//     fences only its former self.
//  6. A member that was fenced, or lost a challenge race, does not
//     challenge again until the view shows a lease at a higher offset
//     than the one it showed then, or a LeaseDuration has passed since
//     the refusal (by then the winner's lease write, bounded by its
//     TransactionTimeout, has shown or failed). The loss ends rule 5's
//     exception for its own lease under a retired token: taking that
//     back again would fence the winner, which would fence it in turn.
//  7. The role is vacant. Candidates rank by registration offset (join
//     order) when the holder let the role go (a release, or its session
//     dropped the role or ended), and by split score ([SplitScore]) when
//     its lease ran out while its session still claimed it (it died or
//     was cut off): the survivors of a member that held many roles each
//     take their own share at once. Either way the member named in the
//     lease that ended ranks last. The candidate of effective rank r
//     challenges once r*Stagger has passed since it observed the vacancy.
//     (A member taking back its own retired lease goes at once and prunes
//     nobody.) While a candidate ranked ahead of it is alive (the Member
//     saw a heartbeat of its member session within two RenewIntervals:
//     see Local's aheadLive, which the Member looks up when its turn
//     comes), it defers to it for as long as that candidate makes
//     progress: until one LeaseDuration past its turn, or past the last
//     time this member saw that candidate take a role (any role),
//     whichever is later. So the ones behind a survivor on a role do not
//     race it for the roles it has not reached yet (both elected, one
//     fenced, two workers at once until the fenced one learns). A
//     candidate ahead that stopped, paused or was cut off delays the turn
//     by three RenewIntervals after its last heartbeat at most (two, and
//     the Member's watch that wakes the deferring role); one alive but
//     taking no role, by a LeaseDuration. The deferral is for liveness
//     only; the fence keeps one holder at a time either way.
//  8. Before it challenges it confirms (DoConfirm): only a confirmation
//     taken at now lets it challenge, and on the confirmed state the
//     rules above must still say so (a lease record the confirmation
//     shows for the first time is observed at now). When the confirmation
//     shows the partition's readers held back by an open transaction of a
//     producer other than the one named in the role's live lease (another
//     role's transaction: the lease may have been renewed behind it; one
//     of the lease's own producer id is the role's, which AcquireEpoch
//     aborts; after a release or with no lease nothing can hide), it
//     confirms again a RetryBackoff later; if that shows the same
//     transaction open at the same offset, the expiry it sees may be
//     frozen time: it does not challenge, and confirms again every
//     RenewInterval. Readers that moved between the two confirmations are
//     not held back; once they thaw, the Member counts the turns of rule
//     7 again from the thaw, since every candidate of the partition
//     waited past its turn on the same frozen readers.
//  9. DoChallenge: it prunes the candidates of lower effective rank, who
//     did not challenge in their turn, and the member whose lease expired
//     (not one that released: it deregistered itself).
//
// Outside Decide, the Member applies the checks of one process per member
// id first, and ends a holding at once when its session's round finds the
// role's token moved at its coordinator (fenced, rule 6; or, when the
// coordinator knows no producer for it, the retired-lease exception of
// rule 5), when the transport cannot write under the token any more
// ([fencing.TokenChecker]: retired, rule 5; forgotten after a fenced
// write, rule 6), and when a lease rewrite is refused (fenced or
// forgotten, rule 6; its token retired, rule 5).
func Decide(st rolestate.State, me codec.MemberID, l Local, now time.Time, s Settings) Action {
	if l.resign != "" {
		return Action{Kind: DoResign, Revoke: l.resign, Reason: string(l.resign)}
	}
	if h := l.held; h != nil {
		expiry := l.renewedAt.Add(s.RenewDeadline)
		if !now.Before(expiry) {
			return Action{Kind: DoStepDown, Revoke: ReasonLeaseLost,
				Reason: fmt.Sprintf("no successful renewal within the renew deadline %v", s.RenewDeadline)}
		}
		if st.Lease != nil && st.Lease.Token.Newer(h.Token) {
			return Action{Kind: DoStepDown, Revoke: ReasonFenced,
				Reason: fmt.Sprintf("the view shows %s holding under newer token %s (ours %s)", st.Lease.Member, st.Lease.Token, h.Token)}
		}
		if status, _, why := l.registration(st, me, now, s); status == regMissing && l.registered >= 0 {
			if l.regHeld {
				return Action{Kind: DoResign, Revoke: ReasonDeregistered,
					Reason: "holding, but our registration was removed (" + why + "): handing over"}
			}
			// Removed before this holding showed it: a challenger that
			// raced this member's challenge pruned it, and lost. Not an
			// operator's step-down: join the queue again and keep the role.
			return Action{Kind: DoRegister,
				Reason: "holding, but not a candidate since before this holding (" + why + "): registering again"}
		}
		if l.renewNow && !now.Before(l.retryAt) {
			return Action{Kind: DoRenew, Reason: "asked to rewrite the lease at once (the holder's value changed)"}
		}
		written := l.writtenAt
		if written.IsZero() {
			written = l.renewedAt // not known apart: the last renewal was a write
		}
		rewrite := written.Add(LeaseRewriteInterval)
		if l.retryAt.After(rewrite) {
			rewrite = l.retryAt
		}
		if !now.Before(rewrite) {
			return Action{Kind: DoRenew, Reason: "the lease rewrite interval passed (it keeps the role's transactional id from expiring)"}
		}
		// The member session's heartbeats renew the holding (they move
		// renewedAt); the member wakes at least every RenewInterval to
		// check in with the session, which vouches only for roles whose
		// goroutine does.
		next := now.Add(s.RenewInterval)
		if l.renewNow && l.retryAt.Before(next) {
			next = l.retryAt
		}
		return Action{Kind: DoWait, Until: earliest(next, expiry, rewrite), Reason: "holding; renewed by the member session"}
	}
	if now.Before(l.retryAt) {
		return Action{Kind: DoWait, Until: l.retryAt, Reason: fmt.Sprintf("backing off after %d failures", l.failures)}
	}
	if now.Before(l.campaignAt) {
		return Action{Kind: DoWait, Until: l.campaignAt, Reason: "work failed; backing off before campaigning again"}
	}
	switch status, until, why := l.registration(st, me, now, s); status {
	case regMissing:
		return Action{Kind: DoRegister, Reason: why}
	case regPending:
		return Action{Kind: DoWait, Until: until, Reason: why}
	}
	_, vacant, expiry := l.vacancy(st, me, now)
	if !vacant {
		return Action{Kind: DoWait, Until: expiry,
			Reason: fmt.Sprintf("%s holds the role under token %s; its lease expires in %v on this member's clock",
				st.Lease.Member, st.Lease.Token, expiry.Sub(now))}
	}
	own := l.ownRetired(st, me)
	if !own && !l.lostAt.IsZero() && st.LeaseOffset <= l.lostOff {
		if until := l.lostAt.Add(s.LeaseDuration); now.Before(until) {
			return Action{Kind: DoWait, Until: until,
				Reason: fmt.Sprintf("fenced or lost a challenge; waiting for a lease newer than offset %d", l.lostOff)}
		}
	}
	var ahead, prune []codec.MemberID
	if !own {
		ahead, prune = turn(st, me)
	}
	rank := len(ahead)
	since := l.vacantSince
	if since.IsZero() {
		since = now
	}
	myTurn := since.Add(time.Duration(rank) * s.Stagger)
	if now.Before(myTurn) {
		return Action{Kind: DoWait, Until: myTurn, Reason: fmt.Sprintf("vacant; rank %d waits its turn", rank)}
	}
	if rank > 0 && now.Before(l.aheadLive) {
		from := myTurn
		if l.aheadWon.After(from) {
			from = l.aheadWon
		}
		if at := earliest(l.aheadLive, from.Add(s.LeaseDuration)); now.Before(at) {
			return Action{Kind: DoWait, Until: at, Deferring: from.Add(s.LeaseDuration),
				Reason: fmt.Sprintf("vacant; rank %d defers to a live candidate ranked ahead of it while it takes roles, until %v at most", rank, from.Add(s.LeaseDuration))}
		}
	}
	if fresh := !l.confAt.IsZero() && !now.Before(l.confAt) && now.Before(l.confAt.Add(s.RenewInterval)); fresh && l.heldBack(st) {
		switch until := l.confAt.Add(s.RetryBackoff); {
		case !l.openSince.Equal(l.confAt):
			return Action{Kind: DoWait, Until: l.confAt.Add(s.RenewInterval),
				Reason: fmt.Sprintf("looks vacant, but readers of the partition are held back by an open transaction of producer %d since %v; not judging expiry on frozen time", l.confOpen, l.openSince)}
		case now.Before(until):
			// First seen: a transaction in flight for milliseconds (a
			// renewal of another role) or one that froze readers long
			// ago. Look again shortly (below: DoConfirm).
			return Action{Kind: DoWait, Until: until,
				Reason: fmt.Sprintf("looks vacant, but an open transaction of producer %d holds readers of the partition back; confirming again to see whether it ends", l.confOpen)}
		}
	}
	if !l.confAt.Equal(now) {
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
	case !l.registeredAt.IsZero() && now.Before(l.registeredAt.Add(s.LeaseDuration)):
		return regPending, l.registeredAt.Add(s.LeaseDuration), fmt.Sprintf("registration at offset %d not in the view yet", l.registered)
	}
	return regMissing, time.Time{}, fmt.Sprintf("registration at offset %d never showed in the view", l.registered)
}

// vacancy reports whether the role is vacant at now as this member judges
// it (no lease, a release, this member's own lease under a token the
// transport retired, or a lease whose span has passed since this member
// first observed it) and which vacancy: the offset of the lease that
// ended, or -1. When the role is not vacant, expiry is when its lease
// expires on this member's clock.
func (l Local) vacancy(st rolestate.State, me codec.MemberID, now time.Time) (key int64, vacant bool, expiry time.Time) {
	if st.Lease == nil {
		return -1, true, time.Time{}
	}
	if st.Lease.Released() || l.ownRetired(st, me) {
		return st.LeaseOffset, true, time.Time{}
	}
	seen := l.leaseSeen
	if l.leaseOff != st.LeaseOffset || seen.IsZero() {
		seen = now // not observed before: it counts from now
	}
	expiry = seen.Add(rolestate.LeaseSpan(*st.Lease))
	switch st.SessionVouch() {
	case rolestate.Dropped:
		// The holder's session excluded the role or ended: it stopped
		// acting on the role before it wrote that.
		return st.LeaseOffset, true, time.Time{}
	case rolestate.Vouched:
		beat := l.beatSeen
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
// have been renewed: a live holder's lease (not a release: a role let go
// has no holder whose renewals could hide) and a transaction of another
// producer (another role's). An open transaction of the lease's own
// producer id is the role's own (a holder or challenger that died
// mid-write): AcquireEpoch aborts it. Readers that moved between two
// recent confirmations (the transaction open now began after the last)
// are not held back: what the lease's holder wrote before is in view.
func (l Local) heldBack(st rolestate.State) bool {
	if l.confOpen < 0 || l.moved || st.Lease == nil || st.Lease.Released() {
		return false
	}
	return st.Lease.Token.ProducerID != l.confOpen
}

// turn returns the candidates ranked ahead of me in a vacancy (me's
// effective rank is their number; the member named in the lease that
// ended ranks last) and the candidates its challenge prunes. Candidates
// rank by registration offset (join order), except in a vacancy left by a
// lease that ran out while its session still claimed it (the holder died
// or was cut off): there they rank by [SplitScore], so that the survivors
// of a member that held many roles each take their own share at once.
func turn(st rolestate.State, me codec.MemberID) (ahead, prune []codec.MemberID) {
	var last codec.MemberID
	expired := false
	if st.Lease != nil {
		last, expired = st.Lease.Member, !st.Lease.Released()
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

// SplitScore is m's rendezvous score for role, by which candidates rank
// in a vacancy left by a holder that died (rule 7 of [Decide]): the live
// candidate with the highest score goes first. Every member computes the
// same order from the names alone, and a role moves from one survivor's
// share to another's only when a candidate ahead of it joins or leaves.
func SplitScore(role codec.Role, m codec.MemberID) uint64 {
	h := fnv.New64a()
	h.Write([]byte(role))
	h.Write([]byte{0})
	h.Write([]byte(m))
	x := h.Sum64() // splitmix64's finalizer: FNV alone leaves similar names close
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

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

// LeaseRewriteInterval is how often a holder writes its lease again while
// the member session's heartbeats keep it alive: a transaction under the
// role's own transactional id, so that the coordinator does not expire
// that id (transactional.id.expiration.ms, 7 days by default: an expired
// id would lose the epoch that fences a deposed holder's writes, see
// package fencing). Once an hour costs a member holding 10,000 roles
// under 3 transactions a second.
const LeaseRewriteInterval = time.Hour

// beatSeenAt is when a member observing se at now counts it from: the
// source's own time for it when the source gives one that is plausible on
// this member's clock (not after now, and within MaxLeaseSpan of it: the
// view, in the same process, stamps records when it applies them, which
// may be well before the member wakes to look), else now.
func beatSeenAt(se *rolestate.SessionSeen, now time.Time) time.Time {
	if at := se.SeenAt; !at.IsZero() && !at.After(now) && now.Sub(at) < rolestate.MaxLeaseSpan {
		return at
	}
	return now
}
