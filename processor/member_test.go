package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

var (
	errDown   = &fencing.Error{Kind: fencing.ErrClient, Role: role, Err: errors.New("connection refused")}
	errFenced = fencing.Fenced(role, errors.New("PRODUCER_FENCED"))
	sec       = time.Second
)

// elect takes h's member from nothing to holder of role under tok at the
// current time: it registers at offset off and wins an uncontested
// challenge.
func elect(t *testing.T, h *harness, tok codec.Token, off int64) {
	t.Helper()
	h.tr.On("Register", mock.Anything, role, h.me).Return(off, nil).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok, leaseAt(h.me, tok, h.clk.Now())).Return(fenceOf(tok), nil).Once()
	h.settle()
	require.NotNil(t, h.r.hold, "elected")
}

func TestFirstElection(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.see(state(role, nil, 0))
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(0), nil).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok1, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("a", tok1, t0)).Return(int64(1), nil).Once()

	assert.Equal(t, DoRegister, h.step().Kind)
	assert.Equal(t, DoChallenge, h.step().Kind, "once its view shows its registration, the sole candidate challenges")
	a := h.step()
	assert.Equal(t, DoWait, a.Kind)
	assert.Equal(t, t0.Add(2*sec), a.Until, "next: the renewal")

	assert.Equal(t, []string{"elected 42/1"}, h.transitions())
	e, _ := h.last(Elected)
	assert.Equal(t, t0, e.At)
	assert.Equal(t, Held{Role: role, Member: "a", Token: tok1, Fence: 1, Lease: leaseAt("a", tok1, t0)}, *h.r.l.Held())
	assert.Equal(t, int64(1), e.Fence, "the offset of the challenge's lease")
	assert.Equal(t, 1.0, h.metric("krole_holder", "role", "controller", "member", "a"))
	assert.Equal(t, 1.0, h.metric("krole_transitions_total", "transition", "elected"))
}

// A holding is renewed by the member session: each round's heartbeat, once
// it commits, moves the local deadline to the round's start +
// HeartbeatDeadline; the runner only checks in, every HeartbeatInterval, and
// writes no lease.
func TestRenewal(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	for i := 1; i <= 3; i++ {
		at := t0.Add(time.Duration(i) * 2 * sec)
		h.clk.Set(at)
		a := h.settle()
		assert.Equal(t, at.Add(2*sec), a.Until, "the runner checks in every HeartbeatInterval")
		h.beat()
		assert.Equal(t, at, renewedAt(h.m, role), "the round vouched for the role")
	}
	assert.Equal(t, 3, h.beatCount())
	assert.Equal(t, []string{"elected 42/1"}, h.transitions(), "renewals are not transitions")
	assert.Equal(t, leaseAt("a", tok1, t0), h.r.l.Held().Lease, "no lease written after the election's")
	assert.Equal(t, 3.0, h.metric("krole_heartbeat_duration_seconds", "result", "ok"), "one per round")
	assert.Equal(t, 0.0, h.metric("krole_lease_rewrite_duration_seconds"), "no rewrite")
	h.tr.AssertNotCalled(t, "WriteLease", mock.Anything, role, tok1, rewriteAt("a", tok1, t0.Add(2*sec)))
}

// The member session's heartbeat is observed once per round, not once
// per role the round vouches for, and has no role label: a member holding
// four roles has, after three rounds, three observations.
func TestHeartbeatObservedOncePerRound(t *testing.T) {
	roles := []codec.Role{"r1", "r2", "r3", "r4"}
	h := newHarness(t, "a", Settings{})
	h.reg = prometheus.NewRegistry()
	m, err := New(echoTransport{h.tr, h}, h.src, "a", roles, Options{
		Settings: Settings{HeartbeatJitter: -1}, Clock: h.clk, Registerer: h.reg, OnEvent: h.record, Logger: testLogger(t),
	})
	require.NoError(t, err)
	m.sess.vetDone()
	h.m = m
	h.src.confirm = func(r codec.Role) (rolestate.Confirmed, error) {
		return rolestate.Confirmed{State: m.runners[r].st.Clone(), OpenProducerID: -1}, nil
	}
	settle := func(r *runner) {
		t.Helper()
		for range maxBurst {
			if r.step(context.Background()).Kind == DoWait {
				return
			}
		}
		t.Fatal("the member never settled")
	}
	for i, role := range roles {
		tok := codec.Token{ProducerID: int64(10 + i), Epoch: 1}
		h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(0), nil).Once()
		h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok, nil).Once()
		h.tr.On("WriteLease", mock.Anything, role, tok, leaseAt("a", tok, t0)).Return(fenceOf(tok), nil).Once()
		settle(m.runners[role])
		require.NotNil(t, m.runners[role].hold, "%s elected", role)
	}
	const took = 40 * time.Millisecond
	h.mu.Lock()
	h.beatHook = func() { h.clk.Advance(took) } // each heartbeat takes 40ms
	h.mu.Unlock()
	const rounds = 3
	for i := 1; i <= rounds; i++ {
		at := t0.Add(time.Duration(i) * 2 * sec)
		h.clk.Set(at)
		for _, role := range roles {
			settle(m.runners[role]) // checks in with the session
		}
		m.sess.round(context.Background())
		for _, role := range roles {
			require.False(t, m.runners[role].hasNote(), "round %d: a renewal needs no word to %s", i, role)
			require.Equal(t, at, renewedAt(m, role), "round %d vouched for %s", i, role)
		}
	}
	assert.Equal(t, rounds, h.beatCount())
	fams, err := h.reg.Gather()
	require.NoError(t, err)
	var found bool
	for _, f := range fams {
		if f.GetName() != "krole_heartbeat_duration_seconds" {
			continue
		}
		found = true
		require.Len(t, f.GetMetric(), 1, "one series: result ok")
		got := f.GetMetric()[0]
		require.Len(t, got.GetLabel(), 1)
		assert.Equal(t, "result", got.GetLabel()[0].GetName())
		assert.Equal(t, "ok", got.GetLabel()[0].GetValue())
		assert.Equal(t, uint64(rounds), got.GetHistogram().GetSampleCount(),
			"one observation per round, not one per held role (%d)", rounds*len(roles))
		assert.InDelta(t, rounds*took.Seconds(), got.GetHistogram().GetSampleSum(), 1e-9,
			"each from the round's start to the heartbeat's answer")
	}
	assert.True(t, found, "krole_heartbeat_duration_seconds is registered")
}

// A lease rewrite (the holder's value changed, or LeaseRewriteInterval
// passed) is a write under the holding's token naming the session; it
// moves the local deadline as a round does.
func TestLeaseRewrite(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.clk.Set(t0.Add(sec))
	h.r.l.rewriteNow = true
	h.tr.On("WriteLease", mock.Anything, role, tok1, rewriteAt("a", tok1, t0.Add(sec))).Return(int64(7), nil).Once()
	assert.Equal(t, DoRewriteLease, h.step().Kind)
	assert.Equal(t, t0.Add(sec), renewedAt(h.m, role))
	assert.Equal(t, fenceOf(tok1), h.r.l.Held().Fence, "a rewrite keeps the holding's number, not its own offset")
	// Heartbeats keep it from then on; the next rewrite is an hour after.
	for at := t0.Add(3 * sec); at.Before(t0.Add(LeaseRewriteInterval)); at = at.Add(2 * sec) {
		h.clk.Set(at)
		h.settle()
		h.beat()
	}
	h.clk.Set(t0.Add(sec + LeaseRewriteInterval))
	h.tr.On("WriteLease", mock.Anything, role, tok1, rewriteAt("a", tok1, h.clk.Now())).Return(int64(9), nil).Once()
	assert.Equal(t, DoRewriteLease, h.step().Kind)
	h.tr.AssertExpectations(t)
	assert.Equal(t, []string{"elected 42/1"}, h.transitions())
	assert.Equal(t, 2.0, h.metric("krole_lease_rewrite_duration_seconds", "result", "ok"), "one per rewrite")
	assert.Equal(t, float64(h.beatCount()), h.metric("krole_heartbeat_duration_seconds", "result", "ok"), "one per round")

	// A rewrite refused as fenced ends the holding; it is observed as such.
	h.clk.Set(h.clk.Now().Add(sec))
	h.r.l.rewriteNow = true
	h.tr.On("WriteLease", mock.Anything, role, tok1, rewriteAt("a", tok1, h.clk.Now())).Return(int64(0), errFenced).Once()
	assert.Equal(t, DoRewriteLease, h.step().Kind)
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1"}, h.transitions())
	assert.Equal(t, 1.0, h.metric("krole_lease_rewrite_duration_seconds", "result", "fenced"))
}

// A rewrite asked for at once (the holder's value changed) that fails is
// tried again after the retry backoff, not at the next hourly rewrite.
func TestFailedRewriteOfANewValueIsRetried(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.clk.Set(t0.Add(sec))
	h.r.l.rewriteNow = true
	h.tr.On("WriteLease", mock.Anything, role, tok1, rewriteAt("a", tok1, t0.Add(sec))).Return(int64(0), errors.New("broker unreachable")).Once()
	assert.Equal(t, DoRewriteLease, h.step().Kind)
	a := h.settle()
	assert.True(t, a.Until.Before(t0.Add(time.Minute)), "the next step is a retry soon, not the hourly rewrite: %v", a)
	h.clk.Set(a.Until)
	h.tr.On("WriteLease", mock.Anything, role, tok1, rewriteAt("a", tok1, a.Until)).Return(int64(9), nil).Once()
	assert.Equal(t, DoRewriteLease, h.step().Kind)
	h.tr.AssertExpectations(t)
}

// A lease rewrite waits for its call slot on the role's goroutine, which
// meanwhile takes no word from the member session, and that wait runs
// into the local deadline: so the rewrite takes the first slot freed,
// ahead of the member's queued campaigns.
func TestLeaseRewriteTakesTheFirstFreedSlot(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	var busy []func()
	for range h.m.s.MaxInFlight {
		rel, err := h.m.lim.acquire(context.Background(), prioCampaign)
		require.NoError(t, err)
		busy = append(busy, rel)
	}
	campaign := make(chan func(), 1)
	go func() {
		rel, _ := h.m.lim.acquire(context.Background(), prioCampaign)
		campaign <- rel
	}()
	waitQueued(t, h.m.lim, prioCampaign)

	h.clk.Set(t0.Add(sec))
	h.r.l.rewriteNow = true
	var waiting int
	h.tr.On("WriteLease", mock.Anything, role, tok1, rewriteAt("a", tok1, t0.Add(sec))).Run(func(mock.Arguments) {
		h.m.lim.mu.Lock()
		waiting = len(h.m.lim.q[prioCampaign])
		h.m.lim.mu.Unlock()
	}).Return(int64(7), nil).Once()
	stepped := make(chan Action, 1)
	go func() { stepped <- h.step() }()
	waitQueued(t, h.m.lim, prioRewrite)
	busy[0]()
	assert.Equal(t, DoRewriteLease, recv(t, stepped).Kind)
	assert.Equal(t, t0.Add(sec), renewedAt(h.m, role), "rewritten")
	assert.Equal(t, 1, waiting, "the campaign, queued first, still waited while the rewrite wrote")
	recv(t, campaign)() // the rewrite's slot passed on to it
	for _, rel := range busy[1:] {
		rel()
	}
}

func TestRenewalFencedEndsLeadershipAtOnce(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.m.runWork = noWork
	elect(t, h, tok1, 0)
	h.see(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0))
	workCtx := h.r.hold.ctx
	confirms := h.src.confirmed()

	// The round's DescribeTransactions names another token for the role:
	// the holding ends at once, whatever the view shows.
	h.clk.Set(t0.Add(2 * sec))
	h.described[role] = fencing.Described{Token: tok2, Held: true}
	h.beat()

	assert.Nil(t, h.r.hold, "no longer the holder, at once")
	assert.Error(t, workCtx.Err(), "work's context is cancelled")
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1"}, h.transitions())
	e, _ := h.last(Revoked)
	assert.True(t, fencing.IsFenced(e.Err))
	assert.Equal(t, t0.Add(2*sec), e.At)
	assert.Equal(t, 1.0, h.metric("krole_fenced_total"))
	assert.Equal(t, 0.0, h.metric("krole_holder", "member", "a"))
	assert.Equal(t, 1.0, h.metric("krole_transitions_total", "transition", "fenced"))

	// The view still shows its own lease, first observed at 2s: it does
	// not challenge it; it waits for its span on its own clock, and then
	// for a newer lease (the winner's) for a lease after the fence.
	a := h.step()
	assert.Equal(t, DoWait, a.Kind)
	assert.Equal(t, t0.Add(12*sec), a.Until)
	// The winner's lease shows: a waits for it like any candidate.
	h.clk.Set(t0.Add(3 * sec))
	h.see(state(role, leaseOf("b", tok2, t0.Add(sec), 10*sec), 3, "a", 0, "b", 2))
	a = h.step()
	assert.Equal(t, DoWait, a.Kind)
	assert.Equal(t, t0.Add(13*sec), a.Until)
	assert.Equal(t, confirms, h.src.confirmed(), "no challenge was even considered")
}

// The round's DescribeTransactions knows no producer for the role's
// transactional id at all (it expired under the holding:
// transactional.id.expiration.ms): the holding ends as a fence, that
// round's heartbeat excludes the role, and, since nobody took the role,
// the member takes its own lease back at once under a new token (rule 5),
// pruning nobody, instead of waiting a lease as after a fence (rule 6).
func TestExpiredTransactionalIDTakesTheRoleBackAtOnce(t *testing.T) {
	h := heldUntilItsIDExpired(t)
	require.Nil(t, h.r.hold)
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1"}, h.transitions())
	e, _ := h.last(Revoked)
	assert.True(t, fencing.IsFenced(e.Err), "%v", e.Err)
	assert.Contains(t, e.Err.Error(), "transactional.id.expiration.ms")
	assert.Equal(t, []codec.Role{role}, h.lastBeat().Excluded, "the round that learns it excludes the role")

	// Its own lease under tok1 is live on its clock until 12s; it takes
	// it back now (the mock fails on a Deregister: it prunes nobody).
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("a", tok2, h.clk.Now())).Return(fenceOf(tok2), nil).Once()
	assert.Equal(t, DoChallenge, h.step().Kind)
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1", "elected 42/2"}, h.transitions())
	e, _ = h.last(Elected)
	assert.Equal(t, fenceOf(tok2), e.Fence, "taking its own lease back is a new challenge: a new number")
	h.beat()
	assert.Empty(t, h.lastBeat().Excluded, "held again: the heartbeats vouch for it")
}

// heldUntilItsIDExpired returns a harness whose member a, elected under
// tok1 (b queued behind it), learned at 2s from its session's round that
// the coordinator knows no producer for the role's transactional id; the
// next rounds' DescribeMany answer from what the member mints again.
func heldUntilItsIDExpired(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.see(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0, "b", 3))
	h.settle()
	h.clk.Set(t0.Add(2 * sec))
	h.mu.Lock()
	h.described[role] = fencing.Described{}
	h.mu.Unlock()
	h.beat()
	h.mu.Lock()
	delete(h.described, role)
	h.mu.Unlock()
	return h
}

// Taking the role back is a race with the next candidate, to whom the
// heartbeat excluding the role let the lease go: when that one's
// InitProducerId fences the take-back's lease write, the member waits for
// the winner's lease (rule 6) instead of taking its own lease back again,
// which would fence the winner in turn, and so on.
func TestTakingTheRoleBackAndLosingTheRaceWaits(t *testing.T) {
	h := heldUntilItsIDExpired(t)
	require.NotNil(t, h.r.l.retiredTok)

	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("a", tok2, h.clk.Now())).
		Return(int64(-1), &fencing.Error{Kind: fencing.ErrFenced, Role: role, Err: errors.New("b's InitProducerId came first")}).Once()
	assert.Equal(t, DoChallenge, h.step().Kind)
	assert.Nil(t, h.r.l.retiredTok, "lost to another member: no longer its own to take back")

	// The view still shows its own lease under tok1: no AcquireEpoch (the
	// mock would fail on it) until b's lease shows or a lease has passed.
	a := h.step()
	assert.Equal(t, DoWait, a.Kind)
	h.clk.Set(t0.Add(11 * sec))
	a = h.step()
	assert.Equal(t, DoWait, a.Kind)
	assert.Contains(t, a.Reason, "fenced or lost a challenge")
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1"}, h.transitions())
}

func TestHolderThatCannotRenewStopsOnItsOwn(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.m.runWork = noWork
	elect(t, h, tok1, 0)
	workCtx := h.r.hold.ctx
	h.beatErr = errDown
	for at := t0.Add(2 * sec); at.Before(t0.Add(8 * sec)); at = at.Add(2 * sec) {
		h.clk.Set(at)
		h.settle()
		h.beat()
		require.NoError(t, workCtx.Err())
	}
	h.clk.Set(t0.Add(8 * sec))
	assert.Error(t, workCtx.Err(), "work is told to stop by the member session's deadline timer")
	assert.NotNil(t, h.r.hold, "before the runner even looks")
	assert.True(t, h.r.hasNote(), "the session told the runner")

	h.takeNote()
	assert.Nil(t, h.r.hold)
	assert.Equal(t, []string{"elected 42/1", "revoked lease lost 42/1"}, h.transitions())
	e, _ := h.last(Revoked)
	assert.Equal(t, t0.Add(8*sec), e.At, "HeartbeatDeadline after the election began, before the lease's deadline at 10s")
	assert.Equal(t, 3, h.beatCount(), "a heartbeat every round, each failing")
	assert.Equal(t, 3.0, h.metric("krole_heartbeat_duration_seconds", "result", "error"), "one per failed round")
	assert.Equal(t, 0.0, h.metric("krole_heartbeat_duration_seconds", "result", "ok"))
}

func TestExpiredLeaseTakenByTheTopRankedCandidate(t *testing.T) {
	h := newHarness(t, "b", Settings{})
	// b starts and sees x's lease, whose deadline says 1s left; b never
	// saw it renewed, so it counts the lease's span from now.
	dead := leaseOf("x", tok1, t0.Add(-9*sec), 10*sec)
	h.see(state(role, dead, 4, "x", 1, "b", 2, "v", 3)) // b's split score is above v's

	a := h.settle()
	assert.Equal(t, t0.Add(10*sec), a.Until, "waits one span from its first observation")
	assert.Empty(t, h.transitions())

	h.clk.Set(a.Until)
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("b", tok2, t0.Add(10*sec))).Return(fenceOf(tok2), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("x")).Return(nil).Once()
	assert.Equal(t, DoChallenge, h.step().Kind, "the dead holder ranks last: b, first by split score, goes at once")
	assert.Equal(t, 1, h.src.confirmed(), "after one confirmation")
	assert.Equal(t, []string{"elected 42/2"}, h.transitions())
	assert.Equal(t, []string{"x 42/1", "vacant"}, h.holders())
}

func TestLowerRanksWaitAStaggerPerRank(t *testing.T) {
	// a and b registered before c and died without a lease ever written.
	h := newHarness(t, "c", Settings{})
	h.see(state(role, nil, 0, "a", 1, "b", 2, "c", 3))

	a := h.settle()
	assert.Equal(t, t0.Add(2*sec), a.Until, "rank 2 waits two staggers")
	h.clk.Set(t0.Add(sec))
	assert.Equal(t, t0.Add(2*sec), h.settle().Until, "counted from when it saw the vacancy, not from now")

	h.clk.Set(t0.Add(2 * sec))
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok1, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("c", tok1, t0.Add(2*sec))).Return(fenceOf(tok1), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("b")).Return(nil).Once()
	h.settle()
	e, ok := h.last(Elected)
	require.True(t, ok)
	assert.Equal(t, t0.Add(2*sec), e.At, "two dead candidates ahead delay succession by exactly two staggers")

	// Pruned, they delay no later succession: c is now first.
	h.see(state(role, leaseOf("c", tok1, t0.Add(2*sec), 10*sec), 5, "c", 3, "d", 6))
	assert.Equal(t, 0, h.r.st.Rank("c"))
}

func TestPrunedCandidateRegistersAgain(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	live := leaseOf("b", tok2, t0, 10*sec)
	h.see(state(role, live, 6, "a", 1, "b", 5))
	assert.Equal(t, t0.Add(10*sec), h.settle().Until, "a was registered (offset 1) and waits")
	assert.Equal(t, int64(1), h.r.l.registered, "adopted from the view: no Register call")

	// The holder pruned a: the view shows newer records but not a.
	h.see(state(role, live, 6, "b", 5, "c", 7))
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(8), nil).Once()
	assert.Equal(t, DoRegister, h.step().Kind)
	assert.Equal(t, 2, h.r.st.Rank("a"), "back of the queue")
	assert.Equal(t, DoWait, h.step().Kind)
}

func TestTwoChallengersRacing(t *testing.T) {
	// x's lease expired at t0. a (rank 0 once x ranks last) challenges at
	// once; b, one stagger later, while a's write is still in flight
	// (its view lags, or the stagger is too short). b's AcquireEpoch
	// fences a, whose write is then refused.
	a, b := newHarness(t, "a", Settings{}), newHarness(t, "b", Settings{})
	st := state(role, leaseOf("x", tok1, t0.Add(-10*sec), 10*sec), 4, "x", 1, "a", 2, "b", 3)
	a.see(st)
	b.see(st)
	a.r.l = seenAt(a.r.l, 4, t0.Add(-10*sec)) // both saw it written 10s ago
	b.r.l = seenAt(b.r.l, 4, t0.Add(-10*sec))
	assert.Equal(t, t0.Add(sec), b.settle().Until, "b is rank 1")

	tokA, tokB := codec.Token{ProducerID: 42, Epoch: 2}, codec.Token{ProducerID: 42, Epoch: 3}
	a.tr.On("AcquireEpoch", mock.Anything, role).Return(tokA, nil).Once()
	a.tr.On("WriteLease", mock.Anything, role, tokA, mock.Anything).Return(int64(-1), errFenced).Once().Run(func(mock.Arguments) {
		b.clk.Set(t0.Add(sec))
		b.tr.On("AcquireEpoch", mock.Anything, role).Return(tokB, nil).Once()
		b.tr.On("WriteLease", mock.Anything, role, tokB, leaseAt("b", tokB, t0.Add(sec))).Return(fenceOf(tokB), nil).Once()
		b.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
		b.tr.On("Deregister", mock.Anything, role, codec.MemberID("x")).Return(nil).Once()
		b.settle()
	})
	w := a.settle()
	assert.Equal(t, []string{"elected 42/3"}, b.transitions())
	assert.Empty(t, a.transitions(), "the fenced challenger was never elected")
	assert.Equal(t, 1.0, a.metric("krole_fenced_total"))
	assert.Equal(t, t0.Add(10*sec), w.Until, "the loser leaves this vacancy alone instead of fencing the winner back")

	a.clk.Set(t0.Add(5 * sec))
	assert.Equal(t, DoWait, a.step().Kind)
	// The winner's lease shows: a waits for its span like any candidate.
	a.see(state(role, leaseOf("b", tokB, t0.Add(sec), 10*sec), 7, "b", 3))
	a.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(8), nil).Once()
	assert.Equal(t, t0.Add(15*sec), a.settle().Until)
}

func TestHolderSeeingANewerTokenStepsDown(t *testing.T) {
	// a won, then b (with a lagging view) fenced it. a learns it from the
	// view before its next renewal would have been refused.
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 2)
	h.clk.Set(t0.Add(sec))
	h.see(state(role, leaseOf("b", tok2, t0.Add(sec), 10*sec), 9, "a", 2, "b", 3))
	a := h.step()
	assert.Equal(t, DoStepDown, a.Kind)
	e, _ := h.last(Revoked)
	assert.Equal(t, ReasonFenced, e.Reason)
	assert.True(t, fencing.IsFenced(e.Err))
}

func TestResignationHandsOverWithoutWaitingForTheDeadline(t *testing.T) {
	a, b := newHarness(t, "a", Settings{}), newHarness(t, "b", Settings{})
	elect(t, a, tok1, 1)
	held := state(role, leaseOf("a", tok1, t0, 10*sec), 3, "a", 1, "b", 2)
	a.see(held)
	b.see(held)
	assert.Equal(t, t0.Add(10*sec), b.settle().Until, "b waits for a's deadline")

	// One second in, a resigns.
	a.clk.Set(t0.Add(sec))
	b.clk.Set(t0.Add(sec))
	release := releaseOf("a", tok1)
	a.tr.On("WriteLease", mock.Anything, role, tok1, release).Return(int64(5), nil).Once()
	a.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	q := make(chan error, 1)
	a.r.requestResign(resignReq{q: q})
	assert.Equal(t, DoResign, a.step().Kind)
	assert.NoError(t, <-q)
	assert.Equal(t, []string{"elected 42/1", "revoked resigned 42/1"}, a.transitions())
	e, _ := a.last(Revoked)
	assert.Equal(t, fenceOf(tok1), e.Fence, "the holding's number, which its release carries")

	// a queues again, at the back.
	a.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(6), nil).Once()
	assert.Equal(t, DoRegister, a.step().Kind)

	// b sees the release (and a's tombstone) and takes over at once.
	b.see(state(role, &release, 4, "b", 2))
	b.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	b.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("b", tok2, t0.Add(sec))).Return(fenceOf(tok2), nil).Once()
	b.settle()
	e, ok := b.last(Elected)
	require.True(t, ok)
	assert.Equal(t, t0.Add(sec), e.At, "9s before a's deadline")

	// Had the view delivered the release before the tombstone, a (named in
	// the release) would rank last, behind b.
	b2 := newHarness(t, "b", Settings{})
	b2.see(state(role, &release, 4, "a", 1, "b", 2))
	b2.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	b2.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("b", tok2, t0)).Return(fenceOf(tok2), nil).Once()
	assert.Equal(t, DoChallenge, b2.step().Kind, "a released: b does not prune it")
}

func TestLeavingResignsOnAFreshContext(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 1)
	fresh := mock.MatchedBy(func(ctx context.Context) bool { return ctx.Err() == nil })
	h.tr.On("Deregister", fresh, role, codec.MemberID("a")).Return(nil).Once()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.r.leave(ctx)
	assert.Equal(t, []string{"elected 42/1", "revoked context ended 42/1"}, h.transitions())
	// No release per role: the session's end, once every runner is done,
	// releases every lease that names the session.
	h.tr.AssertNotCalled(t, "WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1))
	h.m.sess.finish(ctx)
	assert.True(t, h.sessionEnded())
}

// Leaving with KeepOnExit writes nothing: no release, no deregistration
// (the mock would fail on either), no session end, and no heartbeat from
// a round that was under way when the context ended. Such a round's
// heartbeat, composed after the runner let the role go, would exclude it
// and hand it over at once: the next candidate would be elected
// milliseconds after a crash.
func TestLeavingWithKeepOnExitWritesNothing(t *testing.T) {
	h := newHarness(t, "a", Settings{KeepOnExit: true})
	elect(t, h, tok1, 1)
	beats := h.beatCount()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.r.leave(ctx)
	assert.Equal(t, []string{"elected 42/1", "revoked context ended 42/1"}, h.transitions())
	h.m.sess.round(ctx) // the round under way, composing its heartbeat now
	h.m.sess.finish(ctx)
	assert.Equal(t, beats, h.beatCount(), "no heartbeat, no session end")
}

func TestFlappingNetwork(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	ms := time.Millisecond
	h.see(state(role, nil, 0))

	// Registering and challenging retry through failures, backing off.
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(0), errDown).Once()
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(0), nil).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(codec.Token{}, errDown).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok1, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("a", tok1, t0.Add(500*ms))).Return(fenceOf(tok1), nil).Once()
	h.until(t0.Add(sec), func() bool { return h.r.hold != nil })
	assert.Equal(t, t0.Add(500*ms), renewedAt(h.m, role), "two backoffs of 250ms: a success resets the count")

	// Heartbeats fail and succeed by turns: it keeps the role.
	for _, ok := range []bool{false, true, false, false, true} {
		h.beatErr = nil
		if !ok {
			h.beatErr = errDown
		}
		a := h.settle()
		h.clk.Set(a.Until)
		h.settle()
		h.beat()
	}
	assert.Equal(t, []string{"elected 42/1"}, h.transitions())

	// A longer outage: the lease is lost; then the network comes back and
	// the member, alone, takes the role again under a new epoch.
	lastOK := renewedAt(h.m, role)
	h.see(state(role, leaseOf("a", tok1, lastOK, 10*sec), 2, "a", 0))
	h.beatErr = errDown
	for {
		a := h.settle()
		if h.r.hold == nil {
			break
		}
		require.False(t, a.Until.After(lastOK.Add(8*sec)), "the local deadline ends the holding at the latest")
		h.clk.Set(a.Until)
		h.beat()
	}
	assert.Equal(t, lastOK.Add(8*sec), h.clk.Now())
	h.beatErr = nil
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(codec.Token{}, errDown).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, mock.Anything).Return(fenceOf(tok2), nil).Once()
	h.until(lastOK.Add(20*sec), func() bool { return h.r.hold != nil })
	assert.Equal(t, []string{"elected 42/1", "revoked lease lost 42/1", "elected 42/2"}, h.transitions())
	e, _ := h.last(Elected)
	assert.Equal(t, lastOK.Add(10*sec+250*ms), e.At,
		"its own lease's deadline, plus one backoff after the failed AcquireEpoch")
}

func TestHolderChangedReportsChangesNotRenewals(t *testing.T) {
	h := newHarness(t, "c", Settings{})
	h.tr.On("Register", mock.Anything, role, codec.MemberID("c")).Return(int64(9), nil).Once()
	h.see(state(role, leaseOf("x", tok1, t0, 10*sec), 3, "z", 1))
	h.settle()
	h.see(state(role, leaseOf("x", tok1, t0.Add(2*sec), 10*sec), 5, "z", 1, "c", 9))
	h.clk.Set(t0.Add(2 * sec))
	h.settle()
	h.see(state(role, leaseOf("y", tok2, t0.Add(3*sec), 10*sec), 7, "z", 1, "c", 9)) // z ahead of c in join order and by split score
	h.clk.Set(t0.Add(3 * sec))
	h.settle()
	h.clk.Set(t0.Add(13 * sec))
	assert.Equal(t, t0.Add(14*sec), h.settle().Until, "c is rank 1 behind z")
	assert.Equal(t, []string{"x 42/1", "y 42/2", "vacant"}, h.holders())
}

// noWork is a Work that returns at once, keeping the role: the holding
// gets a context (made for work only) and no goroutine stays behind.
func noWork(context.Context, Held) error { return nil }

// renewedAt returns when the member's holding of role was last renewed,
// as the member session's local deadline for it says; the zero time when
// the session holds no such role.
func renewedAt(m *Member, role codec.Role) time.Time {
	d, ok := m.sess.deadline(role)
	if !ok {
		return time.Time{}
	}
	return d.Add(-m.s.HeartbeatDeadline)
}

// awaitCheckIn waits until the runner of role, waiting for its work to
// stop, has checked in with the member session at since or later (it does
// every HeartbeatInterval, its next timer armed first).
func awaitCheckIn(t *testing.T, m *Member, role codec.Role, since time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		m.sess.mu.Lock()
		defer m.sess.mu.Unlock()
		h := m.sess.held[role]
		return h != nil && h.checkedIn >= monoOf(since)
	}, failsafe, time.Millisecond, "the runner checks in at %v or later", since)
}
