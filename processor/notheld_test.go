package processor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// A token the transport retired (a write under it, a writer's or a
// stream's, got no definite answer; fencing.TokenChecker says so at the
// runner's next check-in) ends the holding at once. The view
// still shows the member's own lease under the retired token as live: the
// member takes the role back at once under a new token (it fences only its
// former self), and prunes nobody.
func TestRenewalOnARetiredTokenEndsTheHoldingAndTakesTheRoleBack(t *testing.T) {
	for _, retired := range []*fencing.Error{
		{Kind: fencing.ErrUnknownOutcome, Role: role},
		{Kind: fencing.ErrNotHeld, Role: role, Err: fmt.Errorf("token 42/1 was %w: a request under it got no definite answer", fencing.ErrRetired)},
	} {
		kind := retired.Kind
		t.Run(kind.Error(), func(t *testing.T) {
			h := newHarness(t, "a", Settings{})
			h.m.runWork = noWork
			elect(t, h, tok1, 0)
			h.see(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0, "b", 3))
			h.settle()
			workCtx := h.r.hold.ctx

			// A write under tok1 (work's) got no definite answer: the
			// transport retired the token, and the runner learns it at
			// its next check-in.
			h.clk.Set(t0.Add(2 * sec))
			h.tokErr = retired
			h.step()
			h.tokErr = nil

			assert.Nil(t, h.r.hold, "no longer the holder, at once")
			assert.Error(t, workCtx.Err(), "work's context is cancelled")
			assert.Equal(t, []string{"elected 42/1", "revoked token retired 42/1"}, h.transitions())
			e, _ := h.last(Revoked)
			assert.ErrorIs(t, e.Err, kind)
			assert.Equal(t, 0.0, h.metric("krole_fenced_total"), "not a fence")
			assert.Equal(t, 1.0, h.metric("krole_transitions_total", "transition", "token_retired"))

			// Its own lease under tok1 looks live for 8s more: it goes at
			// once, after a confirmation, and deregisters nobody (b saw
			// no vacancy).
			h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
			h.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("a", tok2, t0.Add(2*sec))).Return(fenceOf(tok2), nil).Once()
			confirms := h.src.confirmed()
			assert.Equal(t, DoChallenge, h.step().Kind)
			assert.Equal(t, confirms+1, h.src.confirmed())
			assert.Equal(t, []string{"elected 42/1", "revoked token retired 42/1", "elected 42/2"}, h.transitions())
		})
	}
}

// A challenge whose lease write gets no definite answer (a pipelined
// commit sent without one: fencing retires the token) may have committed
// a lease that names the member and its session under a token nothing
// writes under again. Nobody acts on that lease: the member's heartbeats
// exclude the role (they would otherwise keep it alive for the others for
// as long as the member lives), and the member, once its view shows the
// lease, takes the role back at once under a new token, without waiting
// for the lease's span. (TestIntegrationStallAtStartShedsNothing with
// pipelining: a role stayed unheld for 3 s and more, its stale lease
// renewed by the heartbeats.)
func TestChallengeWithoutADefiniteAnswerTakesItsOwnLeaseBack(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.see(state(role, nil, 0, "a", 0, "b", 3))
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok1, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("a", tok1, t0)).
		Return(int64(-1), &fencing.Error{Kind: fencing.ErrUnknownOutcome, Role: role, Err: errors.New("EndTxn commit, sent behind the produce, got no answer")}).Once()
	assert.Equal(t, DoChallenge, h.step().Kind)
	require.Nil(t, h.r.hold, "no holding without an answer")

	h.beat()
	assert.Equal(t, []codec.Role{role}, h.lastBeat().Excluded, "the heartbeat excludes the role its challenge left unsure")

	// The lease had committed: the view shows it, live for the lease's
	// span. After the retry backoff the member takes it back at once.
	h.see(state(role, func() *codec.Lease { l := leaseAt("a", tok1, t0); return &l }(), 5, "a", 0, "b", 3))
	a := h.settle()
	require.Equal(t, DoWait, a.Kind)
	assert.True(t, a.Until.Before(t0.Add(sec)), "only the retry backoff, not the lease's span: waits until %v", a.Until)
	h.clk.Set(a.Until)
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("a", tok2, a.Until)).Return(fenceOf(tok2), nil).Once()
	assert.Equal(t, DoChallenge, h.step().Kind)
	assert.Equal(t, []string{"elected 42/2"}, h.transitions())

	h.beat()
	assert.Empty(t, h.lastBeat().Excluded, "held again: the heartbeats vouch for it")
}

// The quick way back is for the member's own lease under the retired
// token only: when the confirmed state shows another member's newer lease,
// the normal rules apply, and it waits for that lease.
func TestRetiredTokenDoesNotChallengeANewerLease(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.see(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0, "b", 3))
	h.settle()
	h.clk.Set(t0.Add(2 * sec))
	h.tokErr = &fencing.Error{Kind: fencing.ErrNotHeld, Role: role, Err: fmt.Errorf("token 42/1 was %w", fencing.ErrRetired)}
	h.step()
	require.Nil(t, h.r.hold)

	// b took the role meanwhile; the view had not shown it, the
	// confirmation does.
	newer := state(role, leaseOf("b", tok2, t0.Add(sec), 10*sec), 4, "a", 0, "b", 3)
	h.src.confirm = func(codec.Role) (rolestate.Confirmed, error) {
		return rolestate.Confirmed{State: newer, OpenProducerID: -1}, nil
	}
	a := h.step()
	assert.Equal(t, DoWait, a.Kind, "no AcquireEpoch: the mock would fail on it")
	assert.Equal(t, t0.Add(12*sec), a.Until, "b's lease, first seen now, runs a span")
	assert.Equal(t, []string{"elected 42/1", "revoked token retired 42/1"}, h.transitions())
}

// Members that start together must not each see themselves first: until
// the view shows this member's own registration, it cannot know of the
// registrations written before it (lower offsets), so it does not
// challenge, however vacant the role looks.
func TestNoChallengeBeforeTheViewShowsOwnRegistration(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.noEcho = true
	h.see(state(role, nil, 0))
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(1), nil).Once()

	assert.Equal(t, DoRegister, h.step().Kind)
	a := h.step()
	assert.Equal(t, DoWait, a.Kind, "the role is vacant, but a's registration is not in its view yet")
	assert.Contains(t, a.Reason, "not in the view yet")

	// The view catches up: b registered first, at offset 0.
	h.see(state(role, nil, 2, "b", 0, "a", 1))
	a = h.step()
	assert.Equal(t, DoWait, a.Kind, "rank 1 waits its stagger behind b")
	assert.Equal(t, t0.Add(time.Second), a.Until)
	assert.Nil(t, h.r.hold)
}

// A bare ErrNotHeld from CheckToken is not a retirement: the transport forgot
// the token because a write under it (work's, through a fencing.Writer or
// a stream) was fenced, so another member may hold the role. The member
// ends the holding as fenced and takes the wait after a loss: it does not
// take its "own" lease back, even once the lease looks expired, until a
// newer lease shows or a lease duration has passed.
func TestRenewalOnATokenForgottenAfterAFenceIsALoss(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.see(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0, "b", 3))
	h.settle()

	h.clk.Set(t0.Add(2 * sec))
	h.tokErr = &fencing.Error{Kind: fencing.ErrNotHeld, Role: role}
	h.step()
	require.Nil(t, h.r.hold)
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1"}, h.transitions())
	assert.Equal(t, 1.0, h.metric("krole_fenced_total"))
	assert.Nil(t, h.r.l.retiredTok, "not a retirement")

	// Its own lease under tok1 looks live: it waits (no AcquireEpoch: the
	// mock would fail on it).
	a := h.step()
	assert.Equal(t, DoWait, a.Kind)
	// Past the lease's span (seen at t0), still no newer lease: the wait
	// after the loss (2s + a lease duration) holds it back.
	h.clk.Set(t0.Add(11 * sec))
	a = h.step()
	assert.Equal(t, DoWait, a.Kind, "no challenge within a lease duration of the loss")
	assert.Contains(t, a.Reason, "fenced or lost a challenge")
	assert.Equal(t, t0.Add(12*sec), a.Until)
}

// Resigning with a retired token releases under a new epoch only after a
// confirmation that still shows the member's own lease as the latest:
// when it shows a newer lease (a successor took over), no AcquireEpoch is
// sent (it would fence the successor) and nothing is released.
func TestReleaseUnderANewEpochConfirmsFirst(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.see(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0, "b", 3))
	h.settle()
	h.clk.Set(t0.Add(sec))

	retiredErr := errRetiredTok1()
	h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(-1), retiredErr).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	newer := state(role, leaseOf("b", tok2, t0.Add(sec), 10*sec), 4, "a", 0, "b", 3)
	h.src.confirm = func(codec.Role) (rolestate.Confirmed, error) {
		return rolestate.Confirmed{State: newer, OpenProducerID: -1}, nil
	}
	confirms := h.src.confirmed()
	h.r.l.resign = ReasonResigned
	assert.Equal(t, DoResign, h.step().Kind)
	assert.Equal(t, confirms+1, h.src.confirmed(), "confirmed before any new epoch")
	h.tr.AssertNumberOfCalls(t, "AcquireEpoch", 1) // the election's only
	h.tr.AssertExpectations(t)
}

// Past the holding's local deadline the lease may have run out for others:
// no new epoch, not even a confirmation; the lease runs out.
func TestReleaseUnderANewEpochNotPastTheLocalDeadline(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.see(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0, "b", 3))
	h.settle()
	h.clk.Set(t0.Add(8 * sec)) // renewed at t0; HeartbeatDeadline 8s

	retiredErr := errRetiredTok1()
	h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(-1), retiredErr).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	confirms := h.src.confirmed()
	h.r.resign(context.Background(), ReasonResigned)
	assert.Equal(t, confirms, h.src.confirmed())
	h.tr.AssertNumberOfCalls(t, "AcquireEpoch", 1) // the election's only
	h.tr.AssertExpectations(t)
}

// A holding whose own lease its view does not show yet (it was elected a
// moment ago) and whose token was retired (its challenge's commit was
// resent after a request without an answer) still releases under a new
// epoch when it leaves: the confirmation, not the view as it stood, says
// whether its lease is the latest. Before, the release was skipped and
// the role stayed unheld for a lease (found by the chaos suite: a holder
// pruned at once by a concurrent challenger left the role to run out).
func TestReleaseUnderANewEpochWhenTheViewLagsItsOwnLease(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.see(state(role, nil, 1, "a", 0, "b", 3)) // its own lease not shown yet
	h.settle()
	h.clk.Set(t0.Add(sec))

	retiredErr := errRetiredTok1()
	tok3 := codec.Token{ProducerID: 42, Epoch: 3}
	h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(-1), retiredErr).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok3, nil).Once()
	// A holding begun and ended by the release: its number is the
	// release's own offset, which it cannot carry.
	h.tr.On("WriteLease", mock.Anything, role, tok3, codec.ReleaseLease("a", tok3)).Return(int64(12), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	own := state(role, leaseOf("a", tok1, t0, 10*sec), 4, "a", 0, "b", 3)
	h.src.confirm = func(codec.Role) (rolestate.Confirmed, error) {
		return rolestate.Confirmed{State: own, OpenProducerID: -1}, nil
	}
	confirms := h.src.confirmed()
	h.r.resign(context.Background(), ReasonResigned)
	assert.Equal(t, confirms+1, h.src.confirmed(), "confirmed before the new epoch")
	h.tr.AssertNumberOfCalls(t, "AcquireEpoch", 2) // the election's and the release's
	h.tr.AssertExpectations(t)
}

// errRetiredTok1 is what the transport answers a call under tok1 once it
// retired that token after an unknown outcome.
func errRetiredTok1() error {
	return &fencing.Error{Kind: fencing.ErrNotHeld, Role: role, Err: fmt.Errorf("token %s was %w", tok1, fencing.ErrRetired)}
}
