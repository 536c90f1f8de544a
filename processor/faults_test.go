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
	"github.com/krabka/krole/rolestate"
)

// A member never challenges from a failed confirmation: it backs off with
// the retry backoff, and AcquireEpoch is never called meanwhile (the mock
// fails on an unexpected call).
func TestNoChallengeFromAFailedConfirmation(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.see(state(role, nil, 0, "a", 0))
	h.confirmErr = errDown
	var waits []time.Duration
	for range 4 {
		a := h.settle()
		waits = append(waits, a.Until.Sub(h.clk.Now()))
		h.clk.Set(a.Until)
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{250 * ms, 500 * ms, 1000 * ms, 2000 * ms}, waits, "the retry backoff, doubling")
	assert.Equal(t, 4, h.src.confirmed())
	assert.Empty(t, h.transitions())

	h.confirmErr = nil
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok1, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("a", tok1, h.clk.Now())).Return(fenceOf(tok1), nil).Once()
	assert.Equal(t, DoChallenge, h.step().Kind)
	assert.Equal(t, []string{"elected 42/1"}, h.transitions())
}

// A member back from a pause (or a partition, or with a lagging view)
// finds on its clock that the lease it last saw has long expired. Its
// view still shows that lease; the confirmation shows the holder's
// latest renewal, a record it has not seen expire: it does not challenge.
func TestBackFromAPauseNoChallengeOfALeaseNotSeenExpire(t *testing.T) {
	h := newHarness(t, "b", Settings{})
	h.see(state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "b", 2))
	assert.Equal(t, t0.Add(10*sec), h.settle().Until)

	h.clk.Set(t0.Add(30 * sec)) // the pause
	renewed := state(role, leaseOf("x", tok1, t0.Add(28*sec), 10*sec), 40, "x", 1, "b", 2)
	h.src.confirm = func(codec.Role) (rolestate.Confirmed, error) {
		return rolestate.Confirmed{State: renewed, OpenProducerID: -1}, nil
	}
	a := h.step()
	assert.Equal(t, DoWait, a.Kind, "no AcquireEpoch: the mock would fail on it")
	assert.Equal(t, t0.Add(40*sec), a.Until, "the renewal, first seen now, runs a span")
	assert.Equal(t, 1, h.src.confirmed())
	assert.Equal(t, renewed, h.r.st, "the confirmed state replaces the stale one")
}

// A confirmation that takes long (a round trip held by a partition and
// answered when it heals) shows the holder's latest renewal for the first
// time when it returns: the renewal's span counts from then, not from
// when the confirmation began. Counted from the start, a member that just
// got its network back judged the live holder expired at its next step
// and fenced it (found by TestRunPartitionedHolder, after the view's
// confirmation became one Fetch bounded by the request timeout only).
func TestSlowConfirmationCountsTheLeaseFromItsAnswer(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.see(state(role, nil, 0, "a", 1, "b", 2)) // a ranks first; the role looks vacant
	renewed := state(role, leaseOf("b", tok1, t0.Add(5*sec), 2*sec), 40, "a", 1, "b", 2)
	h.src.confirm = func(codec.Role) (rolestate.Confirmed, error) {
		h.clk.Advance(5 * sec) // the answer comes when the network heals
		return rolestate.Confirmed{State: renewed, OpenProducerID: -1}, nil
	}
	a := h.step()
	require.Equal(t, DoWait, a.Kind, "no AcquireEpoch: the mock would fail on it")
	assert.Equal(t, t0.Add(7*sec), a.Until, "b's renewal, first seen when the confirmation returned, runs its 2s span from then")

	h.src.confirm = nil
	h.src.st = renewed
	h.clk.Set(t0.Add(5*sec + 1500*time.Millisecond))
	assert.Equal(t, DoWait, h.step().Kind, "1.5s after it first saw b's renewal, b's lease is live")
	assert.Empty(t, h.transitions())
	assert.Equal(t, []string{"vacant", "b 42/1"}, h.holders())
}

// A registration's wait to show in the view counts from when Register
// returned: a slow Register (4s here) does not shorten it, so the member
// does not register again, at the back, while its first registration is
// still on its way to the view.
func TestSlowRegistrationWaitsFromItsAnswer(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.noEcho = true // the view never shows it
	h.see(state(role, leaseOf("b", tok1, t0, 60*sec), 4, "b", 1))
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(8), nil).Once().
		Run(func(mock.Arguments) { h.clk.Advance(4 * sec) })
	a := h.settle()
	assert.Equal(t, DoWait, a.Kind)
	assert.Equal(t, t0.Add(14*sec), a.Until, "the lease duration (10s) from the answer, at t0+4s")

	h.clk.Set(t0.Add(12 * sec)) // 12s after the step began, 8s after the answer
	assert.Equal(t, DoWait, h.step().Kind, "no second Register: the mock would fail on it")

	h.clk.Set(t0.Add(14 * sec))
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(9), nil).Once()
	assert.Equal(t, DoRegister, h.step().Kind, "registers again once the wait from the answer is over")
	h.tr.AssertExpectations(t)
}

// A lost challenge race counts from when the lease write was refused, not
// from when the step began: the member leaves the vacancy alone for a
// lease duration after it learned of the loss, long enough for the
// winner's lease to show.
func TestLostRaceWaitsFromTheRefusal(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.see(state(role, leaseOf("x", tok1, t0.Add(-10*sec), 10*sec), 4, "x", 1, "a", 2))
	h.r.l = seenAt(h.r.l, 4, t0.Add(-10*sec))
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, mock.Anything).Return(int64(-1), errFenced).Once().
		Run(func(mock.Arguments) { h.clk.Advance(3 * sec) })
	w := h.settle()
	assert.Empty(t, h.transitions())
	assert.Equal(t, t0.Add(13*sec), w.Until, "a lease duration from the refusal at t0+3s")
}

// While the confirmation shows the partition held back by another
// producer's open transaction (another role's), a lease that looks expired
// may have been renewed behind it: no challenge; the member confirms again
// every HeartbeatInterval. Once the transaction is gone and the lease is still
// the same record, it challenges.
func TestHeldBackPartitionNoChallengeOnFrozenTime(t *testing.T) {
	h := newHarness(t, "b", Settings{})
	h.see(state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "b", 2))
	h.settle()
	h.open = 77 // not 42, the role's producer id
	h.clk.Set(t0.Add(10 * sec))
	a := h.settle()
	assert.Equal(t, DoWait, a.Kind)
	assert.Equal(t, h.clk.Now().Add(250*time.Millisecond), a.Until, "first seen: confirms again after a retry backoff")
	h.clk.Set(a.Until)
	for i := range 5 {
		a := h.settle()
		assert.Equal(t, DoWait, a.Kind)
		assert.Equal(t, h.clk.Now().Add(2*sec), a.Until, "frozen: confirms again a heartbeat interval later")
		assert.Contains(t, a.Reason, "open transaction of producer 77")
		assert.Equal(t, i+2, h.src.confirmed())
		h.clk.Set(a.Until)
	}
	h.open = -1
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("b", tok2, t0.Add(20*sec+250*time.Millisecond))).Return(fenceOf(tok2), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("x")).Return(nil).Once()
	assert.Equal(t, DoChallenge, h.step().Kind)
	assert.Equal(t, []string{"elected 42/2"}, h.transitions())
}

// A challenger that lost the race (its lease write was fenced) does not
// challenge the same vacancy again while the view shows no newer lease,
// for a LeaseDuration: the winner's lease has that long to show.
func TestLostChallengeWaitsForANewerLease(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.see(state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "a", 2))
	h.r.l = seenAt(h.r.l, 4, t0.Add(-10*sec))
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(codec.Token{ProducerID: 42, Epoch: 3}, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, mock.Anything, mock.Anything).Return(int64(-1), errFenced).Once()
	a := h.settle()
	assert.Equal(t, t0.Add(10*sec), a.Until)
	assert.Contains(t, a.Reason, "waiting for a lease newer than offset 4")
	for _, at := range []time.Duration{sec, 5 * sec, 9 * sec} {
		h.clk.Set(t0.Add(at))
		assert.Equal(t, DoWait, h.step().Kind, "no second AcquireEpoch: the mock would fail on it")
	}
	// The winner's lease shows: a waits for it like any candidate.
	h.see(state(role, leaseOf("y", codec.Token{ProducerID: 42, Epoch: 4}, t0, 10*sec), 6, "y", 0, "a", 2))
	assert.Equal(t, t0.Add(19*sec), h.settle().Until)
	assert.Equal(t, 1.0, h.metric("krole_fenced_total"))
}

// Work that fails at once makes the member resign; it campaigns again
// after a backoff that doubles from HeartbeatInterval, so it does not mint a
// new epoch every few seconds.
func TestRunWorkThatAlwaysFailsBacksOffCampaigning(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	boom := errors.New("output topic missing")
	work := func(context.Context, Held) error { return boom }
	var elected []time.Duration // when AcquireEpoch was called
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(0), nil)
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok1, nil).
		Run(func(mock.Arguments) { elected = append(elected, h.clk.Now().Sub(t0)) })
	h.tr.On("WriteLease", mock.Anything, role, mock.Anything, mock.Anything).Return(fenceOf(tok1), nil)
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil)
	d := startRun(t, h, work)

	horizon := t0.Add(2 * time.Minute)
	for {
		u := d.wait()
		if held := h.transitions(); len(held)%2 == 1 {
			continue // elected: its work's failure is on its way to the member
		}
		if u.After(horizon) {
			break
		}
		h.clk.Set(u)
	}
	assert.Equal(t, []time.Duration{0, 2 * sec, 6 * sec, 14 * sec, 30 * sec, 62 * sec}, elected,
		"campaigns after 2s, 4s, 8s, 16s, 32s: not a new epoch every 2s")
	assert.Equal(t, 6.0, h.metric("krole_work_failures_total", "role", string(role)))
	assert.Equal(t, 64.0, h.metric("krole_campaign_backoff_seconds", "role", string(role)))
	e, _ := h.last(Revoked)
	assert.Equal(t, ReasonWorkFailed, e.Reason)
	assert.ErrorIs(t, e.Err, boom)
	require.NoError(t, d.stop())
}

func TestWorkBackoffIsCapped(t *testing.T) {
	s := defaults()
	assert.Equal(t, 2*sec, s.workBackoff(1))
	assert.Equal(t, 4*sec, s.workBackoff(2))
	assert.Equal(t, 256*sec, s.workBackoff(8))
	assert.Equal(t, MaxWorkBackoff, s.workBackoff(9))
	assert.Equal(t, MaxWorkBackoff, s.workBackoff(1000))
}

type ctxKey struct{}

// Work's context derives from Run's: it carries Run's values, and ends
// when Run's context ends.
func TestRunWorkContextDerivesFromRuns(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, "a", Settings{})
	h.expectElection(0)
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	got := make(chan any, 1)
	ended := make(chan error, 1)
	h.m.idle = func(codec.Role, time.Time) {}
	work := func(ctx context.Context, _ Held) error {
		got <- ctx.Value(ctxKey{})
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return nil
	}
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "from Run"))
	errc := make(chan error, 1)
	go func() { errc <- h.m.Run(ctx, work) }()
	<-h.src.follows
	assert.Equal(t, "from Run", recv(t, got), "Run's value is visible in work's ctx")
	stopped := errors.New("Run's ctx cancelled")
	cancel(stopped)
	assert.ErrorIs(t, recv(t, ended), stopped, "work's ctx ended with Run's, carrying its cause")
	require.NoError(t, recv(t, errc))
	assert.True(t, h.sessionEnded(), "the session's end releases the role")
}

// Candidates held back by frozen readers all wait past their turns; when
// the readers thaw, the turns count again from then, so they do not all
// challenge at once: b, ranked behind a, waits a stagger after the thaw.
func TestThawedPartitionKeepsTheStagger(t *testing.T) {
	h := newHarness(t, "b", Settings{})
	h.see(state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "a", 2, "b", 3))
	h.settle()
	h.open = 77
	h.clk.Set(t0.Add(10 * sec))
	a := h.settle()
	assert.Contains(t, a.Reason, "rank 1 waits its turn")
	h.clk.Set(a.Until) // its turn: an open transaction, first seen
	a = h.settle()
	h.clk.Set(a.Until) // seen again: frozen
	a = h.settle()
	assert.Contains(t, a.Reason, "open transaction of producer 77 since")
	h.clk.Set(a.Until) // well past b's turn (one stagger after the vacancy)
	h.open = -1
	a = h.settle()
	assert.Equal(t, DoWait, a.Kind)
	assert.Equal(t, h.clk.Now().Add(sec), a.Until, "rank 1 waits a stagger from the thaw")
	assert.Empty(t, h.transitions())
	thawed := h.clk.Now()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("b", tok2, thawed.Add(sec))).Return(fenceOf(tok2), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("x")).Return(nil).Once()
	h.clk.Set(a.Until)
	h.settle()
	assert.Equal(t, []string{"elected 42/2"}, h.transitions())
}

// A candidate whose turn comes while a candidate ranked ahead of it is
// alive (its member session heartbeats) defers to it, for at most one
// LeaseDuration past its turn, and then challenges: a member that dies
// holding many roles leaves them all vacant at once, and a second
// candidate that joined in at its turn raced the first for the roles it
// was taking (both elected, one fenced). A candidate ahead whose
// heartbeats stopped is not deferred to.
func TestVacancyDefersToALiveCandidateAhead(t *testing.T) {
	h := newHarness(t, "b", Settings{})
	h.see(state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "a", 2, "b", 3))
	assert.Equal(t, t0.Add(10*sec), h.settle().Until, "the lease runs out")
	h.clk.Set(t0.Add(10 * sec))
	assert.Equal(t, t0.Add(11*sec), h.settle().Until, "rank 1 waits its turn")
	h.src.beat("a", 7, t0.Add(10500*time.Millisecond), 10*sec)
	h.clk.Set(t0.Add(11 * sec))
	a := h.settle()
	assert.Equal(t, t0.Add(21*sec), a.Until, "deferring until a lease past its turn: the Member's watch wakes it sooner if a stops heartbeating")
	assert.Equal(t, t0.Add(21*sec), a.Deferring)
	assert.Contains(t, a.Reason, "defers to a live candidate ranked ahead")
	assert.Zero(t, h.src.confirmed(), "no confirmation, no challenge while it defers")
	assert.Contains(t, h.r.m.prog.deferred["a"], h.r, "the watch knows whom b defers to")
	// a takes some other role at 20s: b defers a lease past that.
	h.r.m.prog.won("a", t0.Add(20*sec))
	h.src.beat("a", 8, t0.Add(20500*time.Millisecond), 10*sec)
	h.clk.Set(t0.Add(21 * sec))
	a = h.settle()
	assert.Equal(t, DoWait, a.Kind)
	assert.Equal(t, t0.Add(30*sec), a.Until, "a lease past the last role a was seen taking")
	assert.Zero(t, h.src.confirmed())
	// a heartbeats on but takes no role for a lease: b takes this one.
	h.src.beat("a", 9, t0.Add(29500*time.Millisecond), 10*sec)
	h.clk.Set(t0.Add(30 * sec))
	expectTakeover(h, t0.Add(30*sec))
	assert.Equal(t, DoChallenge, h.step().Kind)
	assert.Equal(t, []string{"elected 42/2"}, h.transitions())
}

// The Member's watch wakes a role deferring to a candidate ahead once that
// candidate's heartbeats stop (two renew intervals after the last one
// seen), and not before.
func TestWatchWakesARoleWhenTheCandidateAheadStops(t *testing.T) {
	h := newHarness(t, "b", Settings{})
	s := h.r.m.s
	h.src.beat("a", 7, t0, 10*sec)
	h.r.m.prog.deferTo(h.r, []codec.MemberID{"a"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.r.m.prog.watch(ctx, h.src, s, h.clk) }()
	defer func() { cancel(); <-done }()
	woken := func() bool {
		h.r.inMu.Lock()
		defer h.r.inMu.Unlock()
		w := h.r.woken
		h.r.woken = false
		return w
	}
	h.clk.waitTimers(1)
	h.clk.Advance(s.HeartbeatInterval) // a's heartbeat is one interval old
	h.clk.waitTimers(1)
	assert.False(t, woken(), "a is alive")
	h.clk.Advance(s.HeartbeatInterval) // two intervals: a stopped
	h.clk.waitTimers(1)
	assert.True(t, woken(), "a stopped heartbeating: b decides again")
	assert.Empty(t, h.r.m.prog.deferred, "woken once")
}

// A candidate ahead whose last heartbeat is more than two renew
// intervals old (stopped, paused, cut off, or dead with the holder) is
// not deferred to: the candidate challenges at its turn.
func TestVacancyDoesNotDeferToADeadCandidateAhead(t *testing.T) {
	h := newHarness(t, "b", Settings{})
	h.see(state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "a", 2, "b", 3))
	h.src.beat("a", 7, t0.Add(6*sec), 10*sec) // its last, 5 s before b's turn: a's span has not run out, but it missed two heartbeats
	h.settle()
	h.clk.Set(t0.Add(10 * sec))
	assert.Equal(t, t0.Add(11*sec), h.settle().Until, "rank 1 waits its turn")
	h.clk.Set(t0.Add(11 * sec))
	expectTakeover(h, t0.Add(11*sec))
	assert.Equal(t, DoChallenge, h.step().Kind)
	assert.Equal(t, []string{"elected 42/2"}, h.transitions())
}

// expectTakeover scripts b's challenge at at, in the vacancy x's expired
// lease left with a ranked ahead of b: a new epoch, b's lease, and the
// prunes of x and a.
func expectTakeover(h *harness, at time.Time) {
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok2, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok2, leaseAt("b", tok2, at)).Return(fenceOf(tok2), nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("x")).Return(nil).Once()
	h.tr.On("Deregister", mock.Anything, role, codec.MemberID("a")).Return(nil).Once()
}
