package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// session is the member's session (docs/DESIGN.md, "Why it is safe: member
// sessions"): its goroutine (run) writes the heartbeat rounds; the runners
// name it in their leases, hold, drop and check in through its methods,
// and are told when a holding is lost (runner.putNote, then runner.noted).
type session struct {
	m *Member

	starting sync.Mutex // one StartSession at a time
	closing  bool       // a session end is being written: no new incarnation until it is

	mu         sync.Mutex
	cur        codec.Session  // the current incarnation; Nonce "" when none
	curShared  *codec.Session // cur as the leases naming it share it (shared); read-only
	unanswered bool           // a heartbeat got no answer: StartSession again before the next
	fenced     bool           // the unanswered heartbeat was fenced: another process may have taken the session
	// unsettled: the earliest local deadline a heartbeat with no definite
	// answer vouched for (zero: none); a start at or after it is late.
	unsettled time.Time
	held      map[codec.Role]*sessHold
	// deadlines ends each holding at its local deadline (expire).
	deadlines alarm[*sessHold]
	// excluded: roles the heartbeats must not vouch for (let go without a
	// release: their latest lease may still name the incarnation).
	excluded map[codec.Role]struct{}
	dirty    bool // excluded changed since the last heartbeat
	ended    bool // Run is over: no new incarnation
	wake     chan struct{}
	vetted   chan struct{} // closed once vetAtStart is done (vetDone): no StartSession before
	vetOnce  sync.Once
	finished chan struct{} // closed once finish is done: the session end written, or not to be
	finOnce  sync.Once
	// finishing: Run's goroutine will call finish, so awaitFinish may wait.
	finishing atomic.Bool
}

// sessHold is a held role as the session knows it. The session alone
// decides when a holding ends: its local deadline is the start of its
// last renewal (election, lease write or heartbeat round) plus
// HeartbeatDeadline, kept in its place in session.deadlines. At that
// deadline the session cancels the holding's work, forgets it and tells
// the runner it is lost (expire).
// Its role is its runner's (to.sinkRole), and its key in session.held:
// 64 bytes a holding.
type sessHold struct {
	tok       codec.Token
	deadline  alarmSlot          // its local deadline, in session.deadlines
	checkedIn mono               // the runner's last check-in
	to        noteSink           // the runner
	cancel    context.CancelFunc // the holding's work context
}

// noteSink is where the session's word on a held role goes: its runner,
// which keeps the note, and resumes on resume. sinkRole is the role.
type noteSink interface {
	putNote(n sessNote)
	resume()
	sinkRole() codec.Role
}

// sessNote is what the session tells a role's runner: its holding is lost
// (lost is the reason, cause why). A renewal needs no word: the runner
// asks the session for the deadline when it needs it.
type sessNote struct {
	lost  Reason
	cause error
	// vanished: the role's transactional id expired (rule 5 of Decide).
	vanished bool
}

func newSession(m *Member) *session {
	s := &session{m: m, held: map[codec.Role]*sessHold{}, excluded: map[codec.Role]struct{}{}, wake: make(chan struct{}, 1), vetted: make(chan struct{}),
		finished: make(chan struct{})}
	s.deadlines = alarm[*sessHold]{mu: &s.mu, clk: m.clk, fire: s.expire}
	return s
}

// newNonce draws an incarnation nonce: 16 random hex digits.
func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ensure returns the current incarnation, beginning one (StartSession)
// when there is none. Starts are one at a time, and the call is made
// without mu, so that runners checking in never wait for it.
func (s *session) ensure(ctx context.Context) (codec.Session, error) {
	select {
	case <-s.vetted:
	case <-ctx.Done():
		return codec.Session{}, fmt.Errorf("waiting for the check that no other process runs this member id's session: %w", ctx.Err())
	}
	s.starting.Lock()
	defer s.starting.Unlock()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return codec.Session{}, errors.New("the member is leaving: no new session")
	}
	if s.closing {
		s.mu.Unlock()
		return codec.Session{}, errors.New("the member session's incarnation is ending; try again")
	}
	prev := s.cur
	if prev.Nonce != "" && !s.unanswered {
		s.mu.Unlock()
		return prev, nil
	}
	s.mu.Unlock()
	nonce := prev.Nonce
	if nonce == "" {
		nonce = newNonce()
	}
	cur, err := s.m.t.StartSession(ctx, s.m.me, nonce)
	if err != nil {
		return codec.Session{}, fmt.Errorf("starting the member session: %w", err)
	}
	started := s.m.clk.Now()
	s.mu.Lock()
	switch {
	case prev.Nonce != "" && s.cur.Nonce == prev.Nonce && cur.ProducerID != prev.ProducerID:
		// A new producer id cannot keep the incarnation's leases (they
		// name the old one): the incarnation is over.
		s.endLocked(ReasonLeaseLost, errors.New("the member session's producer id changed"))
		cur.Nonce = newNonce()
	case prev.Nonce != "" && s.cur.Nonce != prev.Nonce:
		// The incarnation ended while the session started again: this
		// start begins a new one.
		cur.Nonce = newNonce()
	case prev.Nonce != "" && !s.unsettled.IsZero() && !started.Before(s.unsettled):
		// The unanswered heartbeat could commit until this start, so after
		// the deadline: late. The end goes under the new epoch.
		end := s.endLateLocked(cur, "a heartbeat with no definite answer may have committed after the member's own deadline",
			"deadline", s.unsettled, "started", started)
		s.mu.Unlock()
		s.writeEnd(ctx, end)
		s.mu.Lock()
		if s.ended {
			s.mu.Unlock()
			return codec.Session{}, errors.New("the member is leaving: no new session")
		}
		cur.Nonce = newNonce()
	}
	s.cur, s.unanswered, s.unsettled = cur, false, time.Time{}
	s.mu.Unlock()
	s.m.log.Info("member session", "producer_id", cur.ProducerID, "epoch", cur.Epoch, "nonce", cur.Nonce)
	return cur, nil
}

// hold records that the member holds to's role under tok, elected at
// start, with a lease naming the incarnation nonce; to and cancel are the
// runner's. An incarnation that ended meanwhile loses the holding at once.
func (s *session) hold(tok codec.Token, nonce string, start time.Time, to noteSink, cancel context.CancelFunc) {
	role := to.sinkRole()
	s.mu.Lock()
	if s.cur.Nonce == "" || s.cur.Nonce != nonce {
		s.mu.Unlock()
		cancel()
		to.putNote(sessNote{lost: ReasonLeaseLost, cause: errors.New("the member session's incarnation that the lease names ended before the holding began")})
		to.resume()
		return
	}
	first := len(s.held) == 0
	s.forgetLocked(role)
	h := &sessHold{tok: tok, checkedIn: monoOf(start), to: to, cancel: cancel}
	s.held[role] = h
	s.expireLocked(s.deadlines.set(h, start.Add(s.m.s.HeartbeatDeadline)))
	_, wasExcluded := s.excluded[role]
	if wasExcluded {
		delete(s.excluded, role)
		s.dirty = true
	}
	s.mu.Unlock()
	// A round at once only for the first holding, or one the heartbeats
	// still exclude; otherwise the next round vouches for it
	// (docs/DESIGN.md, "Many roles under overload").
	if !wasExcluded && !first {
		return
	}
	s.poke()
}

// poke asks for a round at once.
func (s *session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// holdings returns how many roles the member holds.
func (s *session) holdings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// holds reports whether the member holds role.
func (s *session) holds(role codec.Role) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[role] != nil
}

// deadline returns role's local deadline, and false when the session
// holds no such role (never held, let go, or lost: its note says why).
func (s *session) deadline(role codec.Role) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[role]
	if h == nil {
		return time.Time{}, false
	}
	return h.deadline.at.at(s.m.clk.Now()), true
}

// rewritten records a lease rewrite of role begun at at: a renewal.
func (s *session) rewritten(role codec.Role, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.held[role]; h != nil {
		s.extendLocked(h, at)
	}
}

// extendLocked moves h's local deadline to at + HeartbeatDeadline, unless
// later already. A holding past its deadline is not revived: the
// deadlines' timer ends it.
func (s *session) extendLocked(h *sessHold, at time.Time) {
	d := at.Add(s.m.s.HeartbeatDeadline)
	now := s.m.clk.Now()
	if !h.deadline.queued() || !now.Before(h.deadline.at.at(now)) || monoOf(d) <= h.deadline.at {
		return
	}
	s.expireLocked(s.deadlines.set(h, d))
}

// forgetLocked removes role's holding, and its deadline.
func (s *session) forgetLocked(role codec.Role) {
	if h := s.held[role]; h != nil {
		s.deadlines.remove(h)
		delete(s.held, role)
	}
}

// expire is the deadlines' timer: it ends the holdings due, unless they
// ended meanwhile.
func (s *session) expire(due []*sessHold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range due {
		if s.held[h.to.sinkRole()] == h && !h.deadline.queued() {
			s.expireLocked([]*sessHold{h})
		}
	}
}

// expireLocked ends holdings past their local deadline (out of the
// deadlines already): their work is cancelled, and the heartbeats exclude
// them, since their leases still name the incarnation.
func (s *session) expireLocked(due []*sessHold) {
	for _, h := range due {
		h.cancel()
		h.tell(sessNote{lost: ReasonLeaseLost, cause: fmt.Errorf("no heartbeat or lease write renewed the holding within the heartbeat deadline %v", s.m.s.HeartbeatDeadline)})
		role := h.to.sinkRole()
		delete(s.held, role)
		s.excluded[role] = struct{}{}
		s.dirty = true
	}
}

func (h *sessHold) alarmAt() *alarmSlot { return &h.deadline }

// queued reports whether the entry is in its alarm.
func (x *alarmSlot) queued() bool { return x.idx > 0 }

// checkIn records that role's runner is alive at now.
func (s *session) checkIn(role codec.Role, now time.Time) {
	s.mu.Lock()
	if h := s.held[role]; h != nil && monoOf(now) > h.checkedIn {
		h.checkedIn = monoOf(now)
	}
	s.mu.Unlock()
}

// drop records that the member no longer holds role. exclude: its latest
// lease may still name the incarnation (no release was written), so the
// heartbeats exclude it until the member's view shows another.
func (s *session) drop(role codec.Role, exclude bool) {
	s.mu.Lock()
	s.forgetLocked(role)
	_, was := s.excluded[role]
	if exclude && s.cur.Nonce != "" {
		s.excluded[role] = struct{}{}
	} else {
		delete(s.excluded, role)
	}
	_, is := s.excluded[role]
	s.dirty = s.dirty || was != is
	s.mu.Unlock()
}

// settle ends role's exclusion once st shows that its latest lease no
// longer names this incarnation.
func (s *session) settle(role codec.Role, st rolestate.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.excluded[role]; !ok {
		return
	}
	l := st.Lease
	if l == nil || l.Released() || l.Session == nil || l.Member != s.m.me || l.Session.Nonce != s.cur.Nonce {
		delete(s.excluded, role)
		s.dirty = true
	}
}

// current returns the current incarnation (Nonce "" when none).
func (s *session) current() codec.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// shared returns the current incarnation, nil when none: one value per
// incarnation, which the leases naming it share; read-only.
func (s *session) shared() *codec.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Nonce == "" {
		return nil
	}
	if s.curShared == nil || *s.curShared != s.cur {
		c := s.cur
		s.curShared = &c
	}
	return s.curShared
}

// endLocked ends the incarnation: every held role is lost, and nothing is
// excluded any more (no later heartbeat vouches for the old leases).
func (s *session) endLocked(why Reason, cause error) {
	for role, h := range s.held {
		h.cancel()
		h.tell(sessNote{lost: why, cause: cause})
		s.forgetLocked(role)
	}
	clear(s.excluded)
	s.cur, s.unanswered, s.dirty, s.unsettled = codec.Session{}, false, false, time.Time{}
}

// endLateLocked ends the incarnation after a heartbeat that committed, or
// may have, after a vouched role's deadline, and returns the session end
// to write (writeEnd), before which ensure starts no new incarnation.
func (s *session) endLateLocked(sess codec.Session, why string, attrs ...any) codec.Heartbeat {
	s.m.log.Warn(why+"; ending the session's incarnation", attrs...)
	s.endLocked(ReasonLeaseLost, errors.New(why))
	s.closing = true
	return codec.Heartbeat{Member: s.m.me, Session: sess, End: true}
}

// writeEnd writes the session end endLateLocked returned, without the
// lock, bounded by TransactionTimeout only; then new incarnations may start.
func (s *session) writeEnd(ctx context.Context, end codec.Heartbeat) {
	ectx, cancel := withTimeout(context.WithoutCancel(ctx), s.m.clk, s.m.s.TransactionTimeout)
	if err := s.m.t.Heartbeat(ectx, end); err != nil {
		s.m.log.Warn("writing the session end failed; the old leases run out their spans", "err", err)
	}
	cancel()
	s.mu.Lock()
	s.closing = false
	s.mu.Unlock()
}

// tell gives the runner n, and resumes it.
func (h *sessHold) tell(n sessNote) {
	h.to.putNote(n)
	h.to.resume()
}

// run writes a heartbeat round every HeartbeatInterval, holding roles or
// not (the member id's sign of life), until ctx ends; then it drains, and
// writes the session end once the runners have stopped (finish).
func (s *session) run(ctx context.Context, stopped <-chan struct{}) {
	// From the previous round's start, as a holder's deadline counts.
	next := s.m.clk.Now().Add(s.m.s.HeartbeatInterval - roundJitter(s.m.s))
	for {
		t := s.m.clk.NewTimer(next.Sub(s.m.clk.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			if s.m.s.KeepOnExit {
				// KeepOnExit: no round; one would hand over the roles let go.
				<-stopped
			} else {
				s.drain(context.WithoutCancel(ctx), stopped, next)
			}
			s.finish(ctx)
			return
		case <-t.C():
		case <-s.wake:
			t.Stop()
		}
		start := s.m.clk.Now()
		s.round(ctx)
		next = start.Add(s.m.s.HeartbeatInterval - roundJitter(s.m.s))
	}
}

// drain goes on writing rounds after Run's context ended, until the
// runners have stopped, so that a holder whose work is still stopping
// keeps its roles (see "Stepping down while work stops" in the package
// doc). ctx is not cancelled; each call is bounded by TransactionTimeout.
func (s *session) drain(ctx context.Context, stopped <-chan struct{}, next time.Time) {
	for {
		t := s.m.clk.NewTimer(next.Sub(s.m.clk.Now()))
		select {
		case <-stopped:
			t.Stop()
			return
		case <-t.C():
		case <-s.wake:
			t.Stop()
		}
		start := s.m.clk.Now()
		s.round(ctx)
		next = start.Add(s.m.s.HeartbeatInterval - roundJitter(s.m.s))
	}
}

// round is one heartbeat round (docs/DESIGN.md, "Why it is safe: member
// sessions", each round): drop stuck roles, DescribeMany over the held
// roles' tokens, then one heartbeat; each role it confirmed has its local
// deadline moved to the round's start + HeartbeatDeadline.
func (s *session) round(ctx context.Context) {
	start := s.m.clk.Now()
	s.mu.Lock()
	if s.cur.Nonce == "" {
		s.mu.Unlock()
		return
	}
	stale := start.Add(-(s.m.s.TransactionTimeout + s.m.s.HeartbeatInterval))
	roles := make([]codec.Role, 0, len(s.held))
	for role, h := range s.held {
		if h.checkedIn < monoOf(stale) {
			// Stuck: not checked in for longer than a call may take.
			h.cancel()
			h.tell(sessNote{lost: ReasonLeaseLost, cause: errors.New("the role's runner did not check in with the member session")})
			s.forgetLocked(role)
			s.excluded[role] = struct{}{}
			s.dirty = true
			s.m.log.Warn("dropping a held role: its runner did not check in", "role", string(role), "checked_in", h.checkedIn.at(start))
			continue
		}
		roles = append(roles, role)
	}
	s.mu.Unlock()

	confirmed := map[codec.Role]codec.Token{}
	deadlines := map[codec.Role]time.Time{} // each confirmed role's local deadline when the heartbeat began
	if len(roles) > 0 {
		dctx, cancel := withTimeout(ctx, s.m.clk, s.m.s.TransactionTimeout)
		got, err := s.m.t.DescribeMany(dctx, roles)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.m.log.Warn("describing the held roles' tokens failed; the roles not answered are not renewed this round", "err", err, "answered", len(got), "held", len(roles))
		}
		s.mu.Lock()
		for _, role := range roles {
			h := s.held[role]
			d, ok := got[role]
			switch {
			case h == nil || !ok:
			case d.Held && d.Token == h.tok:
				confirmed[role] = h.tok
				deadlines[role] = h.deadline.at.at(start)
			default:
				// Another token, or none (the id expired): lost. This
				// round's heartbeat excludes it (the runner's drop may come
				// too late), or it would show a fenced holder live longer.
				h.cancel()
				n := sessNote{lost: ReasonFenced, cause: fmt.Errorf("%w: the coordinator names token %s for the role, not ours (%s)", fencing.ErrFenced, d.Token, h.tok)}
				if !d.Held {
					n.vanished = true
					n.cause = fmt.Errorf("%w: the coordinator knows no producer for the role's transactional id (it expired: transactional.id.expiration.ms), not our token %s", fencing.ErrFenced, h.tok)
				}
				h.tell(n)
				s.forgetLocked(role)
				s.excluded[role] = struct{}{}
				s.dirty = true
				s.m.met.fenced(role)
			}
		}
		s.mu.Unlock()
	}

	s.mu.Lock()
	cur, wasUnanswered := s.cur, s.unanswered
	hb := codec.Heartbeat{Member: s.m.me, Session: cur, GrantedAt: start.UnixMilli(),
		Deadline: start.UnixMilli() + s.m.s.LeaseDuration.Milliseconds()}
	for role := range s.excluded {
		hb.Excluded = append(hb.Excluded, role)
	}
	s.m.grp.stamp(&hb)
	slices.Sort(hb.Excluded)
	s.dirty = false
	s.mu.Unlock()
	if s.m.s.KeepOnExit && ctx.Err() != nil {
		// KeepOnExit, leaving: a heartbeat would hand over the roles let go.
		return
	}
	if wasUnanswered && s.fencedByAnother(ctx, cur) {
		return
	}
	if wasUnanswered {
		if _, err := s.ensure(ctx); err != nil {
			s.m.log.Warn("restarting the member session after an unanswered heartbeat failed", "err", err)
			return
		}
		s.mu.Lock()
		if s.cur.Nonce != cur.Nonce {
			s.mu.Unlock()
			return // a new incarnation: nothing of the old is vouched for
		}
		hb.Session = s.cur
		s.mu.Unlock()
	}
	// Not cut short by the end of Run's context: a heartbeat cut short
	// mid-transaction has no definite outcome.
	hctx, cancel := withTimeout(context.WithoutCancel(ctx), s.m.clk, s.m.s.TransactionTimeout)
	err := s.m.t.Heartbeat(hctx, hb)
	cancel()
	done := s.m.clk.Now()
	end, result := s.afterBeat(ctx, hb, err, start, done, confirmed, deadlines)
	// Once per round, with no role label.
	s.m.met.heartbeat(done.Sub(start), result)
	if end != nil {
		// Written without the lock, while ensure refuses to start a new
		// incarnation (closing), whose InitProducerId would fence it.
		s.writeEnd(ctx, *end)
	}
}

// afterBeat applies a round's heartbeat outcome under the lock (the round
// began at start, the answer came at done). It returns the session end to
// write when the heartbeat was late, and the result label.
func (s *session) afterBeat(ctx context.Context, hb codec.Heartbeat, err error, start, done time.Time, confirmed map[codec.Role]codec.Token, deadlines map[codec.Role]time.Time) (*codec.Heartbeat, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	result := "error"
	switch {
	case err == nil:
		result = "ok"
	case fencing.IsFenced(err):
		result = "fenced"
	case retired(err) || errors.Is(err, fencing.ErrNotHeld):
		result = "unknown"
	}
	if s.cur.Nonce != hb.Session.Nonce {
		return nil, result // the incarnation ended meanwhile
	}
	// The earliest local deadline of a role it vouched for, as of the
	// heartbeat's start.
	var until time.Time
	for role := range confirmed {
		if d := deadlines[role]; until.IsZero() || d.Before(until) {
			until = d
		}
	}
	if err != nil {
		s.dirty = s.dirty || len(hb.Excluded) > 0
	}
	switch result {
	case "ok":
	case "fenced":
		// An aborted heartbeat, or another process took the session: the
		// next round tells them apart (fencedByAnother).
		s.unanswered, s.fenced = true, true
		s.m.log.Warn("a heartbeat was fenced: the session starts again before the next, unless another process took it", "err", err)
		return nil, result
	case "unknown":
		s.unanswered = true
		if errors.Is(err, fencing.ErrUnknownOutcome) && !until.IsZero() && (s.unsettled.IsZero() || until.Before(s.unsettled)) {
			s.unsettled = until // settled when the session starts again (ensure)
		}
		s.m.log.Warn("a heartbeat got no definite answer; the session starts again before the next", "err", err)
		return nil, result
	default:
		if ctx.Err() == nil {
			s.m.log.Warn("heartbeat failed", "err", err)
		}
		return nil, result
	}
	if !until.IsZero() && !done.Before(until) {
		// Late: the incarnation ends, so that this heartbeat brings none of
		// its leases back to life.
		end := s.endLateLocked(hb.Session, "a heartbeat committed after the member's own deadline", "started", start, "committed", done)
		return &end, "late"
	}
	for role, tok := range confirmed {
		// A holding that ended meanwhile stays ended (extendLocked).
		if h := s.held[role]; h != nil && h.tok == tok {
			s.extendLocked(h, start)
		}
	}
	if s.m.log.Enabled(ctx, slog.LevelDebug) {
		s.m.log.Debug("heartbeat", "roles", len(confirmed), "excluded", len(hb.Excluded), "took", done.Sub(start))
	}
	return nil, result
}

// finish writes the session end when Run ends (not with KeepOnExit),
// which releases every lease naming the incarnation.
func (s *session) finish(ctx context.Context) {
	defer s.finOnce.Do(func() { close(s.finished) })
	s.mu.Lock()
	s.ended = true
	cur, unanswered, fenced := s.cur, s.unanswered, s.fenced
	s.mu.Unlock()
	if cur.Nonce == "" || s.m.s.KeepOnExit {
		return
	}
	ectx, cancel := withTimeout(context.WithoutCancel(ctx), s.m.clk, s.m.s.TransactionTimeout)
	defer cancel()
	if unanswered && !fenced {
		// Unanswered: start again under the same nonce and producer id and
		// write the end under the new epoch (docs/DESIGN.md, "Why it is
		// safe: member sessions").
		next, err := s.m.t.StartSession(ectx, s.m.me, cur.Nonce)
		if err == nil && next.ProducerID != cur.ProducerID {
			err = fmt.Errorf("the session's producer id changed (%d, was %d): the incarnation's leases name the old one", next.ProducerID, cur.ProducerID)
		}
		if err != nil {
			s.m.log.Warn("writing the session end failed: its last heartbeat got no answer, and starting the session again failed; the member's leases run out their spans", "err", err)
			return
		}
		cur = next
		s.mu.Lock()
		s.cur, s.unanswered = next, false
		s.mu.Unlock()
	}
	if err := s.m.t.Heartbeat(ectx, codec.Heartbeat{Member: s.m.me, Session: cur, End: true}); err != nil {
		s.m.log.Warn("writing the session end failed; the member's leases run out their spans", "err", err)
		return
	}
	s.m.log.Info("ended the member session", "nonce", cur.Nonce)
}

// awaitFinish waits until finish is done, when Run's session goroutine
// will call it; otherwise it returns at once.
func (s *session) awaitFinish() {
	if s.finishing.Load() {
		<-s.finished
	}
}

// errEndsWithSession: a leaving member's role is released by the session
// end, not by a release of its own.
var errEndsWithSession = errors.New("released by the member session's end")

// ending reports whether the session end the leaving member writes
// releases l (l names the current incarnation, and no KeepOnExit).
func (s *session) ending(l codec.Lease) bool {
	if s.m.s.KeepOnExit || l.Session == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.Nonce != "" && l.Session.Nonce == s.cur.Nonce && !s.unanswered
}

// vetAtStart keeps this process from taking over the session of another
// live process under its member id (docs/DESIGN.md, "One process per
// member id", last point). ensure waits for it (vetted).
func (s *session) vetAtStart(ctx context.Context) {
	defer s.vetDone()
	ss, ok := s.m.src.(SessionSource)
	if !ok {
		return
	}
	lookup := ss.Session
	if st, ok := s.m.src.(sessionSettler); ok {
		// Bounded: a verdict that never comes does not hold the member's
		// start for longer than a lease.
		lookup = func(ctx context.Context, m codec.MemberID) (rolestate.SessionSeen, bool, error) {
			sctx, cancel := withTimeout(ctx, s.m.clk, s.m.s.LeaseDuration)
			defer cancel()
			se, found, err := st.SessionSettled(sctx, m)
			if err != nil && ctx.Err() == nil && sctx.Err() != nil {
				return ss.Session(ctx, m)
			}
			return se, found, err
		}
	}
	first, found, err := lookup(ctx, s.m.me)
	for err != nil && ctx.Err() == nil {
		s.m.log.Warn("reading this member id's session failed; retrying before the first challenge", "err", err)
		t := s.m.clk.NewTimer(s.m.s.RetryBackoff)
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		t.Stop()
		first, found, err = lookup(ctx, s.m.me)
	}
	if !found || err != nil || first.Heartbeat.End {
		return
	}
	other := first.Heartbeat.Session.Nonce
	s.m.log.Info("this member id's session shows another process's heartbeat: watching it for a lease before starting a session",
		"nonce", other, "offset", first.Offset)
	until := s.m.clk.Now().Add(s.m.s.LeaseDuration)
	for {
		left := until.Sub(s.m.clk.Now())
		if left <= 0 {
			s.m.log.Warn("taking over the member id's session: the other process showed no heartbeat for a lease", "nonce", other)
			return
		}
		t := s.m.clk.NewTimer(min(left, s.m.s.HeartbeatInterval/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		se, found, err := ss.Session(ctx, s.m.me)
		switch {
		case err != nil || !found:
		case se.Heartbeat.End:
			return // the other ended its session
		case se.Offset > first.Offset:
			s.mu.Lock()
			s.ended = true // no session of this process's: ensure refuses
			s.mu.Unlock()
			role, other := s.otherInstance(ctx)
			s.m.refuse(&MemberInUseError{Member: s.m.me, Role: role, Instance: s.m.inst, Other: other,
				Evidence: fmt.Sprintf("its member session (nonce %s) heartbeats, at offset %d, since this process started", se.Heartbeat.Session.Nonce, se.Offset)})
			return
		}
	}
}

// vetDone lets StartSession go ahead (see vetAtStart).
func (s *session) vetDone() { s.vetOnce.Do(func() { close(s.vetted) }) }

// otherInstance returns a role whose state shows another instance's
// registration of the member id, and that instance; "" when none does.
func (s *session) otherInstance(ctx context.Context) (codec.Role, string) {
	for _, role := range s.m.Roles() {
		st, err := s.m.src.Role(ctx, role)
		if err != nil {
			continue
		}
		if c, ok := candidate(st, s.m.me); ok && c.Instance != "" && c.Instance != s.m.inst {
			return role, c.Instance
		}
	}
	return "", ""
}

// fencedByAnother reports, after a fenced heartbeat of incarnation cur,
// whether another process took the member id's session (docs/DESIGN.md,
// "One process per member id"); if so this process is refused. When it
// cannot tell it answers false, and the session starts again.
func (s *session) fencedByAnother(ctx context.Context, cur codec.Session) bool {
	s.mu.Lock()
	fenced := s.fenced
	s.fenced = false
	s.mu.Unlock()
	ss, ok := s.m.src.(SessionSource)
	if !fenced || !ok {
		return false
	}
	se, found, err := ss.Session(ctx, s.m.me)
	if err != nil || !found || se.Heartbeat.End || se.Heartbeat.Session.Nonce == cur.Nonce {
		return false
	}
	if o := se.Heartbeat.Session; o.ProducerID == cur.ProducerID && o.Epoch < cur.Epoch {
		// A predecessor's, written before this process's StartSession: the
		// fence was the coordinator's abort of a heartbeat that outlived
		// the transaction timeout.
		return false
	}
	s.mu.Lock()
	s.endLocked(ReasonFenced, errors.New("another process took this member id's session"))
	s.ended = true
	s.mu.Unlock()
	role, other := s.otherInstance(ctx)
	s.m.refuse(&MemberInUseError{Member: s.m.me, Role: role, Instance: s.m.inst, Other: other,
		Evidence: fmt.Sprintf("it started a session under this member id (nonce %s), which fenced this process's heartbeats", se.Heartbeat.Session.Nonce)})
	return true
}
