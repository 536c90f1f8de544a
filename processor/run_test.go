package processor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

func TestRunWorkFollowsTheRole(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	w := newWorker(h.clk)
	h.expectElection(0)
	d := startRun(t, h, w.work)

	assert.Equal(t, t0.Add(2*sec), d.wait())
	held := recv(t, w.started)
	assert.Equal(t, Held{Role: role, Member: "a", Token: tok1, Fence: fenceOf(tok1), Lease: leaseAt("a", tok1, t0)}, held)

	// b took the role (its view lagged); a's view shows it a second
	// later: a steps down and its work's context ends, at once.
	h.clk.Set(t0.Add(sec))
	tok3 := codec.Token{ProducerID: 42, Epoch: 3}
	bLease := leaseOf("b", tok2, t0.Add(sec), 10*sec)
	assert.Equal(t, t0.Add(11*sec), d.push(state(role, bLease, 5, "a", 0, "b", 1)), "a waits for b's deadline")
	assert.Equal(t, t0.Add(sec), recv(t, w.ended))
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1"}, h.transitions())

	// b dies; at its deadline a takes the role back and work starts again.
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok3, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok3, leaseAt("a", tok3, t0.Add(11*sec))).Return(fenceOf(tok3), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("b")).Return(nil).Once()
	h.clk.Set(t0.Add(11 * sec))
	assert.Equal(t, t0.Add(13*sec), d.wait())
	assert.Equal(t, tok3, recv(t, w.started).Token)

	// The context ends: work stops, a deregisters, and the session's end
	// releases the role, so the next member needs no deadline.
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	require.NoError(t, d.stop())
	assert.True(t, h.sessionEnded())
	recv(t, w.ended)
	assert.Equal(t, int32(2), w.runs.Load())
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1", "elected 42/3", "revoked context ended 42/3"}, h.transitions())
	assert.ErrorIs(t, h.m.Run(context.Background(), nil), ErrAlreadyRun)
}

func TestRunResign(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.src.set(state(role, nil, 0, "b", 1))
	w := newWorker(h.clk)
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(2), nil).Once()
	d := startRun(t, h, w.work)
	assert.Equal(t, t0.Add(sec), d.wait(), "rank 1 waits a stagger")
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok1, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("a", tok1, t0.Add(sec))).Return(fenceOf(tok1), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("b")).Return(nil).Once()
	h.clk.Set(t0.Add(sec)) // b, ahead, never challenged: pruned
	assert.Equal(t, t0.Add(3*sec), d.wait())
	recv(t, w.started)

	h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(8), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(7), nil).Once()
	require.NoError(t, h.m.Resign(context.Background(), role))
	recv(t, w.ended)
	assert.Equal(t, t0.Add(2*sec), d.wait(), "queued again, behind b in its view: a stagger")
	assert.Equal(t, []string{"elected 42/1", "revoked resigned 42/1"}, h.transitions())

	assert.ErrorIs(t, h.m.Resign(context.Background(), role), ErrNotHolder)
	d.wait()
	assert.ErrorIs(t, h.m.Resign(context.Background(), "other"), ErrUnknownRole)

	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	require.NoError(t, d.stop())
	assert.ErrorIs(t, h.m.Resign(context.Background(), role), ErrNotRunning)
}

// A Resign whose work stops slowly, past the holding's first local
// deadline (t0+8s), keeps the holding renewed while it waits (it checks in
// with the member session, whose heartbeats vouch for it), so that the role is
// neither released nor left to lapse while work runs; the release write
// then gets its whole TransactionTimeout, however long the wait took.
func TestRunResignAfterSlowWork(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.src.set(state(role, nil, 0))
	d, cancelled, finish := holdWithSlowStop(t, h)

	resigned := make(chan error, 1)
	go func() { resigned <- h.m.Resign(context.Background(), role) }()
	recv(t, cancelled)
	for i := 1; i <= 5; i++ { // rounds at t0+2s, 4s, ... 10s: past the first deadline, t0+8s
		at := t0.Add(time.Duration(2*i) * sec)
		h.clk.Set(at)
		awaitCheckIn(t, h.m, role, at.Add(-sec)) // the check-in this Set's time brings
		h.m.sess.round(context.Background())
		assert.False(t, h.r.hasNote(), "round %d kept the role", i)
	}
	assert.Equal(t, 5, h.beatCount(), "each round's heartbeat vouched for the role")
	h.tr.AssertNotCalled(t, "WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1))
	assert.Equal(t, []string{"elected 42/1"}, h.transitions(), "no Revoked while work stops")

	var releaseCtxErr error
	h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(8), nil).Once().
		Run(func(args mock.Arguments) { releaseCtxErr = args.Get(0).(context.Context).Err() })
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(2), nil).Once()
	h.noEcho = true // the new registration stays on its way: no second challenge
	close(finish)
	require.NoError(t, recv(t, resigned))
	assert.NoError(t, releaseCtxErr, "the release write's context")
	assert.Equal(t, []string{"elected 42/1", "revoked resigned 42/1"}, h.transitions())
	d.wait()

	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	require.NoError(t, d.stop())
}

func TestRunWorkErrorResignsAndRetries(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	boom := errors.New("boom")
	var runs atomic.Int32
	started := make(chan Held, 4)
	work := func(ctx context.Context, held Held) error {
		started <- held
		if runs.Add(1) == 1 {
			return boom
		}
		<-ctx.Done()
		return nil
	}
	h.expectElection(0)
	h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(8), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	d := startRun(t, h, work)
	assert.Equal(t, t0.Add(2*sec), d.wait())
	recv(t, started)
	assert.Equal(t, t0.Add(2*sec), d.wait(), "resigned; backs off a heartbeat interval before queueing again")
	e, _ := h.last(Revoked)
	assert.Equal(t, ReasonWorkFailed, e.Reason)
	assert.ErrorIs(t, e.Err, boom)

	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(3), nil).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, mock.Anything).Return(fenceOf(tok2), nil).Once()
	h.clk.Set(t0.Add(2 * sec))
	d.wait()
	assert.Equal(t, tok2, recv(t, started).Token)

	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	require.NoError(t, d.stop())
	assert.Equal(t, []string{"elected 42/1", "revoked work failed 42/1", "elected 42/2", "revoked context ended 42/2"}, h.transitions())
	assert.True(t, h.sessionEnded(), "leaving: the session's end releases the role")
}

func TestRunLocalDeadlineStopsWorkWhileARenewalHangs(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	w := newWorker(h.clk)
	h.expectElection(0)
	d := startRun(t, h, w.work)
	d.wait()
	recv(t, w.started)

	// The round's heartbeat hangs, ignoring its context (a stuck
	// connection).
	inFlight, unblock := make(chan struct{}), make(chan struct{})
	h.mu.Lock()
	h.beatHook = func() { close(inFlight); <-unblock }
	h.mu.Unlock()
	h.clk.Set(t0.Add(2 * sec))
	d.wait()
	roundDone := make(chan struct{})
	go func() { defer close(roundDone); h.m.sess.round(context.Background()) }()
	recv(t, inFlight)

	// (After the loss the role looks vacant to a: its challenges fail
	// here, which keeps the rest of the test to the heartbeat.)
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(codec.Token{}, errDown).Maybe()
	h.clk.Set(t0.Add(8 * sec))
	assert.Equal(t, t0.Add(8*sec), recv(t, w.ended), "work stops at the local deadline, while the call still hangs")
	d.wait()
	for len(h.transitions()) < 2 {
		d.wait() // it waited once more before it took the session's word
	}
	assert.Equal(t, []string{"elected 42/1", "revoked lease lost 42/1"}, h.transitions(), "the runner does not wait for the heartbeat")

	// The heartbeat then commits, after the deadline of the role it
	// vouched for: the incarnation ends (a session end), so that it
	// brings no lease back to life.
	h.mu.Lock()
	h.beatHook = nil
	h.mu.Unlock()
	close(unblock)
	recv(t, roundDone)
	assert.True(t, h.sessionEnded(), "a late heartbeat ends its incarnation")

	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	require.NoError(t, d.stop())
}

func TestRunManyRoles(t *testing.T) {
	noLeaks(t)
	roles := []codec.Role{"r1", "r2", "r3"}
	h := newHarness(t, "a", Settings{})
	tr := h.tr
	clk := newFakeClock()
	src := newFakeSource(rolestate.State{LeaseOffset: -1})
	var inCall atomic.Int32
	elected := make(chan codec.Role, len(roles))
	revoked := make(chan codec.Role, len(roles))
	onEvent := func(e Event) {
		if inCall.Add(1) != 1 {
			panic("OnEvent called concurrently")
		}
		defer inCall.Add(-1)
		switch e.Kind {
		case Elected:
			elected <- e.Role
		case Revoked:
			revoked <- e.Role
		}
	}
	for i, r := range roles {
		tok := codec.Token{ProducerID: int64(i), Epoch: 0}
		tr.On("Register", mock.Anything, r, codec.MemberID("a")).Return(int64(0), nil).Once()
		tr.On("AcquireEpoch", mock.Anything, r).Return(tok, nil).Once()
		tr.On("WriteLease", mock.Anything, r, tok, leaseAt("a", tok, t0)).Return(fenceOf(tok), nil).Once()
		tr.On("Deregister", mock.Anything, r, codec.MemberID("a")).Return(nil).Once()
	}
	m, err := New(echoTransport{tr, h}, src, "a", roles, Options{Settings: Settings{HeartbeatJitter: -1}, Clock: clk, OnEvent: onEvent, Logger: testLogger(t)})
	require.NoError(t, err)
	h.m = m
	src.confirm = func(r codec.Role) (rolestate.Confirmed, error) { // on r's goroutine, which owns its state
		return rolestate.Confirmed{State: m.runners[r].st.Clone(), OpenProducerID: -1}, nil
	}
	assert.Equal(t, roles, m.Roles())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx, nil) }()
	got := map[codec.Role]bool{}
	for range roles {
		got[recv(t, elected)] = true
	}
	assert.Len(t, got, len(roles))
	cancel()
	require.NoError(t, recv(t, errc))
	assert.Len(t, revoked, len(roles))
	assert.True(t, h.sessionEnded(), "one session end releases every role")
	tr.AssertNotCalled(t, "WriteLease", mock.Anything, mock.Anything, mock.Anything, mock.MatchedBy(func(l codec.Lease) bool { return l.Released() }))
}

// A renewal in flight when Run's context ends is not cut short: cutting
// it would leave its outcome unknown, retire the token, and leave the
// successor waiting for the lease to run out instead of taking the
// released role at once. It finishes (bounded by its own timeout), and
// the member then releases the role and deregisters.
func TestRunEndDuringARenewalLetsItFinishThenReleases(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.src.set(state(role, nil, 0))
	h.expectElection(0)
	d := startRun(t, h, nil)
	assert.Equal(t, t0.Add(2*sec), d.wait())

	// A lease rewrite (the holder's value changed) is in flight when Run's
	// context ends: it finishes on its own context, and the session's end
	// then releases the role.
	var callErr error
	h.tr.On("WriteLease", mock.Anything, role, tok1, rewriteAt("a", tok1, t0.Add(sec))).Run(func(args mock.Arguments) {
		d.cancel() // Run's context ends while the rewrite is in flight
		callErr = args.Get(0).(context.Context).Err()
	}).Return(int64(9), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	h.clk.Set(t0.Add(sec))
	require.NoError(t, h.m.RewriteLease(role))
	select {
	case err := <-d.errc:
		d.errc <- err // for the cleanup
		require.NoError(t, err)
	case <-time.After(failsafe):
		t.Fatal("Run did not return")
	}
	assert.NoError(t, callErr, "the rewrite's context outlives Run's")
	assert.Equal(t, []string{"elected 42/1", "revoked context ended 42/1"}, h.transitions())
	assert.True(t, h.sessionEnded())
}

// A holding whose token the transport retired (work's write under it got
// no answer) cannot release under it; resigning then takes a new epoch,
// which fences only the member's former self, and releases under that,
// so the next candidate need not wait for the lease to run out.
func TestResignWithARetiredTokenReleasesUnderANewEpoch(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.src.set(state(role, nil, 0))
	h.expectElection(0)
	d := startRun(t, h, nil)
	assert.Equal(t, t0.Add(2*sec), d.wait())
	// The view shows the member's lease, under tok1.
	d.push(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0))

	retiredErr := &fencing.Error{Kind: fencing.ErrNotHeld, Role: role, Err: fencing.ErrRetired}
	h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(-1), retiredErr).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, codec.ReleaseLease("a", tok2)).Return(int64(9), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(3), nil).Maybe()
	h.noEcho = true
	require.NoError(t, h.m.Resign(context.Background(), role))
	// Resign returns once the role is released; the deregistration
	// follows on the role's goroutine, so expectations are checked after
	// Run has returned.
	d.wait()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Maybe()
	require.NoError(t, d.stop())
	h.tr.AssertExpectations(t)
}

// An operator's step-down (the member's registration removed while it
// holds the role) of a holder whose work drains past the local deadline:
// the member session's rounds go on renewing the role while work stops
// (one every heartbeat interval, past the 8s deadline of its last renewal
// before the step-down; no lease is written), and the member releases
// only once work has returned. A round that finds the role's token moved
// (its DescribeTransactions names another) ends the renewals: the
// holding is lost, and the member goes on as after any loss.
func TestRunDeregisteredRenewsWhileWorkStops(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		name := "work returns"
		if fenced {
			name = "a renewal fenced"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, "a", Settings{})
			d, cancelled, finish := holdWithSlowStop(t, h)

			// The registration is gone (krole resign --member); the lease
			// is still the member's.
			h.clk.Set(t0.Add(sec))
			d.upd <- state(role, leaseOf("a", tok1, t0, DefaultLeaseDuration), 2)
			recv(t, cancelled)
			expectEnd := func() {
				if fenced {
					// The holding is lost: the release is refused too,
					// and the member deregisters, work or no work.
					h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(-1), fencing.ErrFenced).Once()
				} else {
					h.tr.On("WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1)).Return(int64(8), nil).Once()
				}
				h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
				h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(3), nil).Maybe()
				h.noEcho = true
			}
			rounds := 0
			for i := 1; i <= 5; i++ { // rounds at t0+2s, 4s, ... 10s: past the first deadline, t0+8s
				if fenced && i == 3 {
					// The round's DescribeTransactions names another token.
					expectEnd()
					h.mu.Lock()
					h.described[role] = fencing.Described{Token: tok2, Held: true}
					h.mu.Unlock()
				}
				assert.Equal(t, []string{"elected 42/1"}, h.transitions(), "no Revoked while work stops")
				at := t0.Add(time.Duration(2*i) * sec)
				h.clk.Set(at)
				awaitCheckIn(t, h.m, role, at.Add(-sec)) // the check-in this Set's time brings
				h.m.sess.round(context.Background())
				rounds++
				if fenced && i == 3 {
					break
				}
				assert.False(t, h.r.hasNote(), "round %d kept the role", i)
			}
			if !fenced {
				h.tr.AssertNotCalled(t, "WriteLease", mock.Anything, role, tok1, releaseOf("a", tok1))
				expectEnd()
				close(finish)
			}
			d.wait()
			assert.Equal(t, []string{"elected 42/1", "revoked deregistered 42/1"}, h.transitions())
			assert.Equal(t, 5, rounds+map[bool]int{false: 0, true: 2}[fenced], "rounds while work stopped (the third found the token moved)")
			assert.Equal(t, rounds, h.beatCount())
			if fenced {
				close(finish) // work outlived the lost holding, as after any loss
			}
			h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Maybe()
			require.NoError(t, d.stop())
		})
	}
}

// A leaving holder's deregistration goes after its session end, and the
// session end does not wait for it: the member named in the lease that
// ended ranks last, so the successor need not see the deregistration
// first, and the session end, which the successor does wait for, is not
// queued behind the deregistration's produce on the connection
// (docs/BENCHMARKS.md, "Round trips per step"). Here the session end is
// held until the deregistration begins, or 300ms: the deregistration must
// find it written.
func TestRunLeavingDeregistersAfterTheSessionEnd(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	w := newWorker(h.clk)
	h.expectElection(0)
	d := startRun(t, h, w.work)
	assert.Equal(t, t0.Add(2*sec), d.wait())
	recv(t, w.started)

	deregistering := make(chan struct{})
	h.mu.Lock()
	h.endHook = func() {
		select {
		case <-deregistering:
		case <-time.After(300 * time.Millisecond):
		}
	}
	h.mu.Unlock()
	var endedFirst bool
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once().Run(func(mock.Arguments) {
		endedFirst = h.sessionEnded()
		close(deregistering)
	})
	require.NoError(t, d.stop())
	recv(t, w.ended)
	assert.True(t, endedFirst, "the session end was written before the deregistration began")
	assert.True(t, h.sessionEnded())
}
