package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// maxBurst bounds the actions a role performs in a row without waiting; a
// longer burst means a bug, and the runner backs off instead of spinning.
const maxBurst = 16

// runner runs the succession rules of one role on one goroutine. Every
// field is owned by that goroutine, except resignCh and exited.
type runner struct {
	m    *Member
	role codec.Role
	log  *slog.Logger

	st   rolestate.State
	l    Local
	hold *holding
	work Work

	lastWork  chan struct{} // closed when the last run of work returned
	workFails int           // consecutive work runs that failed within a lease duration of their election
	workErr   error         // the error of the work run being resigned for

	seen    *holderKey // the holder last reported by HolderChanged
	resignQ chan error // the caller of Member.Resign waiting for this role

	resignCh chan resignReq
	renewCh  chan struct{} // capacity 1: Member.RenewNow
	note     chan sessNote // capacity 1: the member session's word on the held role
	exited   chan struct{}
	// stopped is called once the goroutine, leaving, acts on the role no
	// more (its work stopped, its holding revoked), before it
	// deregisters: the member session's end need not wait for the
	// deregistrations (see Member.Run).
	stopped func()

	// One process per member id (instance.go).
	minted       map[codec.Token]bool // tokens this process minted for the role
	baseLeaseOff int64                // the role's lease offset when this process first read it
	ownSeenAt    time.Time            // when the view first showed this process's own registration
	reassertedAt time.Time            // when it last registered again to answer another instance
	watch        *instanceWatch       // another instance's registration watched at the start

	// withdrawn: Member.Withdraw took the member out of the role's queue
	// until Member.Rejoin; wake tells the goroutine of a Rejoin.
	withdrawn atomic.Bool
	wake      chan struct{}
}

// resignReq is a call of Member.Resign (withdraw false) or Member.Withdraw.
type resignReq struct {
	q        chan error
	withdraw bool
}

// holding is a role this member holds.
type holding struct {
	held    Held
	ctx     context.Context // work's
	cancel  context.CancelFunc
	expiry  Timer // cancels ctx at the local deadline
	started time.Time
	res     chan error    // work's result; nil without work
	done    chan struct{} // closed when work returned; nil without work
}

type holderKey struct {
	member codec.MemberID
	token  codec.Token
	ok     bool
}

func newRunner(m *Member, role codec.Role) *runner {
	return &runner{
		m: m, role: role, l: NewLocal().withInstance(m.inst),
		st:       rolestate.State{Role: role, LeaseOffset: -1},
		log:      m.log.With("role", string(role)),
		resignCh: make(chan resignReq),
		renewCh:  make(chan struct{}, 1),
		note:     make(chan sessNote, 1),
		exited:   make(chan struct{}),
		minted:   map[codec.Token]bool{},
		wake:     make(chan struct{}, 1),
		stopped:  func() {},
	}
}

// run is the role's goroutine: it returns after ctx ended and the member
// left the role.
func (r *runner) run(ctx context.Context, work Work) {
	defer close(r.exited)
	defer r.stopped() // at the latest
	r.work = work
	r.m.met.holder(r.role, r.m.me, false)
	fctx, stopFollow := context.WithCancel(ctx)
	updates := r.m.src.Follow(fctx, r.role)
	defer func() {
		stopFollow()
		if updates != nil {
			for range updates { // until the source's goroutine is done
			}
		}
	}()
	if !r.load(ctx) {
		r.leave(ctx)
		return
	}
	r.baseLeaseOff = r.st.LeaseOffset
	burst := 0
	for {
		if ctx.Err() != nil {
			r.leave(ctx)
			return
		}
		a := r.step(ctx)
		until := a.Until
		if a.Kind != DoWait {
			if burst++; burst < maxBurst {
				continue
			}
			r.log.Error("too many actions in a row; backing off", "last", a.Kind.String())
			until = r.m.clk.Now().Add(r.m.s.RetryBackoff)
		}
		burst = 0
		polling := updates == nil
		if polling {
			until = earliest(until, r.m.clk.Now().Add(r.m.s.RenewInterval))
		}
		t := r.m.clk.NewTimer(until.Sub(r.m.clk.Now()))
		if r.m.idle != nil {
			r.m.idle(r.role, until)
		}
		select {
		case <-ctx.Done():
		case st, ok := <-updates:
			if ok {
				r.st = st
			} else {
				updates = nil
			}
		case <-t.C():
			if polling {
				r.poll(ctx)
			}
		case q := <-r.resignCh:
			r.requestResign(q)
		case <-r.renewCh:
			r.l.renewNow = r.l.held != nil
		case n := <-r.note:
			r.noted(n)
		case <-r.wake:
		case err := <-r.workResult():
			r.workReturned(err)
		}
		t.Stop()
	}
}

// load reads the role from the source, retrying with backoff until it
// succeeds (true) or ctx ends (false).
func (r *runner) load(ctx context.Context) bool {
	for {
		st, err := r.m.src.Role(ctx, r.role)
		if err == nil {
			r.st, r.l.failures = st, 0
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.l.failures++
		d := r.m.s.backoff(r.l.failures)
		r.log.Warn("reading the role failed; retrying", "err", err, "retry_in", d)
		t := r.m.clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

func (r *runner) poll(ctx context.Context) {
	st, err := r.m.src.Role(ctx, r.role)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("reading the role failed", "err", err)
		}
		return
	}
	r.st = st
}

// step observes the role, decides, and performs the action. It returns
// the action. When the rules say confirm, it confirms and decides again on
// the confirmed state at the time the confirmation returned, so a
// challenge always follows a confirmation that still says challenge.
func (r *runner) step(ctx context.Context) Action {
	now := r.m.clk.Now()
	if a, ok := r.checkToken(now); ok {
		return a
	}
	if a, ok := r.checkInstance(now); ok {
		r.m.adm.dequeue(r.role)
		if a.Kind == DoRegister {
			r.register(ctx, a.Reason)
		}
		return a
	}
	if r.withdrawn.Load() && r.hold == nil && r.l.resign == "" {
		r.m.adm.dequeue(r.role)
		return Action{Kind: DoWait, Until: now.Add(time.Hour), Reason: "withdrawn from the role: not campaigning until Rejoin"}
	}
	a := r.decide(ctx, now)
	if a.Kind == DoConfirm {
		if ahead := r.lookAhead(ctx, now); len(ahead) > 0 {
			a = Decide(r.st, r.m.me, r.l, now, r.m.s) // rule 7: defers to the live candidate ahead
			if !a.Deferring.IsZero() {
				// The Member's watch wakes this role if a candidate ahead
				// stops heartbeating first (progress.watch).
				r.m.prog.deferTo(r, ahead)
				a.Until = a.Deferring
			}
		}
	}
	if a.Kind != DoConfirm {
		r.m.adm.dequeue(r.role)
	}
	if a.Kind == DoConfirm {
		// A campaign: not while campaigns are paused after a challenge
		// timed out. The
		// role stays registered meanwhile, and decides again on every
		// change of its state.
		if !r.m.adm.claim(r.role, now) {
			return Action{Kind: DoWait, Until: now.Add(r.m.s.RenewInterval/2 + rand.N(r.m.s.RenewInterval)),
				Reason: "campaigns paused after a challenge timed out: registered, not campaigning"}
		}
		// The call slot of the challenge is taken before the
		// confirmation, and held through the challenge's calls: a
		// confirmation goes stale while its challenge waits, so the wait
		// (the member's other campaigns, all after their slots at once
		// when it starts with many roles) comes first. A wait that runs
		// out is no sign of an overloaded cluster: the role decides again
		// a little later, without pausing the member's campaigns.
		release, err := r.slot(ctx, prioCampaign, r.m.s.LeaseDuration)
		if err != nil {
			if ctx.Err() != nil {
				return a
			}
			wait := r.m.s.RenewInterval/2 + rand.N(r.m.s.RenewInterval)
			return Action{Kind: DoWait, Until: now.Add(wait), Reason: "waited for a call slot in vain: every slot is busy with the member's other calls"}
		}
		defer func() {
			if release != nil {
				release()
			}
		}()
		var ok bool
		if now, ok = r.confirm(ctx); !ok {
			return a // the next decision waits for the retry
		}
		if a = r.decide(ctx, now); a.Kind == DoConfirm {
			// Cannot happen: the confirmation was taken at now.
			return Action{Kind: DoWait, Until: now.Add(r.m.s.RetryBackoff), Reason: "confirmed, yet asked to confirm again"}
		}
		if a.Kind == DoChallenge {
			r.challenge(ctx, a.Prune, release)
			release = nil
			return a
		}
	}
	switch a.Kind {
	case DoRegister:
		r.register(ctx, a.Reason)
	case DoChallenge:
		r.challenge(ctx, a.Prune, nil)
	case DoRenew:
		r.renew(ctx, now)
	case DoStepDown:
		var cause error
		if a.Revoke == ReasonFenced {
			cause = fmt.Errorf("%w: %s", fencing.ErrFenced, a.Reason)
		}
		r.revoke(now, a.Revoke, cause, a.Reason)
	case DoResign:
		r.resign(ctx, a.Revoke)
	}
	return a
}

// checkToken ends the holding at now when the transport can no longer
// write under its token ([fencing.TokenChecker]), as a lease write would
// have learned: retired after an unknown outcome (ReasonTokenRetired: the
// member may take its lease back at once) or forgotten after a fenced write
// (ReasonFenced: the wait after a loss). Work's writes use the token between
// lease writes, which the heartbeats make rare. It returns the step down it
// took and true, or false when the token can still write.
func (r *runner) checkToken(now time.Time) (Action, bool) {
	tc, ok := r.m.t.(fencing.TokenChecker)
	if !ok || r.hold == nil {
		return Action{}, false
	}
	err := tc.CheckToken(r.role, r.hold.held.Token)
	switch {
	case err == nil:
		return Action{}, false
	case retired(err):
		tok := r.hold.held.Token
		r.l.retiredTok = &tok
		r.revoke(now, ReasonTokenRetired, err, "the transport retired the holding's token")
		return Action{Kind: DoStepDown, Revoke: ReasonTokenRetired, Reason: "the transport retired the holding's token"}, true
	default:
		r.m.met.fenced(r.role)
		r.lost(now)
		r.revoke(now, ReasonFenced, err, "the transport forgot the holding's token: a write under it was fenced")
		return Action{Kind: DoStepDown, Revoke: ReasonFenced, Reason: "the transport forgot the holding's token"}, true
	}
}

// decide observes the role at now and applies the rules. It checks in
// with the member session first (this goroutine is alive), and looks up
// the session record of the lease's holder afresh: heartbeats are not
// published as role changes.
func (r *runner) decide(ctx context.Context, now time.Time) Action {
	if r.hold != nil {
		r.m.sess.checkIn(r.role, now)
	} else {
		r.m.sess.settle(r.role, r.st)
	}
	r.refreshSession(ctx)
	if l := r.st.Lease; l != nil && l.Member != r.m.me && !l.Released() && r.l.leaseOff >= 0 && r.st.LeaseOffset != r.l.leaseOff {
		r.m.prog.won(l.Member, now) // a new lease, not one read at the start
	}
	r.l = r.l.Observe(r.st, r.m.me, now)
	r.observeHolder(now)
	a := Decide(r.st, r.m.me, r.l, now, r.m.s)
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.Debug("decided", "action", a.Kind.String(), "reason", a.Reason, "until", a.Until)
	}
	return a
}

// lookAhead records in r.l until when a candidate ranked ahead of this
// member in the vacancy counts as alive ([aliveUntil]). It also records when this member last saw such a live
// candidate take a role (its progress). Only a source that stamps a
// record with the time it saw it (the view) tells; a TransportSource's
// records carry no such time, and a member on one does not defer. It
// returns the candidates ahead alive at now. The Member asks when rule 7
// would have it campaign (see [Decide]).
func (r *runner) lookAhead(ctx context.Context, now time.Time) []codec.MemberID {
	ss, ok := r.m.src.(SessionSource)
	if !ok || r.l.ownRetired(r.st, r.m.me) {
		return nil
	}
	ahead, _ := turn(r.st, r.m.me)
	var alive []codec.MemberID
	var until, won time.Time
	for _, m := range ahead {
		se, found, err := ss.Session(ctx, m)
		if err != nil || !found {
			continue
		}
		e := aliveUntil(se, now, r.m.s)
		if !now.Before(e) {
			continue
		}
		alive = append(alive, m)
		if e.After(until) {
			until = e
		}
		if w := r.m.prog.last(m); w.After(won) {
			won = w
		}
	}
	r.l = r.l.withAheadLive(until, won)
	return alive
}

// confirm asks the source to confirm the role's state (Source.Confirm),
// bounded by TransactionTimeout, and returns when the call returned, or
// false when it failed (the member backs off). The time is the call's end,
// as a lease first shown by the confirmation is first observed then:
// counted from the start, a lease renewed during a slow call (up to
// TransactionTimeout) would look older, and a live holder could be fenced.
func (r *runner) confirm(ctx context.Context) (time.Time, bool) {
	cctx, cancel := r.callCtx(ctx, r.m.s.TransactionTimeout)
	c, err := r.confirmState(cctx) // confirm.go
	cancel()
	now := r.m.clk.Now()
	if err != nil {
		r.failed(ctx, "confirming the role's state before a challenge", err)
		return now, false
	}
	// A confirmation is not a success of the challenge: the failure count
	// (and so the backoff) stays until the challenge's calls succeed.
	wasFrozen := r.l.heldBack(r.st) && !r.l.openSince.Equal(r.l.confAt)
	r.st = c.State
	r.l = r.l.Confirmed(now, c)
	if r.l.heldBack(r.st) && !r.l.openSince.Equal(now) && !wasFrozen {
		r.log.Info("not challenging: the partition's readers are held back by another producer's open transaction, so the lease may have been renewed behind it",
			"producer_id", c.OpenProducerID, "confirm_again_in", r.m.s.RenewInterval)
	}
	if wasFrozen && !r.l.heldBack(r.st) && !r.l.vacantSince.IsZero() {
		// Every candidate of the partition waited on the same frozen
		// readers, each past its turn by now: count the turns again from
		// the thaw, or they would all challenge at once.
		r.l.vacantSince = now
	}
	return now, true
}

// observeHolder reports a HolderChanged event when the holder at now, as
// this member judges it, differs from the last one reported.
func (r *runner) observeHolder(now time.Time) {
	var key holderKey
	var cur *codec.Lease
	var fence int64
	if l, ok := r.l.holder(r.st, r.m.me, now); ok {
		key, cur, fence = holderKey{member: l.Member, token: l.Token, ok: true}, &l, r.st.Fence()
	}
	if r.seen != nil && *r.seen == key {
		return
	}
	r.seen = &key
	if cur == nil {
		r.log.Info("holder changed: vacant")
	} else {
		r.log.Info("holder changed", "holder", string(cur.Member), "token", cur.Token.String(), "fence", fence)
	}
	r.m.emit(Event{Kind: HolderChanged, Role: r.role, Member: r.m.me, At: now, Holder: cur, Fence: fence})
}

func (r *runner) callCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return withTimeout(ctx, r.m.clk, d)
}

// failed records a failed call and schedules the retry, counted from
// when the call returned. A call cut short by the end of ctx is not worth
// a warning: the member is leaving.
func (r *runner) failed(ctx context.Context, what string, err error) {
	r.l.failures++
	d := r.m.s.backoff(r.l.failures)
	r.l.retryAt = r.m.clk.Now().Add(d)
	level := slog.LevelWarn
	if ctx.Err() != nil {
		level = slog.LevelDebug
	}
	r.log.Log(ctx, level, what+" failed", "err", err, "failures", r.l.failures, "retry_in", d)
}

func (r *runner) succeeded() { r.l.failures, r.l.retryAt = 0, time.Time{} }

// slot waits, at most wait, for one of the member's call slots at
// priority p. It returns the function that gives it back.
func (r *runner) slot(ctx context.Context, p priority, wait time.Duration) (func(), error) {
	release, _, err := r.slotQueued(ctx, p, wait)
	return release, err
}

// slotQueued is slot, and also reports whether the call queued for its
// slot.
func (r *runner) slotQueued(ctx context.Context, p priority, wait time.Duration) (func(), bool, error) {
	wctx, cancel := r.callCtx(ctx, wait)
	defer cancel()
	release, queued, err := r.m.lim.acquireQueued(wctx, p)
	if err != nil {
		if ctx.Err() != nil {
			return nil, queued, ctx.Err()
		}
		return nil, queued, fmt.Errorf("%w: waited %v for one of the member's %d call slots", ErrOverloaded, wait, r.m.s.MaxInFlight)
	}
	return release, queued, nil
}

// register registers the member for the role. The registration's wait to
// show in the view (Local.registration) counts from when Register
// returned, not from when the step began: counted from before a slow call,
// it would run out early and the member would register again, at the
// back of the queue.
func (r *runner) register(ctx context.Context, why string) {
	release, err := r.slot(ctx, prioCampaign, r.m.s.TransactionTimeout)
	if err != nil {
		r.failed(ctx, "register", err)
		return
	}
	cctx, cancel := r.callCtx(ctx, r.m.s.TransactionTimeout)
	var off int64
	if r.m.ireg != nil {
		off, err = r.m.ireg.RegisterInstance(cctx, r.role, r.m.me, r.m.inst)
	} else {
		off, err = r.m.t.Register(cctx, r.role, r.m.me)
	}
	cancel()
	release()
	if err != nil {
		r.failed(ctx, "register", err)
		return
	}
	r.succeeded()
	r.l.registered, r.l.registeredAt = off, r.m.clk.Now()
	r.log.Info("registered", "offset", off, "why", why)
}

// challenge takes the role: AcquireEpoch, then the lease under the new
// token, then the prunes. A lease write refused as fenced is a lost race,
// counted (Local.lostAt) from when the refusal came, not from when the
// step began.
//
// held is the call slot the confirmation took for the challenge (see
// step), which challenge gives back; nil: challenge waits for one itself.
func (r *runner) challenge(ctx context.Context, prune []codec.MemberID, held func()) {
	r.log.Info("challenging: the confirmed state says so")
	// One slot for both calls, so the transaction AcquireEpoch begins
	// never waits for a slot; the confirmation goes stale if the wait is
	// longer than a renew interval.
	release := held
	if release == nil {
		var err error
		if release, err = r.slot(ctx, prioCampaign, r.m.s.RenewInterval); err != nil {
			r.challengeTimedOut(ctx, err)
			return
		}
	}
	defer func() {
		if release != nil {
			release()
		}
	}()
	cctx, cancel := r.callCtx(ctx, r.m.s.TransactionTimeout)
	defer cancel()
	// The lease names the member session, which keeps it alive: one is
	// begun before the first challenge.
	if _, err := r.m.sess.ensure(cctx); err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			r.challengeTimedOut(ctx, err)
			return
		}
		r.failed(ctx, "challenge: member session", err)
		return
	}
	tok, err := r.m.t.AcquireEpoch(cctx, r.role)
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			r.challengeTimedOut(ctx, err)
			return
		}
		r.failed(ctx, "challenge: acquire epoch", err)
		return
	}
	r.minted[tok] = true
	r.log.Info("acquired an epoch", "token", tok.String())
	start := r.m.clk.Now()
	lease := r.lease(tok, start, 0) // its own offset is the holding's number
	if lease.Session == nil {
		r.failed(ctx, "challenge", errors.New("no member session to name in the lease"))
		return
	}
	// The lease write is not cut short by the end of Run's context either
	// (see renew): once it has committed, the member releases the role on
	// its way out; cut short, it might commit unseen and hold the role
	// for a lease.
	wctx, wcancel := r.callCtx(context.WithoutCancel(ctx), r.m.s.TransactionTimeout)
	defer wcancel()
	fence, err := r.m.t.WriteLease(wctx, r.role, tok, lease)
	release()
	release = nil
	if err != nil {
		if fencing.IsFenced(err) {
			r.m.met.fenced(r.role)
			r.lost(r.m.clk.Now())
			r.log.Info("lost a challenge race: another member took the role; waiting for its lease", "token", tok.String(), "lease_offset", r.st.LeaseOffset)
			return
		}
		if retired(err) {
			// No definite answer (a commit sent without one, say): the
			// lease may have committed, naming this member and its
			// session, under a token nothing writes under again. Rule 5
			// makes that lease vacant at once for this member, which
			// takes the role back; until the view shows another lease,
			// the session's heartbeats exclude the role, so they do not
			// keep a lease nobody acts on alive for the others.
			r.l.retiredTok = &tok
			r.m.sess.drop(r.role, true)
		}
		if cctx.Err() != nil && ctx.Err() == nil {
			r.challengeTimedOut(ctx, err)
			return
		}
		r.failed(ctx, "challenge: write lease", err)
		return
	}
	r.succeeded()
	r.m.adm.challengeDone()
	r.l.held = &Held{Role: r.role, Member: r.m.me, Token: tok, Fence: fence, Lease: lease}
	r.l.renewedAt = start
	r.l.lostAt, r.l.lostOff, r.l.retiredTok = time.Time{}, noKey, nil
	r.elected(ctx, start)
	if len(prune) == 0 {
		return
	}
	// The next renewal is due in RenewInterval: pruning must not delay it.
	pctx, pcancel := r.callCtx(ctx, r.m.s.RenewInterval)
	defer pcancel()
	for _, p := range prune {
		release, err := r.m.lim.acquire(pctx, prioCampaign)
		if err == nil {
			err = r.m.t.Deregister(pctx, r.role, p)
			release()
		}
		if err != nil {
			r.log.Warn("pruning a candidate failed", "candidate", string(p), "err", err)
			continue
		}
		r.log.Info("pruned a candidate that did not challenge in its turn", "candidate", string(p))
	}
}

// challengeTimedOut records a challenge that did not finish in time (its
// calls, or the wait for a call slot): the role backs off as after any
// failure, and the member pauses all its campaigns (admission).
func (r *runner) challengeTimedOut(ctx context.Context, err error) {
	r.failed(ctx, "challenge (timed out)", err)
	if d := r.m.adm.challengeTimedOut(r.m.clk.Now()); r.l.retryAt.Before(r.m.clk.Now().Add(d)) {
		r.l.retryAt = r.m.clk.Now().Add(d)
	}
}

// lease returns a lease of this member under tok, of the holding numbered
// fence (0 for the holding's first lease), whose write begins at start.
func (r *runner) lease(tok codec.Token, start time.Time, fence int64) codec.Lease {
	ms := start.UnixMilli()
	l := codec.Lease{Member: r.m.me, Token: tok, GrantedAt: ms, Deadline: ms + r.m.s.LeaseDuration.Milliseconds(), Fence: fence}
	if s := r.m.sess.current(); s.Nonce != "" {
		l.Session = &s
	}
	return l
}

// lost records that this member was fenced or lost a challenge race at
// now: it does not challenge again until a lease newer than the one its
// state shows now has shown (see Decide, rule 6).
func (r *runner) lost(now time.Time) {
	// Another member acted under a newer token: the member's own lease
	// under a retired token is no longer its former self's alone to take
	// back (rule 5), or a member that lost the race for it would fence
	// the winner at once, and be fenced by it in turn.
	r.l.lostAt, r.l.lostOff, r.l.retiredTok = now, r.st.LeaseOffset, nil
}

// elected makes the member the holder of the role after a successful
// challenge: it arms the local deadline, reports, and starts work on a
// context derived from ctx (Run's).
func (r *runner) elected(ctx context.Context, start time.Time) {
	held := *r.l.held
	wctx, cancel := context.WithCancel(ctx)
	h := &holding{held: held, ctx: wctx, cancel: cancel, started: start}
	r.m.adm.dequeue(r.role)
	r.l.writtenAt = start
	h.expiry = r.m.clk.AfterFunc(start.Add(r.m.s.RenewDeadline).Sub(r.m.clk.Now()), cancel)
	r.hold = h
	nonce := ""
	if held.Lease.Session != nil {
		nonce = held.Lease.Session.Nonce
	}
	r.m.sess.hold(r.role, held.Token, nonce, start, r.note, cancel)
	r.m.met.holder(r.role, r.m.me, true)
	r.m.met.transition(r.role, "elected")
	r.m.met.campaignBackoff(r.role, 0)
	r.log.Info("elected", "token", held.Token.String(), "fence", held.Fence, "deadline", held.Lease.Deadline)
	r.m.emit(Event{Kind: Elected, Role: r.role, Member: r.m.me, At: start, Token: held.Token, Fence: held.Fence})
	r.startWork(h)
}

// startWork starts work for h, after the previous run has returned.
func (r *runner) startWork(h *holding) {
	if r.work == nil {
		return
	}
	prev := r.lastWork
	h.done, h.res = make(chan struct{}), make(chan error, 1)
	r.lastWork = h.done
	work, held := r.work, h.held
	r.m.works.Add(1)
	go func() {
		defer r.m.works.Done()
		defer close(h.done)
		if prev != nil {
			<-prev // never two runs of a role's work at once
		}
		if h.ctx.Err() != nil {
			return
		}
		h.res <- work(h.ctx, held)
	}()
}

// workResult is the channel on which the running work's result comes,
// nil when no work runs for a held role.
func (r *runner) workResult() <-chan error {
	if r.hold == nil {
		return nil
	}
	return r.hold.res
}

// workReturned handles work returning while the role is held.
func (r *runner) workReturned(err error) {
	now := r.m.clk.Now()
	r.hold.res = nil // it sends once
	if err == nil {
		r.log.Info("work returned; keeping the role")
		return
	}
	if now.Sub(r.hold.started) >= r.m.s.LeaseDuration {
		r.workFails = 0
	}
	r.workFails++
	d := r.m.s.workBackoff(r.workFails)
	r.l.resign = ReasonWorkFailed
	r.l.campaignAt = now.Add(d)
	r.hold.cancel()
	r.workErr = err
	r.m.met.workFailed(r.role, d)
	r.log.Warn("work failed; resigning the role and backing off before campaigning again",
		"err", err, "consecutive_failures", r.workFails, "campaign_in", d)
}

// renew writes the held lease again under the holding's token (naming
// the current member session): when the holder's value changed
// (Member.RenewNow), and every LeaseRewriteInterval. The member session's
// heartbeats keep the holding alive between rewrites; a rewrite is a lease
// of its own, so it moves the local deadline too.
func (r *runner) renew(ctx context.Context, now time.Time) {
	asked := r.l.renewNow
	r.l.renewNow = false
	h := r.l.held
	expiry := r.l.renewedAt.Add(r.m.s.RenewDeadline)
	// The wait for a slot counts against the local deadline; the write
	// itself begins only once it has a slot, so no transaction waits.
	release, err := r.slot(ctx, prioRenew, expiry.Sub(now))
	var lease codec.Lease
	if err == nil {
		// Bounded by TransactionTimeout only, not by the deadline nor by
		// the end of Run's context: a write cut short mid-transaction
		// gets no definite answer, retires the token and leaves a
		// transaction open that holds back the partition's readers. One
		// that ends after the deadline ends the holding below.
		cctx, cancel := r.callCtx(context.WithoutCancel(ctx), r.m.s.TransactionTimeout)
		lease = r.lease(h.Token, now, h.Fence) // dated from the step's start, before the wait: on the safe side
		_, err = r.m.t.WriteLease(cctx, r.role, h.Token, lease)
		cancel()
		release()
	}
	took := r.m.clk.Now().Sub(now)
	switch {
	case fencing.IsFenced(err) || forgotten(err):
		// Fenced, or the transport forgot the token because another
		// write under it (work's writer, a stream) was fenced: another
		// member may hold the role, so this is a loss like any fence.
		r.m.met.leaseRewritten(took, "fenced")
		r.m.met.fenced(r.role)
		r.lost(r.m.clk.Now())
		r.revoke(r.m.clk.Now(), ReasonFenced, err, "the lease rewrite was fenced")
		return
	case retired(err):
		// The transport retired the token: this write, or another
		// write under the token (a writer's, a stream's), got no
		// definite answer. No write follows under it, so the holding is
		// over at once.
		r.m.met.leaseRewritten(took, "retired")
		tok := h.Token
		r.l.retiredTok = &tok
		r.revoke(r.m.clk.Now(), ReasonTokenRetired, err, "the transport retired the holding's token")
		return
	case err != nil:
		r.m.met.leaseRewritten(took, "error")
		r.failed(ctx, "rewrite the lease", err)
		r.l.renewNow = asked // a value change is written after the backoff, not an hour later
		return
	}
	r.m.met.leaseRewritten(took, "ok")
	r.succeeded()
	r.l.writtenAt = now
	if !now.After(r.l.renewedAt) {
		h.Lease = lease
		return // a heartbeat round that began later already moved the deadline further
	}
	if !r.hold.expiry.Stop() {
		// The local deadline passed while the write was in flight: work
		// has been told to stop, so the member stops too.
		r.revoke(r.m.clk.Now(), ReasonLeaseLost, nil, "the lease rewrite succeeded only after the local deadline")
		return
	}
	r.l.renewedAt = now
	h.Lease = lease
	r.m.sess.vouched(r.role, now)
	r.hold.expiry = r.m.clk.AfterFunc(now.Add(r.m.s.RenewDeadline).Sub(r.m.clk.Now()), r.hold.cancel)
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.Debug("rewrote the lease", "token", h.Token.String(), "deadline", lease.Deadline, "took", took)
	}
}

// revoke ends the holding: work's context is cancelled (without waiting
// for work) and Revoked is reported.
func (r *runner) revoke(now time.Time, why Reason, cause error, detail string) {
	h := r.hold
	if h == nil {
		return
	}
	r.hold, r.l.held = nil, nil
	// Until a release shows (or another lease), the heartbeats exclude
	// the role: its lease may still name the member session.
	r.m.sess.drop(r.role, true)
	h.expiry.Stop()
	h.cancel()
	r.m.met.holder(r.role, r.m.me, false)
	r.m.met.transition(r.role, string(why))
	attrs := []any{"reason", string(why), "token", h.held.Token.String(), "fence", h.held.Fence}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	if cause != nil {
		attrs = append(attrs, "err", cause)
	}
	r.log.Info("revoked", attrs...)
	r.m.emit(Event{Kind: Revoked, Role: r.role, Member: r.m.me, At: now, Token: h.held.Token, Fence: h.held.Fence, Reason: why, Err: cause})
}

// awaitWork waits for h's work to return, at most until the local
// deadline.
func (r *runner) awaitWork(h *holding) {
	if h.done == nil {
		return
	}
	left := r.l.renewedAt.Add(r.m.s.RenewDeadline).Sub(r.m.clk.Now())
	t := r.m.clk.NewTimer(left)
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C():
		r.log.Warn("work did not return by the local deadline; going on without it")
	}
}

// awaitWorkRenewing waits, with no bound of its own, for h's work to return
// after a step-down, checking in with the member session every RenewInterval
// so its heartbeats keep vouching for the role: no successor's work starts
// beside it (docs/DESIGN.md, "Why it is safe: a deposed holder stops before
// its successor starts"). Once the holding is lost (the session says so, or
// no round vouched before the local deadline) it falls back to awaitWork's
// wait. It serves the resignations renewsWhileWorkStops names.
func (r *runner) awaitWorkRenewing(h *holding) {
	if h.done == nil {
		return
	}
	for {
		end := r.l.renewedAt.Add(r.m.s.RenewDeadline)
		now := r.m.clk.Now()
		if !now.Before(end) {
			r.log.Warn("no heartbeat vouched for the role by the local deadline while work stopped; going on without it")
			return
		}
		r.m.sess.checkIn(r.role, now)
		t := r.m.clk.NewTimer(min(r.m.s.RenewInterval, end.Sub(now)))
		select {
		case <-h.done:
			t.Stop()
			return
		case <-t.C():
		case n := <-r.note:
			t.Stop()
			if n.lost != "" {
				if n.lost == ReasonFenced {
					r.m.met.fenced(r.role)
					r.lost(r.m.clk.Now())
				}
				r.log.Info("the holding was lost while work stopped; going on without work", "reason", string(n.lost), "err", n.cause)
				return
			}
			if n.vouched.After(r.l.renewedAt) {
				r.l.renewedAt = n.vouched
			}
		}
	}
}

// renewsWhileWorkStops reports whether a resignation for why keeps the
// lease renewed while work stops: a step-down that an operator asked for
// (ReasonDeregistered), one the program asked for (ReasonResigned:
// Resign, Withdraw) and Run's end (ReasonContextEnded), which all wait for
// work in any case, so renewing costs them no time. Work that failed has
// returned already.
func renewsWhileWorkStops(why Reason) bool {
	switch why {
	case ReasonDeregistered, ReasonResigned, ReasonContextEnded:
		return true
	}
	return false
}

// requestResign handles a call of Member.Resign.
func (r *runner) requestResign(req resignReq) {
	if req.withdraw {
		// Out of the queue until Rejoin: the release (when held) and the
		// deregistration are the resignation's.
		r.withdrawn.Store(true)
		r.l.resign, r.resignQ = ReasonResigned, req.q
		return
	}
	if r.hold == nil {
		req.q <- ErrNotHolder
		return
	}
	r.l.resign, r.resignQ = ReasonResigned, req.q
}

// resign gives up the role: it stops work and waits for it, reports
// Revoked, writes the release lease, and deregisters this member, on a
// fresh context bounded by TransactionTimeout.
func (r *runner) resign(ctx context.Context, why Reason) {
	r.l.resign = ""
	h := r.hold
	if h != nil {
		h.cancel()
		if renewsWhileWorkStops(why) {
			r.awaitWorkRenewing(h)
		} else {
			r.awaitWork(h)
		}
	}
	// After the wait for work, which may last up to the local deadline:
	// the release and the deregistration each get their full
	// TransactionTimeout once they have a call slot (waited for at most
	// as long).
	bctx := context.WithoutCancel(ctx)
	var werr error
	if h != nil {
		cause := r.workErr
		r.workErr = nil
		r.revoke(r.m.clk.Now(), why, cause, "")
		release, err := r.slot(bctx, prioRelease, r.m.s.TransactionTimeout)
		if err == nil && why == ReasonContextEnded && r.m.sess.ending(h.held.Lease) {
			// The member is leaving: its session end, written once every
			// role has stopped, releases every lease of the incarnation
			// at once, instead of one release per role.
			release()
			err = errEndsWithSession
		}
		if err == nil {
			cctx, cancel := r.callCtx(bctx, r.m.s.TransactionTimeout)
			rel := codec.ReleaseLease(r.m.me, h.held.Token)
			rel.Fence = h.held.Fence
			_, err = r.m.t.WriteLease(cctx, r.role, h.held.Token, rel)
			if retired(err) {
				// Whether its lease is still the latest is for the
				// confirmation to say: the view may not show it yet.
				err = r.releaseUnderANewEpoch(cctx, h.held.Token, err)
			}
			cancel()
			release()
		}
		switch {
		case errors.Is(err, errEndsWithSession):
			err = nil
			r.log.Info("leaving: the member session's end releases the role", "token", h.held.Token.String())
		case err == nil:
			r.m.sess.drop(r.role, false)
			r.log.Info("released the role", "token", h.held.Token.String())
		case fencing.IsFenced(err) || forgotten(err):
			// Fenced, or the token forgotten after a fence of work's
			// writes: the wait after a loss applies.
			r.m.met.fenced(r.role)
			r.lost(r.m.clk.Now())
			r.log.Info("release fenced: another member already holds the role", "err", err)
		default:
			werr = err
			r.log.Warn("writing the release failed; the lease runs to its deadline", "err", err)
		}
	}
	if q := r.resignQ; q != nil {
		r.resignQ = nil
		q <- werr
	}
	if why == ReasonContextEnded {
		// Leaving: the role is let go (released, or left to the session end).
		// Deregister after the session end, written once every role has stopped
		// (stopped), so that the successor's turn does not wait for it and the
		// session end does not queue behind it on the connection (docs/DESIGN.md,
		// "Why it is safe: a deposed holder stops before its successor starts").
		r.stopped()
		r.m.sess.awaitFinish()
	}
	reg := r.l.registered
	if c, ok := candidate(r.st, r.m.me); ok && c.Offset > r.l.retired {
		reg = max(reg, c.Offset)
	}
	if reg < 0 {
		return
	}
	if !r.ownsKey() {
		// The registration of this member id is another instance's:
		// removing it would make that process step down.
		r.log.Info("not deregistering: the member id's registration is another instance's")
		r.l.retired = max(r.l.retired, reg)
		r.l.registered, r.l.registeredAt = -1, time.Time{}
		return
	}
	release, err := r.slot(bctx, prioCampaign, r.m.s.TransactionTimeout)
	if err == nil {
		cctx, cancel := r.callCtx(bctx, r.m.s.TransactionTimeout)
		err = r.m.t.Deregister(cctx, r.role, r.m.me)
		cancel()
		release()
	}
	if err != nil {
		r.log.Warn("deregistering failed; the registration stays until a holder prunes it", "err", err)
	} else {
		r.log.Info("deregistered", "offset", reg)
	}
	r.l.retired = max(r.l.retired, reg)
	r.l.registered, r.l.registeredAt = -1, time.Time{}
}

// leave is the end of the role's goroutine, after ctx ended.
func (r *runner) leave(ctx context.Context) {
	if !r.m.s.KeepOnExit {
		r.resign(ctx, ReasonContextEnded)
		return
	}
	if h := r.hold; h != nil {
		h.cancel()
		r.awaitWork(h)
		r.revoke(r.m.clk.Now(), ReasonContextEnded, nil, "leaving without resigning")
	}
	if q := r.resignQ; q != nil {
		r.resignQ = nil
		q <- nil
	}
}

// RenewedAt is for tests: when the holding's last renewal began (the
// member session round that last vouched for it, or its election or last
// lease write).
func (r *runner) RenewedAt() time.Time { return r.l.renewedAt }

// retired reports whether err says that the transport retired the token
// it was written under after an unknown outcome (see
// fencing.ErrUnknownOutcome): the error itself, or the ErrNotHeld that
// calls under the retired token get, which wraps fencing.ErrRetired. An
// ErrNotHeld without it is not a retirement (see forgotten).
func retired(err error) bool {
	return errors.Is(err, fencing.ErrUnknownOutcome) || errors.Is(err, fencing.ErrRetired)
}

// forgotten reports whether err is an ErrNotHeld that is not a retirement:
// the transport forgot the token because a write under it (work's, through
// a fencing.Writer or a stream that shares it) was fenced, or it minted a
// newer one. Another member may hold the role: the member treats it as a
// fence (the wait after a loss), never as its own lease to take back.
func forgotten(err error) bool { return errors.Is(err, fencing.ErrNotHeld) && !retired(err) }

// ownLatest reports whether the role's latest lease in the view is this
// member's, under tok.
func (r *runner) ownLatest(tok codec.Token) bool {
	l := r.st.Lease
	return l != nil && l.Member == r.m.me && l.Token == tok && !l.Released()
}

// releaseUnderANewEpoch releases the role when the transport retired the
// holding's token, so that no release can be written under it: it takes a
// new epoch as a challenge does, only after a confirmation still showing
// this member's lease under old as the latest and before the local deadline,
// and releases under that; otherwise it writes nothing and the lease runs
// out (docs/DESIGN.md, "Why it is safe: a deposed holder stops before its
// successor starts", The release). cause is the failed release's error, for
// the log. It returns nil when it released, or the reason it did not.
func (r *runner) releaseUnderANewEpoch(ctx context.Context, old codec.Token, cause error) error {
	end := r.l.renewedAt.Add(r.m.s.RenewDeadline)
	pastDeadline := func() error {
		if r.m.clk.Now().Before(end) {
			return nil
		}
		return fmt.Errorf("%w; not releasing under a new epoch: past the holding's local deadline, the lease may have run out for others", cause)
	}
	if err := pastDeadline(); err != nil {
		return err // before the confirmation's round trip
	}
	cctx, cancel := r.callCtx(ctx, end.Sub(r.m.clk.Now()))
	defer cancel()
	c, err := r.m.src.Confirm(cctx, r.role)
	if err != nil {
		return fmt.Errorf("%w; not releasing under a new epoch: confirming the role's state failed: %v", cause, err)
	}
	r.st = c.State
	if !r.ownLatest(old) {
		return fmt.Errorf("%w; not releasing under a new epoch: the confirmed state shows a newer lease", cause)
	}
	if err := pastDeadline(); err != nil {
		return err // the confirmation took the time that was left
	}
	tok, err := r.m.t.AcquireEpoch(cctx, r.role)
	if err != nil {
		return err
	}
	r.minted[tok] = true
	// A holding of its own, begun and ended by this release: its number
	// is the release's offset, so the release carries none.
	if _, err := r.m.t.WriteLease(ctx, r.role, tok, codec.ReleaseLease(r.m.me, tok)); err != nil {
		return err
	}
	r.log.Info("the holding's token was retired; released the role under a new epoch", "token", old.String(), "new_token", tok.String(), "cause", cause)
	return nil
}
