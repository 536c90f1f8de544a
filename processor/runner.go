package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// maxBurst bounds the actions a role performs in a row without waiting; a
// longer burst means a bug, and the runner backs off instead of spinning.
const maxBurst = 16

// runner runs the succession rules of one role. Its goroutine runs only
// while the role has something to do: between decisions it parks (no
// goroutine), and whatever the role waits for (its timer, a state from
// the source, a note from the member session, a call of the Member, its
// work returning, the end of Run's context) resumes it on a new one
// (resume). One goroutine at a time owns every field, except those said
// otherwise.
type runner struct {
	m    *Member
	role codec.Role

	st   rolestate.State
	l    Local
	hold *holding

	seen *holderKey  // the holder last reported by HolderChanged
	more *runnerMore // what few roles need; nil until one is needed

	// The inbox (any goroutine, under inMu): what others hand the role,
	// each followed by a resume (more of it in runnerMore). note: the
	// member session's word that the holding is lost; rewrite:
	// Member.RewriteLease; woken: poke. closed: the runner has left.
	// state: the source's latest state not taken yet (offerState);
	// fedEnd: the source sends no more.
	inMu    sync.Mutex
	note    *sessNote
	state   *rolestate.State
	rewrite bool
	woken   bool
	fedEnd  bool
	closed  bool

	// The parked loop (any goroutine): running while a goroutine runs it
	// or is about to (or it waits for a place, actors); kicked, resumed
	// meanwhile, so it looks again before it parks; live, started and not
	// left; holds, the role is held (r.hold), so it never waits for a
	// place.
	running, kicked, live atomic.Bool
	stoppedOnce, holds    atomic.Bool

	stopFollow func()
	burst      int
	due        mono // the current wait's end
	// wake: its place in the member's alarm, which resumes the parked
	// loop (Member.wakeAt); under Member.wakeMu.
	wake alarmSlot

	inst *instanceRules // one process per member id; nil without instances

	// withdrawn (any goroutine): Member.Withdraw took the member out of
	// the role's queue until Member.Rejoin (which pokes the role). fed:
	// the source sends the role's states (follow); false: it is polled.
	withdrawn atomic.Bool
	fed       bool
	loaded    bool
}

// runnerMore is the part of a runner that few roles need: for work, for
// calls of Member.Resign and Withdraw, for a Follow goroutine. Made once,
// under inMu (runner.extra); the pointer is read under inMu, each field
// by the owner said here.
type runnerMore struct {
	// The role's goroutine's: lastWork, closed when the last run of work
	// returned; workFails, consecutive work runs that failed within a
	// lease duration of their election; workErr, the error of the work
	// run being resigned for; resignQ, the caller of Member.Resign
	// waiting for this role; followed, closed once Follow's goroutine is
	// done (nil without one).
	lastWork  chan struct{}
	workFails int
	workErr   error
	resignQ   chan error
	followed  chan struct{}

	// Under inMu: resigns, the calls of Member.Resign and Withdraw not
	// taken yet; noteCh, while awaitWorkRenewing waits, signalled at each
	// note; exited, made for the first Member.Resign, closed once the
	// role has left.
	resigns []resignReq
	noteCh  chan struct{}
	exited  chan struct{}
}

// extra returns r.more, made if need be; inMu must not be held.
func (r *runner) extra() *runnerMore {
	r.inMu.Lock()
	defer r.inMu.Unlock()
	return r.extraLocked()
}

// extraLocked is extra with inMu held.
func (r *runner) extraLocked() *runnerMore {
	if r.more == nil {
		r.more = &runnerMore{}
	}
	return r.more
}

// extraIf returns r.more, nil when none was made; inMu must not be held.
func (r *runner) extraIf() *runnerMore {
	r.inMu.Lock()
	defer r.inMu.Unlock()
	return r.more
}

// resignReq is a call of Member.Resign (withdraw false) or Member.Withdraw.
type resignReq struct {
	q        chan error
	withdraw bool
}

// holding is a role this member holds. held is the Held of its election,
// which r.l.held shares until a rewrite: a Held is never written once
// made.
type holding struct {
	held    *Held
	ctx     context.Context // work's
	cancel  context.CancelFunc
	started mono     // its election's start
	run     *workRun // work's run; nil without work
}

// workRun is a holding's run of work, apart so that a holding without
// work is 48 bytes: res carries work's result (nil once taken), done is
// closed when work returned.
type workRun struct {
	res  chan error
	done chan struct{}
}

// holderKey is a holder as HolderChanged reports it: ok false, vacant.
// The token's fields are its own so that ok fits in their padding: 32
// bytes, where a codec.Token field would make it 40 (the 48-byte class).
type holderKey struct {
	member codec.MemberID
	pid    int64
	epoch  int16
	ok     bool
}

func newRunner(m *Member, role codec.Role) *runner {
	l := NewLocal()
	l.ext = m.instExt
	_, l.lookAhead = m.src.(SessionSource)
	var inst *instanceRules
	if m.inst != "" {
		inst = &instanceRules{m: m, role: role}
	}
	return &runner{
		m: m, role: role, l: l, inst: inst,
		st: rolestate.State{Role: role, LeaseOffset: -1},
	}
}

// stopped counts the role down in Run's wait for the roles to stop acting
// (Member.stopping), once: once it no longer acts on the role, leaving,
// before it deregisters.
func (r *runner) stopped() {
	if r.m.stopping != nil && r.stoppedOnce.CompareAndSwap(false, true) {
		r.m.stopping.Done()
	}
}

// ctx is Run's context, which the role runs until (set before start).
func (r *runner) ctx() context.Context { return r.m.runCtx }

// logger is the member's logger with the role: made when a line is
// logged, not kept per role.
func (r *runner) logger() *slog.Logger { return r.m.log.With("role", string(r.role)) }

// start runs the role, with Run's work (Member.runWork), until Run's
// context (Member.runCtx, r's ctx) ends and the member has left it; then it counts down Member.wg. It
// does not block.
func (r *runner) start() {
	r.live.Store(true)
	r.running.Store(true)
	r.m.acts.run(r)
}

// resume runs the loop on a new goroutine if it is parked; if it runs, it
// looks again before it parks. Any goroutine may call it; it never blocks.
// kicked is set before the swap: park clears running before it reads
// kicked, so either park sees the kick or this swap sees it parked.
func (r *runner) resume() {
	if !r.live.Load() {
		return
	}
	r.kicked.Store(true)
	if r.running.CompareAndSwap(false, true) {
		r.m.acts.run(r)
	}
}

// poke wakes the role to decide again.
func (r *runner) poke() {
	r.inMu.Lock()
	r.woken = true
	r.inMu.Unlock()
	r.resume()
}

// askRewrite is Member.RewriteLease's word: rewrite the held lease at once.
func (r *runner) askRewrite() {
	r.inMu.Lock()
	r.rewrite = true
	r.inMu.Unlock()
	r.resume()
}

// putNote hands the runner the member session's word that the holding is
// lost, replacing a note not taken yet; the session resumes the role.
func (r *runner) putNote(n sessNote) {
	r.inMu.Lock()
	r.note = &n
	if r.more != nil && r.more.noteCh != nil {
		select {
		case r.more.noteCh <- struct{}{}:
		default:
		}
	}
	r.inMu.Unlock()
}

// sinkRole is the role, as the member session asks its holdings' runners.
func (r *runner) sinkRole() codec.Role { return r.role }

// takeNote takes the member session's note, if there is one.
func (r *runner) takeNote() (sessNote, bool) {
	r.inMu.Lock()
	n := r.note
	r.note = nil
	r.inMu.Unlock()
	if n == nil {
		return sessNote{}, false
	}
	return *n, true
}

// loop decides and acts until the role has nothing to do before its next
// decision's time (it parks: the goroutine returns), or ctx ended and the
// member left the role. Once loaded, a resume started it, so it first
// takes what woke it.
func (r *runner) loop() {
	if !r.loaded {
		r.follow()
		r.m.met.holder(r.role, r.m.me, false)
		if !r.load(r.ctx()) {
			r.leave(r.ctx())
			r.finish()
			return
		}
		r.loaded = true
		if r.inst != nil {
			r.inst.baseLeaseOff = r.st.LeaseOffset
		}
	} else {
		r.stopTimer()
		if !r.takeOne() {
			now := r.m.clk.Now()
			switch due := r.due.at(now); {
			case now.Before(due):
				// A stale wake (a timer stopped too late, a work's result
				// for a holding over): park again, deciding nothing.
				if !r.park(due) {
					return
				}
			case !r.fed:
				r.poll(r.ctx())
			}
		}
	}
	for {
		if r.ctx().Err() != nil {
			r.leave(r.ctx())
			r.finish()
			return
		}
		a := r.step(r.ctx())
		until := a.Until
		if a.Kind != DoWait {
			if r.burst++; r.burst < maxBurst {
				continue
			}
			r.logger().Error("too many actions in a row; backing off", "last", a.Kind.String())
			until = r.m.clk.Now().Add(r.m.s.RetryBackoff)
		}
		r.burst = 0
		if !r.fed {
			until = earliest(until, r.m.clk.Now().Add(r.m.s.HeartbeatInterval))
		}
		if !r.wait(until) {
			return
		}
	}
}

// wait takes one thing the role waits for, or returns at until; it
// reports false when, with nothing to take, it parked instead (the
// goroutine must return: a resume carries on).
func (r *runner) wait(until time.Time) bool {
	r.due = monoOf(until)
	if r.m.idle != nil {
		r.m.idle(r.role, until)
	}
	return r.park(until)
}

// park is wait after the test hook.
func (r *runner) park(until time.Time) bool {
	for {
		r.kicked.Store(false)
		if r.takeOne() {
			return true
		}
		if !r.m.clk.Now().Before(until) {
			if !r.fed {
				r.poll(r.ctx())
			}
			return true
		}
		r.m.wakeAt(r, until)
		r.running.Store(false)
		// A resume that came before running was cleared only kicked: take
		// the loop back unless a later one started a goroutine already.
		if !r.kicked.Load() || !r.running.CompareAndSwap(false, true) {
			return false
		}
		r.stopTimer()
	}
}

func (r *runner) stopTimer() { r.m.unwake(r) }

// takeOne takes one thing the role waits for, without blocking, and
// reports whether there was one.
func (r *runner) takeOne() bool {
	select {
	case <-r.ctx().Done():
		return true
	case err := <-r.workResult():
		r.workReturned(err)
		return true
	default:
	}
	r.inMu.Lock()
	st, fedEnd := r.state, r.fedEnd && r.fed
	n, rewrite, woken := r.note, r.rewrite, r.woken
	var q resignReq
	asked := false
	switch {
	case st != nil:
		r.state = nil
	case fedEnd:
	case n != nil:
		r.note = nil
	case rewrite:
		r.rewrite = false
	case woken:
		r.woken = false
	case r.more != nil && len(r.more.resigns) > 0:
		x := r.more
		q, asked = x.resigns[0], true
		x.resigns[0] = resignReq{}
		if x.resigns = x.resigns[1:]; len(x.resigns) == 0 {
			x.resigns = nil
		}
	}
	r.inMu.Unlock()
	switch {
	case st != nil:
		r.st = *st
	case fedEnd:
		r.fed = false
	case n != nil:
		r.noted(*n)
	case rewrite:
		r.l.rewriteNow = r.l.held != nil
	case woken:
	case asked:
		r.requestResign(q)
	default:
		return false
	}
	return true
}

// ask queues a call of Member.Resign or Withdraw and resumes the role; it
// returns a channel closed once the role has left, or nil when it has
// left already.
func (r *runner) ask(q resignReq) <-chan struct{} {
	r.inMu.Lock()
	if r.closed {
		r.inMu.Unlock()
		return nil
	}
	x := r.extraLocked()
	x.resigns = append(x.resigns, q)
	if x.exited == nil {
		x.exited = make(chan struct{})
	}
	exited := x.exited
	r.inMu.Unlock()
	r.resume()
	return exited
}

// follow subscribes to the role's states: through the source's
// FollowNotifier when it is one, else through a goroutine that hands the
// role each state the source's Follow sends. Either way the latest state
// waits in the inbox (offerState), replacing one not taken yet.
func (r *runner) follow() {
	if fn, ok := r.m.src.(FollowNotifier); ok {
		r.fed = true
		r.stopFollow = fn.FollowNotify(r.ctx(), r.role, r.offerState)
		return
	}
	fctx, stop := context.WithCancel(r.ctx())
	r.stopFollow = stop
	ch := r.m.src.Follow(fctx, r.role)
	if ch == nil {
		return
	}
	r.fed = true
	followed := make(chan struct{})
	r.extra().followed = followed
	go func() {
		defer close(followed)
		for st := range ch {
			r.offerState(st, true)
		}
		r.offerState(rolestate.State{}, false)
	}()
}

// offerState hands the role the source's latest state (ok), or says that
// the source sends no more (!ok), and resumes it. It never blocks.
func (r *runner) offerState(st rolestate.State, ok bool) {
	r.inMu.Lock()
	if ok {
		r.state = &st
	} else {
		r.fedEnd = true
	}
	r.inMu.Unlock()
	r.resume()
}

// finish ends the role's run once it has left: no resume starts it again,
// the calls waiting are told it left, and done is called.
func (r *runner) finish() {
	r.live.Store(false)
	r.stopTimer()
	r.inMu.Lock()
	r.closed = true
	if r.more != nil && r.more.exited != nil {
		close(r.more.exited)
	}
	r.inMu.Unlock()
	r.stopped() // at the latest
	if r.stopFollow != nil {
		r.stopFollow()
		if x := r.extraIf(); x != nil && x.followed != nil {
			<-x.followed // until the source's sender is done
		}
	}
	r.m.wg.Done()
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
		r.logger().Warn("reading the role failed; retrying", "err", err, "retry_in", d)
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
			r.logger().Warn("reading the role failed", "err", err)
		}
		return
	}
	r.st = st
}

// step observes the role, decides, performs the action and returns it. A
// look-ahead or a confirmation is followed by a decision at the time it
// returned, so a challenge always follows a confirmation that says so.
func (r *runner) step(ctx context.Context) Action {
	now := r.m.clk.Now()
	a := r.decide(ctx, now)
	if a.Kind == DoLookAhead {
		ahead := r.lookAhead(ctx, now)
		if a = Decide(r.st, r.m.me, r.l, now, r.m.s); !a.Deferring.IsZero() {
			// The Member's watch wakes this role if a candidate ahead
			// stops heartbeating first (progress.watch).
			r.m.prog.deferTo(r, ahead)
			a.Until = a.Deferring
		}
	}
	r.m.adm.queue(r.role, a.paused)
	if a.replan {
		r.m.grp.poke()
	}
	if a.Kind == DoConfirm && !r.m.grp.reserve(r.role) {
		return Action{Kind: DoWait, Until: now.Add(r.m.s.HeartbeatInterval), Reason: "the member holds as many of the group's roles as its limit"}
	}
	defer func() {
		if r.hold == nil {
			r.m.grp.release(r.role)
		}
	}()
	if a.Kind == DoConfirm {
		// The challenge's slot, taken before the confirmation so that it
		// does not go stale waiting (docs/DESIGN.md, "Many roles under
		// overload"); a wait in vain does not pause the campaigns.
		release, err := r.slot(ctx, prioCampaign, r.m.s.LeaseDuration)
		if err != nil {
			if ctx.Err() != nil {
				return a
			}
			wait := r.m.s.HeartbeatInterval/2 + rand.N(r.m.s.HeartbeatInterval)
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
	case DoRewriteLease:
		r.rewriteLease(ctx, now)
	case DoStepDown:
		r.stepDown(now, a)
	case DoResign:
		r.resign(ctx, a.Revoke)
	}
	return a
}

// stepDown ends the holding at now as a DoStepDown says. A token the
// transport retired may be taken back at once (rule 5); one it forgot, or
// a newer token in the view, is a loss like any fence (rule 6).
func (r *runner) stepDown(now time.Time, a Action) {
	var cause error
	switch {
	case r.l.tokenErr != nil && a.Revoke == ReasonTokenRetired:
		cause = r.l.tokenErr
		tok := r.hold.held.Token
		r.l.retiredTok = &tok
	case r.l.tokenErr != nil:
		cause = r.l.tokenErr
		r.m.met.fenced(r.role)
		r.lost(now)
	case a.Revoke == ReasonFenced:
		cause = fmt.Errorf("%w: %s", fencing.ErrFenced, a.Reason)
	}
	r.revoke(now, a.Revoke, cause, a.Reason)
}

// inputs records in r.l what the rules need to know beyond the role's
// state (rule 0, and the member's paused campaigns).
func (r *runner) inputs(now time.Time) {
	r.l.tokenErr = nil
	if tc, ok := r.m.t.(fencing.TokenChecker); ok && r.hold != nil {
		r.l.tokenErr = tc.CheckToken(r.role, r.hold.held.Token)
	}
	r.l.instanceAct = nil
	if a, says := r.inst.verdict(r.st, r.l.registered, r.hold != nil, now); says {
		act := a // made here, so that a decision without a verdict allocates nothing
		r.l.instanceAct = &act
	}
	r.l.withdrawn = r.withdrawn.Load()
	paused := r.m.adm.pausedUntil()
	r.l.pausedUntil, r.l.jitter = monoOf(paused), 0
	if now.Before(paused) {
		r.l.jitter = rand.N(r.m.s.HeartbeatInterval)
	}
	r.m.grp.inputs(r.role, &r.l, r.st, now)
}

// decide observes the role at now and applies the rules, after checking
// in with the member session and looking up the session record of the
// lease's holder afresh (heartbeats are not role changes).
func (r *runner) decide(ctx context.Context, now time.Time) Action {
	if n, ok := r.takeNote(); ok {
		r.noted(n)
	}
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
	r.inputs(now)
	a := Decide(r.st, r.m.me, r.l, now, r.m.s)
	if r.m.log.Enabled(ctx, slog.LevelDebug) {
		r.logger().Debug("decided", "action", a.Kind.String(), "reason", a.Reason, "until", a.Until)
	}
	return a
}

// lookAhead records in r.l what rule 7 asks of the candidates ranked
// ahead (DoLookAhead), and returns those alive at now.
func (r *runner) lookAhead(ctx context.Context, now time.Time) []codec.MemberID {
	ss, ok := r.m.src.(SessionSource)
	if !ok || r.l.ownRetired(r.st, r.m.me) {
		r.l.aheadAt = monoOf(now)
		return nil
	}
	ahead, _ := r.l.turn(r.st, r.m.me)
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
	r.l = r.l.withAheadLive(now, until, won)
	return alive
}

// confirm asks the source to confirm the role's state, bounded by
// TransactionTimeout, and returns when the call returned, the time Decide
// must be given (see its doc); false when it failed (the member backs off).
func (r *runner) confirm(ctx context.Context) (time.Time, bool) {
	cctx, cancel := r.callCtx(ctx, r.m.s.TransactionTimeout)
	c, err := r.confirmState(cctx) // confirm.go
	cancel()
	now := r.m.clk.Now()
	if err != nil {
		r.failed(ctx, "confirming the role's state before a challenge", err)
		return now, false
	}
	// The failure count stays until the challenge's calls succeed.
	wasFrozen := r.l.heldBack(r.st) && r.l.openSince != r.l.confAt
	r.st = c.State
	r.l = r.l.Confirmed(now, c)
	if r.l.heldBack(r.st) && r.l.openSince != monoOf(now) && !wasFrozen {
		r.logger().Info("not challenging: the partition's readers are held back by another producer's open transaction, so the lease may have been renewed behind it",
			"producer_id", c.OpenProducerID, "confirm_again_in", r.m.s.HeartbeatInterval)
	}
	if wasFrozen && !r.l.heldBack(r.st) && r.l.vacantSince != 0 {
		// Rule 8: the turns count again from the thaw.
		r.l.vacantSince = monoOf(now)
	}
	return now, true
}

// observeHolder reports a HolderChanged event when the holder at now, as
// this member judges it, differs from the last one reported.
func (r *runner) observeHolder(now time.Time) {
	// What escapes (seen, cur) is made only once the holder changed: a
	// call that finds the same holder allocates nothing.
	l, ok := r.l.holder(r.st, r.m.me, now)
	var key holderKey
	if ok {
		key = holderKey{member: l.Member, pid: l.Token.ProducerID, epoch: l.Token.Epoch, ok: true}
	}
	if r.seen != nil && *r.seen == key {
		return
	}
	seen := key
	r.seen = &seen
	if !ok {
		r.logger().Info("holder changed: vacant")
		r.m.emit(Event{Kind: HolderChanged, Role: r.role, Member: r.m.me, At: now})
		return
	}
	cur, fence := l, r.st.Fence()
	r.logger().Info("holder changed", "holder", string(cur.Member), "token", cur.Token.String(), "fence", fence)
	r.m.emit(Event{Kind: HolderChanged, Role: r.role, Member: r.m.me, At: now, Holder: &cur, Fence: fence})
}

func (r *runner) callCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return withTimeout(ctx, r.m.clk, d)
}

// failed records a failed call and schedules the retry, counted from
// when the call returned; one cut short by the end of ctx is no warning.
func (r *runner) failed(ctx context.Context, what string, err error) {
	r.l.failures++
	d := r.m.s.backoff(r.l.failures)
	r.l.retryAt = monoOf(r.m.clk.Now().Add(d))
	level := slog.LevelWarn
	if ctx.Err() != nil {
		level = slog.LevelDebug
	}
	r.logger().Log(ctx, level, what+" failed", "err", err, "failures", r.l.failures, "retry_in", d)
}

func (r *runner) succeeded() { r.l.failures, r.l.retryAt = 0, 0 }

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
// show in the view (rule 4) counts from when Register returned.
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
	r.l.registered, r.l.registeredAt = off, monoOf(r.m.clk.Now())
	r.logger().Info("registered", "offset", off, "why", why)
}

// challenge takes the role: AcquireEpoch, then the lease under the new
// token, then the prunes (rule 9). A lease write refused as fenced is a
// lost race (rule 6), counted from when the refusal came.
//
// held is the call slot the confirmation took for the challenge (see
// step), which challenge gives back; nil: challenge waits for one itself.
func (r *runner) challenge(ctx context.Context, prune []codec.MemberID, held func()) {
	r.logger().Info("challenging: the confirmed state says so")
	// One slot for both calls, so that the transaction AcquireEpoch begins
	// never waits for a slot.
	release := held
	if release == nil {
		var err error
		if release, err = r.slot(ctx, prioCampaign, r.m.s.HeartbeatInterval); err != nil {
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
	r.inst.mint(tok)
	r.logger().Info("acquired an epoch", "token", tok.String())
	start := r.m.clk.Now()
	lease := r.lease(tok, start, 0) // its own offset is the holding's number
	if lease.Session == nil {
		r.failed(ctx, "challenge", errors.New("no member session to name in the lease"))
		return
	}
	// Not cut short by the end of Run's context: once committed, the
	// member releases the role on its way out; cut short, it might commit
	// unseen.
	wctx, wcancel := r.callCtx(context.WithoutCancel(ctx), r.m.s.TransactionTimeout)
	defer wcancel()
	fence, err := r.m.t.WriteLease(wctx, r.role, tok, lease)
	release()
	release = nil
	if err != nil {
		if fencing.IsFenced(err) {
			r.m.met.fenced(r.role)
			r.lost(r.m.clk.Now())
			r.logger().Info("lost a challenge race: another member took the role; waiting for its lease", "token", tok.String(), "lease_offset", r.st.LeaseOffset)
			return
		}
		if retired(err) {
			// The lease may have committed unseen under a retired token:
			// rule 5 lets this member take it back, and meanwhile the
			// heartbeats exclude the role.
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
	r.l.lostAt, r.l.lostOff, r.l.retiredTok = 0, noKey, nil
	r.elected(ctx, start)
	if len(prune) == 0 {
		return
	}
	// The next renewal is due in HeartbeatInterval: pruning must not delay it.
	pctx, pcancel := r.callCtx(ctx, r.m.s.HeartbeatInterval)
	defer pcancel()
	for _, p := range prune {
		release, err := r.m.lim.acquire(pctx, prioCampaign)
		if err == nil {
			err = r.m.t.Deregister(pctx, r.role, p)
			release()
		}
		if err != nil {
			r.logger().Warn("pruning a candidate failed", "candidate", string(p), "err", err)
			continue
		}
		r.logger().Info("pruned a candidate that did not challenge in its turn", "candidate", string(p))
	}
}

// challengeTimedOut records a challenge that did not finish in time (its
// calls, or the wait for a call slot): the role backs off as after any
// failure, and the member pauses all its campaigns (admission).
func (r *runner) challengeTimedOut(ctx context.Context, err error) {
	r.failed(ctx, "challenge (timed out)", err)
	if d := r.m.adm.challengeTimedOut(r.m.clk.Now()); r.l.retryAt.at(r.m.clk.Now()).Before(r.m.clk.Now().Add(d)) {
		r.l.retryAt = monoOf(r.m.clk.Now().Add(d))
	}
}

// lease returns a lease of this member under tok, of the holding numbered
// fence (0 for the holding's first lease), whose write begins at start.
func (r *runner) lease(tok codec.Token, start time.Time, fence int64) codec.Lease {
	ms := start.UnixMilli()
	return codec.Lease{Member: r.m.me, Token: tok, GrantedAt: ms, Deadline: ms + r.m.s.LeaseDuration.Milliseconds(), Fence: fence,
		Session: r.m.sess.shared()}
}

// lost records that this member was fenced or lost a challenge race at
// now (rule 6).
func (r *runner) lost(now time.Time) {
	// The loss ends rule 5's exception.
	r.l.lostAt, r.l.lostOff, r.l.retiredTok = monoOf(now), r.st.LeaseOffset, nil
}

// elected makes the member the holder of the role after a successful
// challenge: the member session keeps it from start on, it reports, and
// starts work on a context derived from ctx (Run's).
func (r *runner) elected(ctx context.Context, start time.Time) {
	held := r.l.held
	// Without work nothing watches the holding's context: none is made.
	wctx, cancel := ctx, context.CancelFunc(noop)
	if r.m.runWork != nil {
		wctx, cancel = context.WithCancel(ctx)
	}
	h := &holding{held: held, ctx: wctx, cancel: cancel, started: monoOf(start)}
	r.m.adm.dequeue(r.role)
	r.l.writtenAt = monoOf(start)
	r.hold = h
	r.holds.Store(true)
	nonce := ""
	if held.Lease.Session != nil {
		nonce = held.Lease.Session.Nonce
	}
	r.m.sess.hold(held.Token, nonce, start, r, cancel)
	r.m.met.holder(r.role, r.m.me, true)
	r.m.met.transition(r.role, "elected")
	r.m.met.campaignBackoff(r.role, 0)
	r.logger().Info("elected", "token", held.Token.String(), "fence", held.Fence, "deadline", held.Lease.Deadline)
	r.m.emit(Event{Kind: Elected, Role: r.role, Member: r.m.me, At: start, Token: held.Token, Fence: held.Fence})
	r.startWork(h)
}

// startWork starts work for h, after the previous run has returned.
func (r *runner) startWork(h *holding) {
	if r.m.runWork == nil {
		return
	}
	x := r.extra()
	prev := x.lastWork
	wr := &workRun{res: make(chan error, 1), done: make(chan struct{})}
	h.run = wr
	x.lastWork = wr.done
	work, held := r.m.runWork, *h.held
	r.m.works.Add(1)
	go func() {
		defer r.m.works.Done()
		defer close(wr.done)
		if prev != nil {
			<-prev // never two runs of a role's work at once
		}
		if h.ctx.Err() != nil {
			return
		}
		wr.res <- work(h.ctx, held)
		r.resume()
	}()
}

// workResult is the channel on which the running work's result comes,
// nil when no work runs for a held role.
func (r *runner) workResult() <-chan error {
	if r.hold == nil || r.hold.run == nil {
		return nil
	}
	return r.hold.run.res
}

// workReturned handles work returning while the role is held.
func (r *runner) workReturned(err error) {
	now := r.m.clk.Now()
	r.hold.run.res = nil // it sends once
	if err == nil {
		r.logger().Info("work returned; keeping the role")
		return
	}
	x := r.extra()
	if now.Sub(r.hold.started.at(now)) >= r.m.s.LeaseDuration {
		x.workFails = 0
	}
	x.workFails++
	d := r.m.s.workBackoff(x.workFails)
	r.l.resign = ReasonWorkFailed
	r.l.campaignAt = monoOf(now.Add(d))
	r.hold.cancel()
	x.workErr = err
	r.m.met.workFailed(r.role, d)
	r.logger().Warn("work failed; resigning the role and backing off before campaigning again",
		"err", err, "consecutive_failures", x.workFails, "campaign_in", d)
}

// rewriteLease writes the held lease again under the holding's token,
// naming the current member session (rule 2). A rewrite is a renewal: the
// session moves the local deadline.
func (r *runner) rewriteLease(ctx context.Context, now time.Time) {
	asked := r.l.rewriteNow
	r.l.rewriteNow = false
	h := r.l.held
	expiry, ok := r.m.sess.deadline(r.role)
	if !ok {
		return // the session ended the holding: its note says why
	}
	// The wait for a slot counts against the local deadline; the write
	// itself begins only once it has a slot, so no transaction waits.
	release, err := r.slot(ctx, prioRewrite, expiry.Sub(now))
	var lease codec.Lease
	if err == nil {
		// Bounded by TransactionTimeout only: a write cut short gets no
		// definite answer, retires the token and leaves a transaction open
		// that holds readers back. One that ends late ends the holding.
		cctx, cancel := r.callCtx(context.WithoutCancel(ctx), r.m.s.TransactionTimeout)
		lease = r.lease(h.Token, now, h.Fence) // dated from the step's start, before the wait: on the safe side
		_, err = r.m.t.WriteLease(cctx, r.role, h.Token, lease)
		cancel()
		release()
	}
	took := r.m.clk.Now().Sub(now)
	switch {
	case fencing.IsFenced(err) || forgotten(err):
		// Forgotten after another write under it was fenced: a loss too.
		r.m.met.leaseRewritten(took, "fenced")
		r.m.met.fenced(r.role)
		r.lost(r.m.clk.Now())
		r.revoke(r.m.clk.Now(), ReasonFenced, err, "the lease rewrite was fenced")
		return
	case retired(err):
		// This or another write under the token got no definite answer.
		r.m.met.leaseRewritten(took, "retired")
		tok := h.Token
		r.l.retiredTok = &tok
		r.revoke(r.m.clk.Now(), ReasonTokenRetired, err, "the transport retired the holding's token")
		return
	case err != nil:
		r.m.met.leaseRewritten(took, "error")
		r.failed(ctx, "rewrite the lease", err)
		r.l.rewriteNow = asked // a value change is written after the backoff, not an hour later
		return
	}
	r.m.met.leaseRewritten(took, "ok")
	r.succeeded()
	r.l.writtenAt = monoOf(now)
	// Past the local deadline, the session ended the holding already and
	// this changes nothing: its note revokes it.
	r.m.sess.rewritten(r.role, now)
	if r.l.held == h { // a new Held: the holding's stays as elected
		nh := *h
		nh.Lease = lease
		r.l.held = &nh
	}
	if r.m.log.Enabled(ctx, slog.LevelDebug) {
		r.logger().Debug("rewrote the lease", "token", h.Token.String(), "deadline", lease.Deadline, "took", took)
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
	r.holds.Store(false)
	// Until a release shows (or another lease), the heartbeats exclude
	// the role: its lease may still name the member session.
	r.m.sess.drop(r.role, true)
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
	r.logger().Info("revoked", attrs...)
	r.m.emit(Event{Kind: Revoked, Role: r.role, Member: r.m.me, At: now, Token: h.held.Token, Fence: h.held.Fence, Reason: why, Err: cause})
}

// awaitWork waits for h's work to return, at most until the local
// deadline; not at all once the session ended the holding.
func (r *runner) awaitWork(h *holding) {
	if h.run == nil {
		return
	}
	select {
	case <-h.run.done:
		return // returned already: no warning, whatever the deadline
	default:
	}
	end, _ := r.m.sess.deadline(r.role)
	t := r.m.clk.NewTimer(end.Sub(r.m.clk.Now()))
	defer t.Stop()
	select {
	case <-h.run.done:
	case <-t.C():
		r.logger().Warn("work did not return by the local deadline; going on without it")
	}
}

// awaitWorkRenewing waits, with no bound of its own, for h's work to return,
// checking in with the member session so that its heartbeats keep
// vouching for the role (see "Stepping down while work stops" in the
// package doc). Once the holding is lost it stops waiting.
func (r *runner) awaitWorkRenewing(h *holding) {
	if h.run == nil {
		return
	}
	noted := make(chan struct{}, 1)
	r.inMu.Lock()
	r.extraLocked().noteCh = noted
	r.inMu.Unlock()
	defer func() {
		r.inMu.Lock()
		r.more.noteCh = nil
		r.inMu.Unlock()
	}()
	for {
		if n, ok := r.takeNote(); ok {
			if n.lost == ReasonFenced {
				r.m.met.fenced(r.role)
				r.lost(r.m.clk.Now())
			}
			r.logger().Info("the holding was lost while work stopped; going on without work", "reason", string(n.lost), "err", n.cause)
			return
		}
		if _, held := r.m.sess.deadline(r.role); !held {
			return
		}
		t := r.m.clk.NewTimer(r.m.s.HeartbeatInterval) // armed before the check-in it follows
		r.m.sess.checkIn(r.role, r.m.clk.Now())
		select {
		case <-h.run.done:
			t.Stop()
			return
		case <-t.C():
		case <-noted:
			t.Stop()
		}
	}
}

// renewsWhileWorkStops reports whether a resignation for why keeps the
// holding renewed while work stops: an operator's step-down, Resign,
// Withdraw and Run's end, which wait for work anyway.
func renewsWhileWorkStops(why Reason) bool {
	switch why {
	case ReasonDeregistered, ReasonResigned, ReasonContextEnded, ReasonHandedOver:
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
		r.l.resign, r.extra().resignQ = ReasonResigned, req.q
		return
	}
	if r.hold == nil {
		req.q <- ErrNotHolder
		return
	}
	r.l.resign, r.extra().resignQ = ReasonResigned, req.q
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
	// A fresh context: the release and the deregistration each get their
	// TransactionTimeout once they have a slot.
	bctx := context.WithoutCancel(ctx)
	var werr error
	if h != nil {
		var cause error
		if x := r.extraIf(); x != nil {
			cause, x.workErr = x.workErr, nil
		}
		end, _ := r.m.sess.deadline(r.role) // zero once the session ended the holding
		r.revoke(r.m.clk.Now(), why, cause, "")
		release, err := r.slot(bctx, prioRelease, r.m.s.TransactionTimeout)
		if err == nil && why == ReasonContextEnded && r.m.sess.ending(h.held.Lease) {
			// Leaving: the session end releases it with the others.
			release()
			err = errEndsWithSession
		}
		if err == nil {
			cctx, cancel := r.callCtx(bctx, r.m.s.TransactionTimeout)
			rel := codec.ReleaseLease(r.m.me, h.held.Token)
			rel.Fence, rel.Cause = h.held.Fence, r.m.grp.releaseCause(why)
			_, err = r.m.t.WriteLease(cctx, r.role, h.held.Token, rel)
			if retired(err) {
				// Whether its lease is still the latest is for a
				// confirmation to say.
				err = r.releaseUnderANewEpoch(cctx, h.held.Token, end, err, rel.Cause)
			}
			cancel()
			release()
		}
		switch {
		case errors.Is(err, errEndsWithSession):
			err = nil
			r.logger().Info("leaving: the member session's end releases the role", "token", h.held.Token.String())
		case err == nil:
			r.m.sess.drop(r.role, false)
			r.logger().Info("released the role", "token", h.held.Token.String())
		case fencing.IsFenced(err) || forgotten(err):
			// Fenced, or the token forgotten: rule 6.
			r.m.met.fenced(r.role)
			r.lost(r.m.clk.Now())
			r.logger().Info("release fenced: another member already holds the role", "err", err)
		default:
			werr = err
			r.logger().Warn("writing the release failed; the lease runs to its deadline", "err", err)
		}
	}
	if x := r.extraIf(); x != nil && x.resignQ != nil {
		q := x.resignQ
		x.resignQ = nil
		q <- werr
	}
	if why == ReasonContextEnded {
		// Deregister after the session end, which must not queue behind it
		// (docs/DESIGN.md, "Why it is safe: a deposed holder stops before
		// its successor starts").
		r.stopped()
		r.m.sess.awaitFinish()
	}
	reg := r.l.registered
	if c, ok := candidate(r.st, r.m.me); ok && c.Offset > r.l.deregistered {
		reg = max(reg, c.Offset)
	}
	if reg < 0 {
		return
	}
	if !r.inst.ownsKey(r.st, r.l.registered) {
		// Another instance's: removing it would make that one step down.
		r.logger().Info("not deregistering: the member id's registration is another instance's")
		r.l.deregistered = max(r.l.deregistered, reg)
		r.l.registered, r.l.registeredAt = -1, 0
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
		r.logger().Warn("deregistering failed; the registration stays until a holder prunes it", "err", err)
	} else {
		r.logger().Info("deregistered", "offset", reg)
	}
	r.l.deregistered = max(r.l.deregistered, reg)
	r.l.registered, r.l.registeredAt = -1, 0
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
	if x := r.extraIf(); x != nil && x.resignQ != nil {
		q := x.resignQ
		x.resignQ = nil
		q <- nil
	}
}

// retired reports whether err says that the transport retired the token
// after an unknown outcome: fencing.ErrUnknownOutcome, or the ErrNotHeld
// wrapping fencing.ErrRetired that later calls under it get.
func retired(err error) bool {
	return errors.Is(err, fencing.ErrUnknownOutcome) || errors.Is(err, fencing.ErrRetired)
}

// forgotten reports whether err is an ErrNotHeld that is not a retirement:
// the transport forgot the token after a fenced write under it, or minted
// a newer one. Another member may hold the role: a fence (rule 6).
func forgotten(err error) bool { return errors.Is(err, fencing.ErrNotHeld) && !retired(err) }

// ownLatest reports whether the role's latest lease in the view is this
// member's, under tok.
func (r *runner) ownLatest(tok codec.Token) bool {
	l := r.st.Lease
	return l != nil && l.Member == r.m.me && l.Token == tok && !l.Released()
}

// releaseUnderANewEpoch releases the role under a new epoch when the
// transport retired the holding's token, only after a confirmation still
// shows its own lease under old as the latest and before end, the
// holding's local deadline (docs/DESIGN.md, "Why it is safe: a deposed
// holder stops before its successor starts", the release). cause is the failed
// release's error, why the release's cause. It returns nil when it
// released, or why it did not.
func (r *runner) releaseUnderANewEpoch(ctx context.Context, old codec.Token, end time.Time, cause error, why codec.Cause) error {
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
	r.inst.mint(tok)
	// A holding of its own, numbered by its offset: it carries no Fence.
	rel := codec.ReleaseLease(r.m.me, tok)
	rel.Cause = why
	if _, err := r.m.t.WriteLease(ctx, r.role, tok, rel); err != nil {
		return err
	}
	r.logger().Info("the holding's token was retired; released the role under a new epoch", "token", old.String(), "new_token", tok.String(), "cause", cause)
	return nil
}

// noted applies the session's word that the holding is lost: it ends at
// once.
func (r *runner) noted(n sessNote) {
	if r.hold == nil {
		return
	}
	now := r.m.clk.Now()
	switch {
	case n.vanished:
		// Its transactional id expired: nobody took the role (rule 5).
		tok := r.hold.held.Token
		r.l.retiredTok = &tok
	case n.lost == ReasonFenced:
		r.lost(now) // rule 6: another member's lease is on its way
	}
	r.revoke(now, n.lost, n.cause, "the member session ended the holding")
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
		st.Session = r.m.sharedSeen(l.Member, se)
		r.st = st
	}
}

// confirmState confirms the role's state through the source: from its own
// recent reads when it can (RecentConfirmer, within ConfirmFreshness),
// else with Confirm's round trip.
func (r *runner) confirmState(ctx context.Context) (rolestate.Confirmed, error) {
	if rc, ok := r.m.src.(RecentConfirmer); ok {
		if w := r.m.s.ConfirmFreshness(); w > 0 {
			return rc.ConfirmRecent(ctx, r.role, w)
		}
	}
	return r.m.src.Confirm(ctx, r.role)
}

func noop() {}
