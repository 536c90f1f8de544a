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
// sessions"): its goroutine (run) writes one heartbeat per RenewInterval for
// all held roles and learns which were lost; the role runners name it in
// their leases (ensure), hold, drop and check in through its methods, and
// read each round's outcome on their note channel (runner.noted).
type session struct {
	m *Member

	starting sync.Mutex // one StartSession at a time
	closing  bool       // a session end is being written: no new incarnation until it is

	mu      sync.Mutex
	cur     codec.Session // the current incarnation; Nonce "" when none
	retired bool          // a heartbeat got no answer: StartSession again before the next
	fenced  bool          // the retirement was a fenced heartbeat: another process may have taken the session
	// unsettled is the earliest local deadline of the roles a heartbeat
	// with no definite answer vouched for (zero: none). That heartbeat
	// may commit until the session starts again; a start at or after it
	// ends the incarnation, as a heartbeat known to be late does.
	unsettled time.Time
	held      map[codec.Role]*sessHold
	// excluded holds the roles this incarnation's heartbeats must not
	// vouch for: roles this member stopped holding without a release
	// (their latest lease may still name the incarnation).
	excluded map[codec.Role]struct{}
	dirty    bool // excluded changed since the last heartbeat
	ended    bool // Run is over: no new incarnation
	wake     chan struct{}
	vetted   chan struct{} // closed once vetAtStart is done (vetDone): no StartSession before
	vetOnce  sync.Once
	finished chan struct{} // closed once finish is done: the session end written, or not to be
	finOnce  sync.Once
	// finishing is set once Run has started the goroutine that calls
	// finish after every runner stopped: only then may a runner wait
	// for done.
	finishing atomic.Bool
}

// sessHold is a role the member holds, as the session knows it.
type sessHold struct {
	tok       codec.Token
	base      time.Time          // the holding's local deadline is base + RenewDeadline: its election, or the last round that vouched for it
	checkedIn time.Time          // the runner's last check-in
	note      chan sessNote      // capacity 1: the runner's
	cancel    context.CancelFunc // the holding's work context
}

// sessNote is what the session tells a role's runner after a round: its
// role was vouched for by a heartbeat whose round began at vouched, or
// it is lost (lost is the reason, cause why).
type sessNote struct {
	vouched time.Time
	lost    Reason
	cause   error
	// vanished: the coordinator knows no producer for the role's
	// transactional id (it expired under the holding), so nobody holds
	// the role: the member may take its own lease back at once.
	vanished bool
}

func newSession(m *Member) *session {
	return &session{m: m, held: map[codec.Role]*sessHold{}, excluded: map[codec.Role]struct{}{}, wake: make(chan struct{}, 1), vetted: make(chan struct{}),
		finished: make(chan struct{})}
}

// newNonce draws an incarnation nonce: 16 random hex digits.
func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ensure returns the current incarnation, beginning one (StartSession)
// when there is none: the session a challenge's lease names. Starts are
// one at a time (starting), and the call to the cluster is made without
// mu, so that runners checking in never wait for it.
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
	if prev.Nonce != "" && !s.retired {
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
		// The unanswered heartbeat could commit until this start (the
		// new epoch ends its transaction), so it may have committed
		// after the member's own deadline: it is taken as late. The end
		// goes under the new epoch, which ends the incarnation's leases.
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
	s.cur, s.retired, s.unsettled = cur, false, time.Time{}
	s.mu.Unlock()
	s.m.log.Info("member session", "producer_id", cur.ProducerID, "epoch", cur.Epoch, "nonce", cur.Nonce)
	return cur, nil
}

// hold records that the member holds role under tok, elected at start
// (its first check-in), with a lease naming the incarnation nonce; note
// and cancel are the runner's. When that incarnation has ended meanwhile
// (no heartbeat will vouch for the lease), the runner is told at once
// that the holding is lost.
func (s *session) hold(role codec.Role, tok codec.Token, nonce string, start time.Time, note chan sessNote, cancel context.CancelFunc) {
	s.mu.Lock()
	if s.cur.Nonce == "" || s.cur.Nonce != nonce {
		s.mu.Unlock()
		cancel()
		notify(note, sessNote{lost: ReasonLeaseLost, cause: errors.New("the member session's incarnation that the lease names ended before the holding began")})
		return
	}
	first := len(s.held) == 0
	s.held[role] = &sessHold{tok: tok, base: start, checkedIn: start, note: note, cancel: cancel}
	_, wasExcluded := s.excluded[role]
	if wasExcluded {
		delete(s.excluded, role)
		s.dirty = true
	}
	s.mu.Unlock()
	// A round at once only when it matters: the latest heartbeat still
	// excludes the role (readers take the new lease, of the same
	// incarnation, for dropped until a heartbeat vouches for it), or the
	// member held nothing (its first holding's vouch need not wait a whole
	// interval). Otherwise the next round, within RenewInterval, vouches
	// for it, long before its local deadline: a member taking thousands
	// of roles must not run a round (a DescribeMany over every held role,
	// and a note to each) per role it takes.
	if !wasExcluded && !first {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// vouched records that the holding of role was renewed otherwise (a lease
// rewrite begun at at): its local deadline counts from there, for the
// rounds' check of a late heartbeat too.
func (s *session) vouched(role codec.Role, at time.Time) {
	s.mu.Lock()
	if h := s.held[role]; h != nil && at.After(h.base) {
		h.base = at
	}
	s.mu.Unlock()
}

// checkIn records that role's runner is alive at now.
func (s *session) checkIn(role codec.Role, now time.Time) {
	s.mu.Lock()
	if h := s.held[role]; h != nil && now.After(h.checkedIn) {
		h.checkedIn = now
	}
	s.mu.Unlock()
}

// drop records that the member no longer holds role. exclude: its latest
// lease may still name the incarnation (no release was written), so the
// heartbeats exclude it until the member's view shows another.
func (s *session) drop(role codec.Role, exclude bool) {
	s.mu.Lock()
	delete(s.held, role)
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
// longer names this incarnation (a release, another member's lease, or
// one of another incarnation).
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

// endLocked ends the incarnation: every held role is lost (its runner is
// told, its work cancelled), and nothing is excluded any more (the next
// incarnation's heartbeats vouch for none of the old leases).
func (s *session) endLocked(why Reason, cause error) {
	for role, h := range s.held {
		h.cancel()
		notify(h.note, sessNote{lost: why, cause: cause})
		delete(s.held, role)
	}
	clear(s.excluded)
	s.cur, s.retired, s.dirty, s.unsettled = codec.Session{}, false, false, time.Time{}
}

// endLateLocked ends the incarnation after a heartbeat of it that
// committed, or may have, after the member's own deadline for a role it
// vouched for, and returns the session end to write under sess
// (writeEnd); ensure starts no new incarnation until it is written.
func (s *session) endLateLocked(sess codec.Session, why string, attrs ...any) codec.Heartbeat {
	s.m.log.Warn(why+"; ending the session's incarnation", attrs...)
	s.endLocked(ReasonLeaseLost, errors.New(why))
	s.closing = true
	return codec.Heartbeat{Member: s.m.me, Session: sess, End: true}
}

// writeEnd writes the session end endLateLocked returned, without the
// lock, bounded by TransactionTimeout whatever ctx does; then new
// incarnations may start.
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

// notify sends n on ch (capacity 1), replacing a note not taken yet; a
// loss is never replaced by a vouch.
func notify(ch chan sessNote, n sessNote) {
	select {
	case ch <- n:
		return
	default:
	}
	select {
	case old := <-ch:
		if old.lost != "" && n.lost == "" {
			n = old
		}
	default:
	}
	select {
	case ch <- n:
	default:
	}
}

// run writes a heartbeat round every RenewInterval, holding roles or not
// (the heartbeats are the member id's sign of life, see vetAtStart), until
// ctx ends; then it drains, and once every runner has stopped acting on its
// role (stopped closed), it writes the session end unless KeepOnExit.
func (s *session) run(ctx context.Context, stopped <-chan struct{}) {
	// Rounds go every RenewInterval (less jitter) from the previous
	// round's start, not its end, as a holder's deadline counts from a
	// round's start: a slow round does not push the next one later.
	next := s.m.clk.Now().Add(s.m.s.RenewInterval - renewJitter(s.m.s))
	for {
		t := s.m.clk.NewTimer(next.Sub(s.m.clk.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			if s.m.s.KeepOnExit {
				// Leaving without writing anything (Settings.KeepOnExit): no round
				// either, as a heartbeat would exclude the roles the runners let go
				// on the way out and so hand them over at once.
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
		next = start.Add(s.m.s.RenewInterval - renewJitter(s.m.s))
	}
}

// drain goes on writing rounds, every RenewInterval from next, after
// Run's context ended and until the runners have stopped (stopped
// closed): a holder whose work is still stopping keeps its roles renewed
// meanwhile, as after Resign (see "Stepping down while work stops" in the
// package documentation), so that its successor's work cannot begin
// beside it. ctx is not cancelled; each call of a round is bounded by
// TransactionTimeout.
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
		next = start.Add(s.m.s.RenewInterval - renewJitter(s.m.s))
	}
}

// round is one heartbeat round: DescribeMany over the held roles' tokens
// (a role whose token moved is lost: fenced, and excluded until the view
// shows a lease that is not ours), then one heartbeat that
// vouches for every lease of the incarnation except the excluded roles and
// the held roles whose runner did not check in lately (stuck: dropped,
// their work cancelled). Each held role the round confirmed is told its
// new local deadline base (the round's start) once the heartbeat
// committed.
func (s *session) round(ctx context.Context) {
	start := s.m.clk.Now()
	s.mu.Lock()
	if s.cur.Nonce == "" {
		s.mu.Unlock()
		return
	}
	stale := start.Add(-(s.m.s.TransactionTimeout + s.m.s.RenewInterval))
	roles := make([]codec.Role, 0, len(s.held))
	for role, h := range s.held {
		if h.checkedIn.Before(stale) {
			// Stuck: its runner has not checked in for longer than a
			// call may take. Drop it: its work is cancelled and the
			// heartbeats exclude it, so others take it after they see
			// this heartbeat.
			h.cancel()
			notify(h.note, sessNote{lost: ReasonLeaseLost, cause: errors.New("the role's runner did not check in with the member session")})
			delete(s.held, role)
			s.excluded[role] = struct{}{}
			s.dirty = true
			s.m.log.Warn("dropping a held role: its runner did not check in", "role", string(role), "checked_in", h.checkedIn)
			continue
		}
		roles = append(roles, role)
	}
	s.mu.Unlock()

	confirmed := map[codec.Role]codec.Token{}
	bases := map[codec.Role]time.Time{} // each confirmed role's local deadline base when the heartbeat began
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
				bases[role] = h.base
			default:
				// The coordinator names another token, or none (the id expired): the
				// role is lost, whatever the view shows. The heartbeat of this round
				// excludes it, not the runner's drop, which may come after the heartbeat
				// is composed: with no token named our lease is still the latest, and a
				// heartbeat vouching for it would show a fenced holder live a lease more.
				h.cancel()
				n := sessNote{lost: ReasonFenced, cause: fmt.Errorf("%w: the coordinator names token %s for the role, not ours (%s)", fencing.ErrFenced, d.Token, h.tok)}
				if !d.Held {
					n.vanished = true
					n.cause = fmt.Errorf("%w: the coordinator knows no producer for the role's transactional id (it expired: transactional.id.expiration.ms), not our token %s", fencing.ErrFenced, h.tok)
				}
				notify(h.note, n)
				delete(s.held, role)
				s.excluded[role] = struct{}{}
				s.dirty = true
				s.m.met.fenced(role)
			}
		}
		s.mu.Unlock()
	}

	s.mu.Lock()
	cur, wasRetired := s.cur, s.retired
	hb := codec.Heartbeat{Member: s.m.me, Session: cur, GrantedAt: start.UnixMilli(),
		Deadline: start.UnixMilli() + s.m.s.LeaseDuration.Milliseconds()}
	for role := range s.excluded {
		hb.Excluded = append(hb.Excluded, role)
	}
	slices.Sort(hb.Excluded)
	s.dirty = false
	s.mu.Unlock()
	if s.m.s.KeepOnExit && ctx.Err() != nil {
		// Leaving without writing anything (Settings.KeepOnExit), and this
		// round began before ctx ended: a heartbeat composed after a runner let
		// its role go on the way out would exclude it, handing it over at once.
		return
	}
	if wasRetired && s.fencedByAnother(ctx, cur) {
		return
	}
	if wasRetired {
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
	end, result := s.afterBeat(ctx, hb, err, start, done, confirmed, bases)
	// Once per round, however many roles it vouched for: a label per
	// role would make a series per held role.
	s.m.met.heartbeat(done.Sub(start), result)
	if end != nil {
		// Written without the lock, while ensure refuses to start a new
		// incarnation (closing), whose InitProducerId would fence it.
		s.writeEnd(ctx, *end)
	}
}

// afterBeat applies a round's heartbeat outcome (err; the round began at
// start, the answer came at done) under the lock, and returns the session
// end to write when the heartbeat committed too late, and the outcome's
// name: ok, late (committed too late), fenced, retired (no definite
// answer, or the transport no longer holds the session's token) or
// error.
func (s *session) afterBeat(ctx context.Context, hb codec.Heartbeat, err error, start, done time.Time, confirmed map[codec.Role]codec.Token, bases map[codec.Role]time.Time) (*codec.Heartbeat, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	result := "error"
	switch {
	case err == nil:
		result = "ok"
	case fencing.IsFenced(err):
		result = "fenced"
	case retired(err) || errors.Is(err, fencing.ErrNotHeld):
		result = "retired"
	}
	if s.cur.Nonce != hb.Session.Nonce {
		return nil, result // the incarnation ended meanwhile
	}
	// The earliest local deadline of a role it vouched for, as it stood
	// when the heartbeat began (the runner may have ended the holding at
	// that deadline meanwhile, and dropped it).
	var until time.Time
	for role := range confirmed {
		if d := bases[role].Add(s.m.s.RenewDeadline); until.IsZero() || d.Before(until) {
			until = d
		}
	}
	if err != nil {
		s.dirty = s.dirty || len(hb.Excluded) > 0
	}
	switch result {
	case "ok":
	case "fenced":
		// Either the coordinator aborted a heartbeat that outlived the
		// transaction timeout, which bumps the session's epoch, or
		// another process under this member id started the session
		// (after watching it for a lease of silence). The next round
		// tells them apart: it starts the session again unless the
		// member id's latest session record is another incarnation's
		// heartbeat, which refuses this process (see round).
		s.retired, s.fenced = true, true
		s.m.log.Warn("a heartbeat was fenced: the session starts again before the next, unless another process took it", "err", err)
		return nil, result
	case "retired":
		s.retired = true
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
		// Resurrected: the heartbeat committed after the member's own
		// deadline for a role it vouched for (the member was paused, or
		// cut off, meanwhile): that holding ended at its deadline, and
		// observers may have seen its lease expire. The incarnation
		// ends, so that this late heartbeat brings none of its leases
		// back to life, and the member campaigns again.
		end := s.endLateLocked(hb.Session, "a heartbeat committed after the member's own deadline", "started", start, "committed", done)
		return &end, "late"
	}
	for role, tok := range confirmed {
		if h := s.held[role]; h != nil && h.tok == tok {
			h.base = start
			notify(h.note, sessNote{vouched: start})
		}
	}
	if s.m.log.Enabled(ctx, slog.LevelDebug) {
		s.m.log.Debug("heartbeat", "roles", len(confirmed), "excluded", len(hb.Excluded), "took", done.Sub(start))
	}
	return nil, result
}

// finish ends the session when Run ends (not with KeepOnExit): one
// session-end record, after which every lease naming the incarnation is
// released in every reader's eyes.
func (s *session) finish(ctx context.Context) {
	defer s.finOnce.Do(func() { close(s.finished) })
	s.mu.Lock()
	s.ended = true
	cur, retired, fenced := s.cur, s.retired, s.fenced
	s.mu.Unlock()
	if cur.Nonce == "" || s.m.s.KeepOnExit {
		return
	}
	ectx, cancel := withTimeout(context.WithoutCancel(ctx), s.m.clk, s.m.s.TransactionTimeout)
	defer cancel()
	if retired && !fenced {
		// The last heartbeat got no definite answer, and a retired token can
		// write nothing: start the producer again under the same nonce and write
		// the end under the new epoch (docs/DESIGN.md, "Why it is safe: member
		// sessions"). Unlike ensure, not under a new producer id, whose end could
		// not end the old incarnation's leases.
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
		s.cur, s.retired = next, false
		s.mu.Unlock()
	}
	if err := s.m.t.Heartbeat(ectx, codec.Heartbeat{Member: s.m.me, Session: cur, End: true}); err != nil {
		s.m.log.Warn("writing the session end failed; the member's leases run out their spans", "err", err)
		return
	}
	s.m.log.Info("ended the member session", "nonce", cur.Nonce)
}

// awaitFinish waits until finish is done (the session end written, or
// failed, or none to write), when Run's session goroutine will call it;
// it returns at once otherwise (a runner driven without Run).
func (s *session) awaitFinish() {
	if s.finishing.Load() {
		<-s.finished
	}
}

// errEndsWithSession: a leaving member's role is released by the session
// end, not by a release of its own.
var errEndsWithSession = errors.New("released by the member session's end")

// ending reports whether the session end the leaving member writes
// releases l: l names the current incarnation and the member does not
// keep its roles on exit.
func (s *session) ending(l codec.Lease) bool {
	if s.m.s.KeepOnExit || l.Session == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.Nonce != "" && l.Session.Nonce == s.cur.Nonce && !s.retired
}

// noted applies the session's word on the held role: a loss ends the
// holding at once (a fence as any fence: the wait after a loss applies);
// a vouch moves the local deadline to the round's start + RenewDeadline.
func (r *runner) noted(n sessNote) {
	if r.hold == nil {
		return
	}
	now := r.m.clk.Now()
	if n.lost != "" {
		switch {
		case n.vanished:
			// Nobody took the role (its transactional id expired): rule
			// 5 lets the member take its own lease back at once, as
			// after a retirement; challenging fences only its former
			// self. (Learned while work stops on a resignation, in
			// awaitWorkRenewing, it waits as after any fence: it is
			// handing the role over.)
			tok := r.hold.held.Token
			r.l.retiredTok = &tok
		case n.lost == ReasonFenced:
			r.lost(now) // rule 6: another member's lease is on its way
		}
		r.revoke(now, n.lost, n.cause, "the member session ended the holding")
		return
	}
	if !n.vouched.After(r.l.renewedAt) {
		return
	}
	if !r.hold.expiry.Stop() {
		// The local deadline passed before the heartbeat's word came:
		// work has been told to stop, so the member stops too.
		r.revoke(now, ReasonLeaseLost, nil, "the heartbeat committed only after the local deadline")
		return
	}
	r.l.renewedAt = n.vouched
	r.hold.expiry = r.m.clk.AfterFunc(n.vouched.Add(r.m.s.RenewDeadline).Sub(now), r.hold.cancel)
}

// vetAtStart keeps this process from taking over the session of another
// live process under its member id, which its first StartSession would
// fence (docs/DESIGN.md, "One process per member id", last point): a live
// one refuses the member ([MemberInUseError], nothing written). Without a
// SessionSource there is nothing to watch. ensure waits for it (vetted).
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
		t := s.m.clk.NewTimer(min(left, s.m.s.RenewInterval/2))
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

// otherInstance returns a role of this member whose state shows a
// registration of the member id by another instance, and that instance,
// to name the other process in a refusal; "" when none shows one.
func (s *session) otherInstance(ctx context.Context) (codec.Role, string) {
	for _, role := range s.m.order {
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
// "One process per member id"); if so every holding ends and this process
// is refused ([MemberInUseError]). When it cannot tell (no SessionSource,
// or the record cannot be read) it answers false and the session starts
// again: one of the two processes sees the other at its next fenced one.
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
		// Written before this process's StartSession moved the epoch past it:
		// a predecessor's (killed; this process started after a lease of its
		// silence), not a process that took the session since (its StartSession
		// would have moved the epoch past ours). So the fence was the
		// coordinator's abort of a heartbeat that outlived the transaction
		// timeout (an EndTxn refused that long, e.g. CONCURRENT_TRANSACTIONS).
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
