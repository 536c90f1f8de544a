package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/fencing/fencingtest"
	"github.com/krabka/krole/rolestate"
)

// sessRig drives a member session's rounds by hand: the mock transport,
// the fake clock, and one note channel and cancel per held role.
type sessRig struct {
	t     *testing.T
	tr    *fencingtest.MockTransport
	clk   *fakeClock
	m     *Member
	s     *session
	notes map[codec.Role]*rigSink
	done  map[codec.Role]context.Context
}

// rigSink keeps a held role's latest note as a runner does, on a channel
// the test can wait on.
type rigSink struct {
	role codec.Role
	ch   chan sessNote
}

func (k *rigSink) resume() {}

func (k *rigSink) sinkRole() codec.Role { return k.role }

func (k *rigSink) putNote(n sessNote) {
	for {
		select {
		case k.ch <- n:
			return
		default:
		}
		select {
		case <-k.ch:
		default:
		}
	}
}

var rigSession = codec.Session{ProducerID: 77, Epoch: 0, Nonce: "n"}

func newSessRig(t *testing.T, roles ...codec.Role) *sessRig {
	t.Helper()
	r := &sessRig{t: t, tr: fencingtest.NewMockTransport(t), clk: newFakeClock(),
		notes: map[codec.Role]*rigSink{}, done: map[codec.Role]context.Context{}}
	m, err := New(r.tr, newFakeSource(state(role, nil, 0)), "me", roles, Options{Clock: r.clk, Logger: testLogger(t)})
	require.NoError(t, err)
	r.m, r.s = m, newSession(m)
	r.s.vetDone()
	r.tr.On("StartSession", mock.Anything, codec.MemberID("me"), mock.AnythingOfType("string")).Return(rigSession, nil).Once()
	cur, err := r.s.ensure(context.Background())
	require.NoError(t, err)
	require.Equal(t, rigSession, cur)
	return r
}

// hold makes the member hold role under tok from now.
func (r *sessRig) hold(role codec.Role, tok codec.Token) {
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	r.notes[role], r.done[role] = &rigSink{role: role, ch: make(chan sessNote, 1)}, ctx
	r.s.hold(tok, r.s.current().Nonce, r.clk.Now(), r.notes[role], cancel)
}

// note returns role's note from the last round, and whether there is one.
func (r *sessRig) note(role codec.Role) (sessNote, bool) {
	select {
	case n := <-r.notes[role].ch:
		return n, true
	default:
		return sessNote{}, false
	}
}

// renewed returns when role's last renewal began, as the session's local
// deadline for it says; the zero time when it holds no such role.
func (r *sessRig) renewed(role codec.Role) time.Time {
	d, ok := r.s.deadline(role)
	if !ok {
		return time.Time{}
	}
	return d.Add(-r.m.s.HeartbeatDeadline)
}

// beatAt is the heartbeat the round that begins at start writes.
func beatAt(sess codec.Session, start time.Time, s Settings, excluded ...codec.Role) codec.Heartbeat {
	return codec.Heartbeat{Member: "me", Session: sess, GrantedAt: start.UnixMilli(),
		Deadline: start.Add(s.LeaseDuration).UnixMilli(), Excluded: excluded}
}

// A round asks the coordinators about every held role at once
// (DescribeMany) and writes one heartbeat for them all: each role whose
// token the coordinator confirmed is renewed from the round's start; a
// role whose token moved is lost at once (fenced: the holder learns it
// here, whatever its view shows) and that round's heartbeat excludes it
// (its latest lease may still be ours: when the role's transactional id
// expired, no other lease follows); a role the coordinator did not answer
// for is not renewed this round.
func TestSessionRoundRenewsConfirmedRolesAndLearnsOfALoss(t *testing.T) {
	r := newSessRig(t, "r1", "r2", "r3")
	tok := map[codec.Role]codec.Token{"r1": {ProducerID: 1, Epoch: 1}, "r2": {ProducerID: 2, Epoch: 1}, "r3": {ProducerID: 3, Epoch: 1}}
	for _, role := range []codec.Role{"r1", "r2", "r3"} {
		r.hold(role, tok[role])
	}
	r.clk.Advance(time.Second)
	start := r.clk.Now()
	r.tr.On("DescribeMany", mock.Anything, mock.MatchedBy(func(rs []codec.Role) bool { return len(rs) == 3 })).
		Return(map[codec.Role]fencing.Described{
			"r1": {Token: tok["r1"], Held: true},
			"r2": {Token: codec.Token{ProducerID: 2, Epoch: 2}, Held: true},
		}, errors.New("r3's coordinator did not answer")).Once()
	r.tr.On("Heartbeat", mock.Anything, beatAt(rigSession, start, r.m.s, "r2")).Return(nil).Once()
	r.s.round(context.Background())

	_, ok := r.note("r1")
	assert.False(t, ok, "a renewal needs no word to the runner")
	assert.Equal(t, start, r.renewed("r1"))
	n, ok := r.note("r2")
	require.True(t, ok)
	assert.Equal(t, ReasonFenced, n.lost)
	assert.ErrorIs(t, n.cause, fencing.ErrFenced)
	assert.Error(t, r.done["r2"].Err(), "the lost role's work is cancelled")
	_, ok = r.note("r3")
	assert.False(t, ok)
	assert.Equal(t, t0, r.renewed("r3"), "a role the coordinator did not answer for is not renewed")
	assert.NoError(t, r.done["r3"].Err())
}

// The session alone ends a holding at its local deadline: HeartbeatDeadline
// after its last renewal began (its election, a lease write, a round that
// vouched for it). Then its work is cancelled, its runner told, and the
// heartbeats exclude it, since its lease still names the incarnation.
func TestSessionEndsAHoldingAtItsLocalDeadline(t *testing.T) {
	r := newSessRig(t, "r1", "r2")
	t1, t2 := codec.Token{ProducerID: 1}, codec.Token{ProducerID: 2}
	r.hold("r1", t1)
	r.hold("r2", t2)
	r.clk.Advance(time.Second)
	r.s.rewritten("r2", r.clk.Now()) // a lease write renews
	r.s.rewritten("r2", t0)          // an older one does not move it back
	assert.Equal(t, t0.Add(time.Second), r.renewed("r2"))

	r.clk.Advance(r.m.s.HeartbeatDeadline - time.Second - time.Millisecond)
	_, ok := r.note("r1")
	assert.False(t, ok, "a millisecond before its deadline")
	assert.NoError(t, r.done["r1"].Err())

	r.clk.Advance(time.Millisecond)
	n, ok := r.note("r1")
	require.True(t, ok, "at its deadline")
	assert.Equal(t, ReasonLeaseLost, n.lost)
	assert.Error(t, r.done["r1"].Err(), "its work is cancelled")
	_, held := r.s.deadline("r1")
	assert.False(t, held)
	assert.Contains(t, r.s.excluded, codec.Role("r1"))
	_, ok = r.note("r2")
	assert.False(t, ok, "the rewritten role's deadline is a second later")
	assert.NoError(t, r.done["r2"].Err())

	start := r.clk.Now()
	r.s.checkIn("r2", start)
	r.tr.On("DescribeMany", mock.Anything, []codec.Role{"r2"}).Return(map[codec.Role]fencing.Described{"r2": {Token: t2, Held: true}}, nil).Once()
	r.tr.On("Heartbeat", mock.Anything, beatAt(rigSession, start, r.m.s, "r1")).Return(nil).Once()
	r.s.round(context.Background())
	assert.Equal(t, start, r.renewed("r2"))

	r.clk.Advance(r.m.s.HeartbeatDeadline)
	n, ok = r.note("r2")
	require.True(t, ok)
	assert.Equal(t, ReasonLeaseLost, n.lost)
	assert.Zero(t, r.s.holdings())
}

// A held role whose goroutine has not checked in for TransactionTimeout +
// HeartbeatInterval is stuck: the round drops it (its work cancelled, its
// runner told) and the heartbeat excludes it, so that observers take it
// when they see that heartbeat, not never; the others are renewed.
func TestSessionDropsAStuckRole(t *testing.T) {
	r := newSessRig(t, "ok", "stuck")
	t1, t2 := codec.Token{ProducerID: 1}, codec.Token{ProducerID: 2}
	r.hold("ok", t1)
	r.hold("stuck", t2)
	r.clk.Advance(r.m.s.TransactionTimeout + r.m.s.HeartbeatInterval + time.Millisecond)
	r.s.checkIn("ok", r.clk.Now())
	start := r.clk.Now()
	r.tr.On("DescribeMany", mock.Anything, []codec.Role{"ok"}).Return(map[codec.Role]fencing.Described{"ok": {Token: t1, Held: true}}, nil).Once()
	r.tr.On("Heartbeat", mock.Anything, beatAt(rigSession, start, r.m.s, "stuck")).Return(nil).Once()
	r.s.round(context.Background())

	n, ok := r.note("stuck")
	require.True(t, ok)
	assert.Equal(t, ReasonLeaseLost, n.lost)
	assert.Error(t, r.done["stuck"].Err())
	assert.Equal(t, start, r.renewed("ok"))

	// The exclusion stays until the member's view shows a lease of the
	// role that does not name the incarnation.
	r.clk.Advance(time.Second)
	r.s.checkIn("ok", r.clk.Now())
	next := r.clk.Now()
	r.tr.On("DescribeMany", mock.Anything, []codec.Role{"ok"}).Return(map[codec.Role]fencing.Described{"ok": {Token: t1, Held: true}}, nil).Once()
	r.tr.On("Heartbeat", mock.Anything, beatAt(rigSession, next, r.m.s, "stuck")).Return(nil).Once()
	r.s.round(context.Background())
	own := leaseOf("me", t2, t0, 10*time.Second)
	own.Session = &rigSession
	r.s.settle("stuck", state("stuck", own, 3))
	assert.Contains(t, r.s.excluded, codec.Role("stuck"), "the view still shows our lease")
	r.s.settle("stuck", state("stuck", leaseOf("other", codec.Token{ProducerID: 2, Epoch: 1}, t0, 10*time.Second), 4))
	assert.NotContains(t, r.s.excluded, codec.Role("stuck"))
}

// A heartbeat that commits after the local deadline of a role it vouched
// for (the member was paused mid-heartbeat) must not bring that lease
// back to life: the member ends the incarnation with a session end, every
// holding is lost, and the next challenge starts a new incarnation under
// a new nonce.
func TestSessionHeartbeatCommittedAfterTheDeadlineEndsTheIncarnation(t *testing.T) {
	r := newSessRig(t, "r1")
	tok := codec.Token{ProducerID: 1}
	r.hold("r1", tok)
	start := r.clk.Now()
	r.tr.On("DescribeMany", mock.Anything, []codec.Role{"r1"}).Return(map[codec.Role]fencing.Described{"r1": {Token: tok, Held: true}}, nil).Once()
	r.tr.On("Heartbeat", mock.Anything, beatAt(rigSession, start, r.m.s)).
		Run(func(mock.Arguments) { r.clk.Advance(r.m.s.HeartbeatDeadline) }). // paused in flight
		Return(nil).Once()
	r.tr.On("Heartbeat", mock.Anything, codec.Heartbeat{Member: "me", Session: rigSession, End: true}).
		Run(func(mock.Arguments) {
			// Written without the session's lock, and no new incarnation
			// starts meanwhile (its InitProducerId would fence the end).
			r.s.checkIn("r1", r.clk.Now())
			_, err := r.s.ensure(context.Background())
			assert.Error(t, err, "no new incarnation while the session end is written")
		}).Return(nil).Once()
	r.s.round(context.Background())

	n, ok := r.note("r1")
	require.True(t, ok)
	assert.Equal(t, ReasonLeaseLost, n.lost)
	assert.Equal(t, "", r.s.current().Nonce, "the incarnation ended")
	next := codec.Session{ProducerID: 77, Epoch: 1, Nonce: "m"}
	r.tr.On("StartSession", mock.Anything, codec.MemberID("me"), mock.MatchedBy(func(nonce string) bool { return nonce != rigSession.Nonce })).
		Return(next, nil).Once()
	cur, err := r.s.ensure(context.Background())
	require.NoError(t, err)
	assert.Equal(t, next, cur)
}

// A heartbeat with no definite answer retires the session's token: the
// next round starts the session again under the same nonce (a new epoch
// keeps the incarnation's leases) and renews; had the producer id
// changed, the incarnation would end.
func TestSessionUnansweredHeartbeatStartsTheSessionAgain(t *testing.T) {
	for _, newPID := range []bool{false, true} {
		r := newSessRig(t, "r1")
		tok := codec.Token{ProducerID: 1}
		r.hold("r1", tok)
		start := r.clk.Now()
		r.tr.On("DescribeMany", mock.Anything, []codec.Role{"r1"}).Return(map[codec.Role]fencing.Described{"r1": {Token: tok, Held: true}}, nil)
		r.tr.On("Heartbeat", mock.Anything, beatAt(rigSession, start, r.m.s)).
			Return(&fencing.Error{Kind: fencing.ErrUnknownOutcome, Err: errors.New("no answer")}).Once()
		r.s.round(context.Background())
		_, ok := r.note("r1")
		assert.False(t, ok)

		r.clk.Advance(time.Second)
		r.s.checkIn("r1", r.clk.Now())
		again := codec.Session{ProducerID: 77, Epoch: 1, Nonce: rigSession.Nonce}
		if newPID {
			again.ProducerID = 78
		}
		r.tr.On("StartSession", mock.Anything, codec.MemberID("me"), rigSession.Nonce).Return(again, nil).Once()
		if !newPID {
			r.tr.On("Heartbeat", mock.Anything, beatAt(again, r.clk.Now(), r.m.s)).Return(nil).Once()
		}
		r.s.round(context.Background())
		n, ok := r.note("r1")
		if newPID {
			require.True(t, ok)
			assert.Equal(t, ReasonLeaseLost, n.lost, "a new producer id cannot keep the incarnation's leases")
			assert.NotEqual(t, rigSession.Nonce, r.s.current().Nonce)
		} else {
			assert.False(t, ok, "the role is kept")
			assert.Equal(t, r.clk.Now(), r.renewed("r1"))
		}
	}
}

// A heartbeat with no definite answer may commit until the session starts
// again (the new epoch ends its transaction). When that start comes at or
// after the local deadline of a role the heartbeat vouched for (the answer
// itself came late, or the start did), the heartbeat may have committed
// late: the incarnation ends as after a heartbeat known to be late, with a
// session end under the new epoch, every holding lost, and the heartbeats
// go on under a new nonce.
func TestSessionUnansweredHeartbeatSettledPastTheDeadlineEndsTheIncarnation(t *testing.T) {
	for name, c := range map[string]struct {
		inFlight, inStart time.Duration // the clock moves while the heartbeat, then the start, is in flight
	}{
		"answered past the deadline":      {inFlight: DefaultLeaseDuration * 4 / 5},
		"started again past the deadline": {inFlight: time.Second, inStart: DefaultLeaseDuration*4/5 - time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			r := newSessRig(t, "r1")
			require.Equal(t, DefaultLeaseDuration*4/5, r.m.s.HeartbeatDeadline)
			tok := codec.Token{ProducerID: 1}
			r.hold("r1", tok)
			start := r.clk.Now()
			pastDeadline := c.inFlight >= r.m.s.HeartbeatDeadline
			describes := 2
			if pastDeadline {
				describes = 1 // the second round holds nothing
			}
			r.tr.On("DescribeMany", mock.Anything, []codec.Role{"r1"}).Return(map[codec.Role]fencing.Described{"r1": {Token: tok, Held: true}}, nil).Times(describes)
			r.tr.On("Heartbeat", mock.Anything, beatAt(rigSession, start, r.m.s)).
				Run(func(mock.Arguments) { r.clk.Advance(c.inFlight) }).
				Return(&fencing.Error{Kind: fencing.ErrUnknownOutcome, Err: errors.New("no answer")}).Once()
			r.s.round(context.Background())
			n, ok := r.note("r1")
			assert.Equal(t, pastDeadline, ok, "lost only at its local deadline")

			r.s.checkIn("r1", r.clk.Now())
			again := codec.Session{ProducerID: rigSession.ProducerID, Epoch: rigSession.Epoch + 1, Nonce: rigSession.Nonce}
			r.tr.On("StartSession", mock.Anything, codec.MemberID("me"), rigSession.Nonce).
				Run(func(mock.Arguments) { r.clk.Advance(c.inStart) }).Return(again, nil).Once()
			r.tr.On("Heartbeat", mock.Anything, codec.Heartbeat{Member: "me", Session: again, End: true}).Return(nil).Once()
			r.s.round(context.Background()) // the mock fails the test on a heartbeat of the old incarnation
			if !pastDeadline {
				n, ok = r.note("r1")
			}
			require.True(t, ok)
			assert.Equal(t, ReasonLeaseLost, n.lost)
			assert.Error(t, r.done["r1"].Err(), "the holding's work is cancelled")
			cur := r.s.current()
			assert.NotEqual(t, rigSession.Nonce, cur.Nonce, "a new incarnation")
			assert.Equal(t, again.Token(), cur.Token(), "under the session's new epoch")

			r.clk.Advance(time.Second)
			r.tr.On("Heartbeat", mock.Anything, beatAt(cur, r.clk.Now(), r.m.s)).Return(nil).Once()
			r.s.round(context.Background())
			r.tr.AssertExpectations(t)
		})
	}
}

// A heartbeat answered fenced means that another process took this member
// id's session: every holding ends at once.
// A fenced heartbeat (the coordinator aborted one that outlived the
// transaction timeout, bumping the epoch; or another process started the
// session) ends nothing by itself: with no other incarnation's record to
// be seen, the next round starts the session again (same producer id and
// nonce, a new epoch) and its heartbeat vouches for the roles.
func TestSessionFencedHeartbeatStartsTheSessionAgain(t *testing.T) {
	r := newSessRig(t, "r1", "r2")
	t1, t2 := codec.Token{ProducerID: 1}, codec.Token{ProducerID: 2}
	r.hold("r1", t1)
	r.hold("r2", t2)
	both := map[codec.Role]fencing.Described{"r1": {Token: t1, Held: true}, "r2": {Token: t2, Held: true}}
	r.tr.On("DescribeMany", mock.Anything, mock.Anything).Return(both, nil).Twice()
	r.tr.On("Heartbeat", mock.Anything, mock.Anything).Return(fencing.Fenced("session/me", nil)).Once()
	r.s.round(context.Background())
	for _, role := range []codec.Role{"r1", "r2"} {
		_, ok := r.note(role)
		assert.False(t, ok, "%s: nothing vouched, nothing lost", role)
		require.NoError(t, r.done[role].Err())
	}
	again := codec.Session{ProducerID: rigSession.ProducerID, Epoch: rigSession.Epoch + 1, Nonce: rigSession.Nonce}
	r.tr.On("StartSession", mock.Anything, codec.MemberID("me"), rigSession.Nonce).Return(again, nil).Once()
	r.tr.On("Heartbeat", mock.Anything, mock.MatchedBy(func(hb codec.Heartbeat) bool { return hb.Session == again })).Return(nil).Once()
	r.clk.Advance(time.Second)
	r.s.round(context.Background())
	r.tr.AssertExpectations(t)
	for _, role := range []codec.Role{"r1", "r2"} {
		_, ok := r.note(role)
		assert.False(t, ok, "%s kept", role)
		assert.Equal(t, r.clk.Now(), r.renewed(role), "%s vouched for under the new epoch", role)
	}
}

// After a fenced heartbeat the member id's latest session record tells
// who fenced it. A heartbeat of another incarnation under a later epoch of
// the session's producer id is a process that took the session since
// (its StartSession moved the epoch past this one's): every holding ends
// and the process is refused. One under an earlier epoch is a
// predecessor's, written before this process's StartSession (a member
// restarted after a kill, its first heartbeat aborted by the coordinator
// after its EndTxn was refused for the transaction timeout): the session
// starts again, and nothing is lost.
func TestSessionFencedHeartbeatTellsAPredecessorFromATaker(t *testing.T) {
	for name, other := range map[string]struct {
		epoch   int16
		refused bool
	}{
		"a predecessor, under an earlier epoch": {epoch: 1, refused: false},
		"a taker, under a later epoch":          {epoch: 3, refused: true},
	} {
		t.Run(name, func(t *testing.T) {
			r := newSessRig(t, "r1")
			cur := codec.Session{ProducerID: rigSession.ProducerID, Epoch: 2, Nonce: rigSession.Nonce}
			r.s.mu.Lock()
			r.s.cur = cur // this process's StartSession moved the epoch to 2
			r.s.mu.Unlock()
			src := r.m.src.(*fakeSource)
			src.mu.Lock()
			src.sessions = map[codec.MemberID]rolestate.SessionSeen{"me": {Offset: 9, Heartbeat: codec.Heartbeat{Member: "me",
				Session: codec.Session{ProducerID: rigSession.ProducerID, Epoch: other.epoch, Nonce: "other"}, GrantedAt: 1, Deadline: 2}}}
			src.mu.Unlock()
			tok := codec.Token{ProducerID: 1}
			r.hold("r1", tok)
			r.tr.On("DescribeMany", mock.Anything, []codec.Role{"r1"}).Return(map[codec.Role]fencing.Described{"r1": {Token: tok, Held: true}}, nil)
			r.tr.On("Heartbeat", mock.Anything, beatAt(cur, r.clk.Now(), r.m.s)).Return(fencing.Fenced("session/me", errors.New("epoch bumped"))).Once()
			r.s.round(context.Background())

			r.clk.Advance(time.Second)
			r.s.checkIn("r1", r.clk.Now())
			again := codec.Session{ProducerID: cur.ProducerID, Epoch: cur.Epoch + 2, Nonce: cur.Nonce}
			if !other.refused {
				r.tr.On("StartSession", mock.Anything, codec.MemberID("me"), cur.Nonce).Return(again, nil).Once()
				r.tr.On("Heartbeat", mock.Anything, beatAt(again, r.clk.Now(), r.m.s)).Return(nil).Once()
			}
			r.s.round(context.Background()) // the mock fails the test on any other call
			n, ok := r.note("r1")
			r.m.mu.Lock()
			inUse := r.m.inUse
			r.m.mu.Unlock()
			if other.refused {
				require.True(t, ok)
				assert.Equal(t, ReasonFenced, n.lost)
				require.NotNil(t, inUse, "refused: another process runs the member id")
				assert.Contains(t, inUse.Error(), "other")
				return
			}
			assert.False(t, ok, "a predecessor's record: the session starts again, and keeps the role")
			assert.Equal(t, r.clk.Now(), r.renewed("r1"))
			assert.Nil(t, inUse)
		})
	}
}

// A member that leaves writes one session end, which releases every lease
// of the incarnation; with KeepOnExit it writes nothing.
func TestSessionFinishWritesOneSessionEnd(t *testing.T) {
	r := newSessRig(t, "r1")
	r.hold("r1", codec.Token{ProducerID: 1})
	l := leaseOf("me", codec.Token{ProducerID: 1}, t0, 10*time.Second)
	l.Session = &rigSession
	assert.True(t, r.s.ending(*l))
	r.tr.On("Heartbeat", mock.Anything, codec.Heartbeat{Member: "me", Session: rigSession, End: true}).Return(nil).Once()
	r.s.finish(context.Background())
	_, err := r.s.ensure(context.Background())
	assert.Error(t, err, "no new incarnation once the member left")

	k := newSessRig(t, "r1")
	k.m.s.KeepOnExit = true
	assert.False(t, k.s.ending(*l))
	k.s.finish(context.Background()) // the mock fails the test on any call
}

// A member leaving right after a heartbeat that got no definite answer
// (its connection closed under it by another call's abandonment as Run's
// context ended) still ends its incarnation: it starts the session's
// producer again under the same nonce and writes the end under the new
// epoch, which ends the incarnation's leases (codec.Session.Keeps). With a
// new producer id it cannot (the leases name the old one): it writes
// nothing. After a fenced heartbeat it does not start the session again
// (another process may have taken it, and a new epoch would fence it): it
// tries the end under the fenced token, which the broker refuses.
func TestSessionFinishAfterAnUnansweredHeartbeat(t *testing.T) {
	for name, c := range map[string]struct {
		fenced bool
		again  codec.Session // StartSession's answer; zero: not called
		end    bool          // the session end is written
	}{
		"same producer id": {again: codec.Session{ProducerID: rigSession.ProducerID, Epoch: rigSession.Epoch + 1, Nonce: rigSession.Nonce}, end: true},
		"new producer id":  {again: codec.Session{ProducerID: rigSession.ProducerID + 1, Nonce: rigSession.Nonce}},
		"fenced":           {fenced: true},
	} {
		t.Run(name, func(t *testing.T) {
			r := newSessRig(t, "r1")
			tok := codec.Token{ProducerID: 1}
			r.hold("r1", tok)
			start := r.clk.Now()
			beatErr := error(&fencing.Error{Kind: fencing.ErrUnknownOutcome, Err: errors.New("set tcp 127.0.0.1:1: use of closed network connection")})
			if c.fenced {
				beatErr = fencing.Fenced("session/me", errors.New("epoch bumped"))
			}
			r.tr.On("DescribeMany", mock.Anything, []codec.Role{"r1"}).Return(map[codec.Role]fencing.Described{"r1": {Token: tok, Held: true}}, nil).Once()
			r.tr.On("Heartbeat", mock.Anything, beatAt(rigSession, start, r.m.s)).Return(beatErr).Once()
			r.s.round(context.Background())
			if c.again != (codec.Session{}) {
				r.tr.On("StartSession", mock.Anything, codec.MemberID("me"), rigSession.Nonce).Return(c.again, nil).Once()
			}
			if c.end {
				r.tr.On("Heartbeat", mock.Anything, codec.Heartbeat{Member: "me", Session: c.again, End: true}).Return(nil).Once()
			}
			if c.fenced {
				// Tried under the fenced token, as before: the broker
				// refuses it.
				r.tr.On("Heartbeat", mock.Anything, codec.Heartbeat{Member: "me", Session: rigSession, End: true}).Return(beatErr).Once()
			}
			r.s.finish(context.Background()) // the mock fails the test on any other call
		})
	}
}

// The session's goroutine runs a round every HeartbeatInterval on the
// member's clock, and when Run's context ends it waits for the role
// runners, then writes the session end.
func TestSessionRunBeatsEveryIntervalAndEndsTheSession(t *testing.T) {
	r := newSessRig(t, "r1")
	tok := codec.Token{ProducerID: 1}
	r.hold("r1", tok)
	<-r.s.wake // hold's nudge: the test drives the rounds by the clock alone
	ctx, cancel := context.WithCancel(context.Background())
	runnersDone, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		r.s.run(ctx, runnersDone)
	}()
	beat := make(chan codec.Heartbeat, 4)
	r.tr.On("DescribeMany", mock.Anything, []codec.Role{"r1"}).Return(map[codec.Role]fencing.Described{"r1": {Token: tok, Held: true}}, nil)
	r.tr.On("Heartbeat", mock.Anything, mock.MatchedBy(func(hb codec.Heartbeat) bool { return !hb.End })).
		Run(func(a mock.Arguments) { beat <- a.Get(1).(codec.Heartbeat) }).Return(nil)
	for i := 1; i <= 2; i++ {
		r.clk.waitTimers(2) // the holding's local deadline, and the next round
		r.s.checkIn("r1", r.clk.Now())
		r.clk.Advance(r.m.s.HeartbeatInterval)
		hb := recv(t, beat)
		at := t0.Add(time.Duration(i) * r.m.s.HeartbeatInterval)
		assert.Equal(t, at.UnixMilli(), hb.GrantedAt, "round %d", i)
		require.Eventually(t, func() bool { return r.renewed("r1").Equal(at) }, 5*time.Second, time.Millisecond, "round %d renewed the role", i)
	}
	ended := make(chan struct{})
	r.tr.On("Heartbeat", mock.Anything, codec.Heartbeat{Member: "me", Session: rigSession, End: true}).
		Run(func(mock.Arguments) { close(ended) }).Return(nil).Once()
	cancel()
	select {
	case <-ended:
		t.Fatal("the session ended before the runners were done")
	case <-time.After(50 * time.Millisecond):
	}
	close(runnersDone)
	recv(t, ended)
	recv(t, done)
}

// Starting the session is a call to the cluster that may take up to a
// request timeout: the runners' check-ins never wait for it.
func TestSessionStartDoesNotHoldUpCheckIns(t *testing.T) {
	tr := fencingtest.NewMockTransport(t)
	m, err := New(tr, newFakeSource(state(role, nil, 0)), "me", []codec.Role{"r1"}, Options{Clock: newFakeClock(), Logger: testLogger(t)})
	require.NoError(t, err)
	s := newSession(m)
	s.vetDone()
	checked := make(chan struct{})
	tr.On("StartSession", mock.Anything, codec.MemberID("me"), mock.AnythingOfType("string")).
		Run(func(mock.Arguments) {
			go func() { s.checkIn("r1", t0); close(checked) }()
			recv(t, checked) // fails the test if the check-in waits for the start
		}).Return(rigSession, nil).Once()
	_, err = s.ensure(context.Background())
	require.NoError(t, err)
}

// A holding wakes the session for a round at once only when the member
// held nothing (the first vouch need not wait an interval) or the latest
// heartbeat excludes the role (readers take its new lease for dropped
// until a heartbeat vouches for it). Any other holding waits for the
// next round: a member taking thousands of roles ran a round (a
// DescribeMany over every held role, a note to each) per role it took,
// and acquired at 11 roles a second.
func TestSessionHoldWakesARoundOnlyWhenItMatters(t *testing.T) {
	r := newSessRig(t, "r1", "r2", "r3")
	woken := func() bool {
		select {
		case <-r.s.wake:
			return true
		default:
			return false
		}
	}
	r.hold("r1", codec.Token{ProducerID: 1, Epoch: 1})
	assert.True(t, woken(), "the first holding wakes the session")
	r.hold("r2", codec.Token{ProducerID: 2, Epoch: 1})
	r.hold("r3", codec.Token{ProducerID: 3, Epoch: 1})
	assert.False(t, woken(), "further holdings wait for the next round")
	r.s.drop("r2", true)
	r.hold("r2", codec.Token{ProducerID: 2, Epoch: 2})
	assert.True(t, woken(), "a holding of a role the heartbeats exclude wakes the session")
}
