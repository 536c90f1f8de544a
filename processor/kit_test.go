package processor

// The unit-test kit: a harness that steps one member's runner by hand
// (newHarness), a runDriver that runs the member's goroutines in lockstep
// with the test (startRun), one fake transport (echoTransport: the
// transport mock, with the member session and the view's echo of a
// registration filled in; a type each for the optional capabilities it
// lacks), the fake clock and source, and the constructors of the states
// and leases the tests compare with. The tests are in their topic files.

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/fencing/fencingtest"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// ---------------------------------------------------------------------------
// The harness and its transport.

// harness drives one member's runner for role step by step: the test sets
// the state the view shows, scripts the transport mock, moves the fake
// clock and calls step. No goroutine runs the runner.
type harness struct {
	t   *testing.T
	me  codec.MemberID
	tr  *fencingtest.MockTransport
	clk *fakeClock
	src *fakeSource
	reg *prometheus.Registry
	m   *Member
	r   *runner
	// noEcho holds the member's own registration back from its view.
	noEcho bool
	// open is the OpenProducerID the source's Confirm reports (-1 none);
	// confirmErr, when set, is the error it returns.
	open       int64
	confirmErr error

	// The member session (guarded by mu): the tokens minted per role,
	// DescribeMany's answers when set, the heartbeats written and the
	// error they get.
	minted    map[codec.Role]codec.Token
	described map[codec.Role]fencing.Described
	beats     []codec.Heartbeat
	beatErr   error
	// beatHook, when set, runs in each heartbeat call (not a session
	// end's) before it is answered: a test holds the call there.
	beatHook func()
	// endHook, when set, runs in the session-end call, before it is
	// recorded, outside mu.
	endHook func()
	// tokErr is what CheckToken answers (fencing.TokenChecker): nil, the
	// token can write.
	tokErr error

	mu     sync.Mutex
	events []Event
}

func newHarness(t *testing.T, me codec.MemberID, s Settings) *harness {
	t.Helper()
	return newHarnessOn(t, me, s, func(e echoTransport) fencing.Transport { return e })
}

// newHarnessOn is newHarness with the member's transport made from the
// harness's echoTransport by wrap.
func newHarnessOn(t *testing.T, me codec.MemberID, s Settings, wrap func(echoTransport) fencing.Transport) *harness {
	t.Helper()
	h := &harness{t: t, me: me, tr: fencingtest.NewMockTransport(t), clk: newFakeClock(),
		src: newFakeSource(state(role, nil, 0)), reg: prometheus.NewRegistry(),
		minted: map[codec.Role]codec.Token{}, described: map[codec.Role]fencing.Described{}}
	if s.HeartbeatJitter == 0 {
		s.HeartbeatJitter = -1 // renewals exactly at HeartbeatInterval, as the tests expect
	}
	m, err := New(wrap(echoTransport{h.tr, h}), h.src, me, []codec.Role{role}, Options{
		Settings: s, Clock: h.clk, Registerer: h.reg, OnEvent: h.record, Logger: testLogger(t),
	})
	require.NoError(t, err)
	h.m, h.r = m, m.runners[role]
	h.m.sess.vetDone() // the member session starts without the check at Run's start: no Run here
	h.open = -1
	// Confirm answers what the member's view shows (the view is caught
	// up), on the member's goroutine, which owns r.st.
	h.src.confirm = func(codec.Role) (rolestate.Confirmed, error) {
		if h.confirmErr != nil {
			return rolestate.Confirmed{}, h.confirmErr
		}
		return rolestate.Confirmed{State: h.r.st.Clone(), OpenProducerID: h.open}, nil
	}
	return h
}

func (h *harness) record(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// see sets the state the member's view shows.
func (h *harness) see(st rolestate.State) { h.r.st = st }

// step performs one decision.
func (h *harness) step() Action { return h.r.step(context.Background()) }

// echoTransport stands for a view that catches up at once: when the member
// registers, its own registration shows in the member's state as soon as
// Register returns (on the member's goroutine, as the real view's update
// would arrive). h.noEcho holds it back.
type echoTransport struct {
	*fencingtest.MockTransport
	h *harness
}

func (e echoTransport) Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error) {
	off, err := e.MockTransport.Register(ctx, role, member)
	if err == nil && !e.h.noEcho {
		r := e.h.m.runners[role]
		r.st = withCandidate(r.st, member, off, e.h.clk.Now().UnixMilli())
	}
	return off, err
}

// harnessSession is the member session the harness's transport starts.
var harnessSession = codec.Session{ProducerID: 900, Epoch: 0, Nonce: "harness"}

// StartSession begins the member session without the mock.
func (e echoTransport) StartSession(ctx context.Context, member codec.MemberID, nonce string) (codec.Session, error) {
	return harnessSession, nil
}

// AcquireEpoch is the mock's, and remembers the token minted for
// DescribeMany.
func (e echoTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	tok, err := e.MockTransport.AcquireEpoch(ctx, role)
	if err == nil {
		e.h.mu.Lock()
		e.h.minted[role] = tok
		e.h.mu.Unlock()
	}
	return tok, err
}

// DescribeMany answers without the mock: each role's token is the one the
// member minted last, unless the test set h.described.
func (e echoTransport) DescribeMany(ctx context.Context, roles []codec.Role) (map[codec.Role]fencing.Described, error) {
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	out := map[codec.Role]fencing.Described{}
	for _, r := range roles {
		if d, ok := e.h.described[r]; ok {
			out[r] = d
		} else if tok, ok := e.h.minted[r]; ok {
			out[r] = fencing.Described{Token: tok, Held: true}
		}
	}
	return out, nil
}

// Heartbeat answers without the mock: h.beatErr (nil by default); the
// heartbeats are counted in h.beats.
func (e echoTransport) Heartbeat(ctx context.Context, hb codec.Heartbeat) error {
	e.h.mu.Lock()
	hook, endHook := e.h.beatHook, e.h.endHook
	e.h.mu.Unlock()
	if hook != nil && !hb.End {
		hook()
	}
	if endHook != nil && hb.End {
		endHook()
	}
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	e.h.beats = append(e.h.beats, hb)
	return e.h.beatErr
}

// CheckToken answers h.tokErr.
func (e echoTransport) CheckToken(codec.Role, codec.Token) error {
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	return e.h.tokErr
}

// ---------------------------------------------------------------------------
// Transports with a capability echoTransport lacks.
//
// The member finds these capabilities by a type assertion on its
// transport, so each is a type of its own: a method on echoTransport would
// give every harness the capability.

// instTransport is echoTransport with instances: the member registers
// through RegisterInstance (scripted as the mock's Register), and its
// registration shows in its state with its instance.
type instTransport struct{ echoTransport }

func (e instTransport) RegisterInstance(ctx context.Context, role codec.Role, member codec.MemberID, instance string) (int64, error) {
	off, err := e.MockTransport.Register(ctx, role, member)
	if err == nil && !e.h.noEcho {
		r := e.h.m.runners[role]
		r.st = withInstance(r.st, member, off, instance)
	}
	return off, err
}

// withInstance returns a copy of st in which member is a candidate
// registered at offset off by instance.
func withInstance(st rolestate.State, member codec.MemberID, off int64, instance string) rolestate.State {
	return withCandidateRec(st, rolestate.Candidate{Member: member, Offset: off, Instance: instance})
}

// newInstanceHarness is newHarness with a transport that writes instances.
func newInstanceHarness(t *testing.T, me codec.MemberID) *harness {
	t.Helper()
	h := newHarnessOn(t, me, Settings{}, func(e echoTransport) fencing.Transport { return instTransport{e} })
	require.NotEmpty(t, h.m.Instance())
	h.r.inst.baseLeaseOff = -1
	return h
}

// expectElection expects member "a" to win the vacant role: its
// registration (answered at offset reg), the epoch tok1, and the lease
// written at t0.
func (h *harness) expectElection(reg int64) {
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(reg, nil).Once()
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(tok1, nil).Once()
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("a", tok1, t0)).Return(fenceOf(tok1), nil).Once()
}

func (h *harness) refusal() *MemberInUseError {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.m.inUse
}

// timeoutTransport is the mock with the one optional capability New
// checks: a transaction timeout.
type timeoutTransport struct {
	*fencingtest.MockTransport
	d time.Duration
}

func (t timeoutTransport) TxnTimeout() time.Duration { return t.d }

// forgedCounter is a transport that counts forged leases, as
// fencing.BrokerTransport does.
type forgedCounter struct {
	fencing.Transport
	forged atomic.Uint64
}

func (f *forgedCounter) NewerRecordsSkipped() uint64 { return 0 }
func (f *forgedCounter) ForgedLeasesSkipped() uint64 { return f.forged.Load() }

// ---------------------------------------------------------------------------
// Stepping the harness, and what it recorded.

// withCandidate returns a copy of st in which member is a candidate
// registered at offset off.
func withCandidate(st rolestate.State, member codec.MemberID, off, nowMS int64) rolestate.State {
	return withCandidateRec(st, rolestate.Candidate{Member: member, Offset: off, RegisteredAt: nowMS})
}

// withCandidateRec returns a copy of st in which cand replaces any
// candidate of its member.
func withCandidateRec(st rolestate.State, cand rolestate.Candidate) rolestate.State {
	c := st.Clone()
	cs := c.Candidates[:0]
	for _, x := range c.Candidates {
		if x.Member != cand.Member {
			cs = append(cs, x)
		}
	}
	c.Candidates = append(cs, cand)
	rerank(c.Candidates)
	return c
}

// settle steps until the member waits, and returns the wait.
func (h *harness) settle() Action {
	h.t.Helper()
	for range maxBurst {
		if a := h.step(); a.Kind == DoWait {
			return a
		}
	}
	h.t.Fatal("the member never settled")
	return Action{}
}

// until steps, moving the clock to each wait's end, until cond holds.
func (h *harness) until(limit time.Time, cond func() bool) {
	h.t.Helper()
	for !cond() {
		a := h.settle()
		if cond() {
			return
		}
		if a.Until.After(limit) {
			h.t.Fatalf("nothing happened by %v (waiting until %v: %s)", limit.Sub(t0), a.Until.Sub(t0), a.Reason)
		}
		h.clk.Set(a.Until)
	}
}

// transitions returns the Elected and Revoked events so far, as strings.
func (h *harness) transitions() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.events {
		switch e.Kind {
		case Elected:
			out = append(out, "elected "+e.Token.String())
		case Revoked:
			out = append(out, "revoked "+string(e.Reason)+" "+e.Token.String())
		}
	}
	return out
}

// last returns the last event of kind k.
func (h *harness) last(k EventKind) (Event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.events) - 1; i >= 0; i-- {
		if h.events[i].Kind == k {
			return h.events[i], true
		}
	}
	return Event{}, false
}

func (h *harness) holders() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.events {
		if e.Kind == HolderChanged {
			if e.Holder == nil {
				out = append(out, "vacant")
			} else {
				out = append(out, string(e.Holder.Member)+" "+e.Holder.Token.String())
			}
		}
	}
	return out
}

// metric returns the value of a counter or gauge, or the sample count of a
// histogram, with the given labels; 0 when absent.
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	fams, err := h.reg.Gather()
	require.NoError(h.t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// leaseAt is the lease member writes under tok when its write begins at.
func leaseAt(member codec.MemberID, tok codec.Token, at time.Time) codec.Lease {
	s := harnessSession
	return codec.Lease{Member: member, Token: tok, GrantedAt: at.UnixMilli(), Deadline: at.Add(DefaultLeaseDuration).UnixMilli(), Session: &s}
}

// fenceOf is the offset the mock's challenge lease write under tok
// returns: the number of the holding under tok.
func fenceOf(tok codec.Token) int64 { return 100 + int64(tok.Epoch) }

// rewriteAt is the lease a holder under tok writes again at at: leaseAt,
// carrying the holding's number.
func rewriteAt(member codec.MemberID, tok codec.Token, at time.Time) codec.Lease {
	l := leaseAt(member, tok, at)
	l.Fence = fenceOf(tok)
	return l
}

// releaseOf is the release of member's holding under tok, carrying the
// holding's number.
func releaseOf(member codec.MemberID, tok codec.Token) codec.Lease {
	l := codec.ReleaseLease(member, tok)
	l.Fence = fenceOf(tok)
	return l
}

// testLogger logs through t at debug level, so every transition and
// decision of a failing test shows.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// beat runs one round of the member session at the clock's time (the
// heartbeat the harness's transport records, DescribeMany answered from
// what the member minted unless h.described says otherwise), then hands
// the role's runner its note, as its goroutine would.
func (h *harness) beat() {
	h.t.Helper()
	h.m.sess.round(context.Background())
	h.takeNote()
}

// takeNote hands the runner the member session's note, if there is one.
func (h *harness) takeNote() {
	if n, ok := h.r.takeNote(); ok {
		h.r.noted(n)
	}
}

// lastBeat returns the last heartbeat written (there must be one).
func (h *harness) lastBeat() codec.Heartbeat {
	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(h.t, h.beats, "no heartbeat written")
	return h.beats[len(h.beats)-1]
}

// beatCount returns the heartbeats written so far.
func (h *harness) beatCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.beats)
}

// sessionEnded reports whether the member wrote its session's end (a
// leaving member's one record that releases every lease naming the
// session).
func (h *harness) sessionEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.beats)
	return n > 0 && h.beats[n-1].End
}

// hasNote reports whether a note of the member session waits for r.
func (r *runner) hasNote() bool {
	r.inMu.Lock()
	defer r.inMu.Unlock()
	return r.note != nil
}

// ---------------------------------------------------------------------------
// The runDriver: Run in lockstep with the test.

// failsafe bounds how long a test waits for the member's goroutine to
// reach its next wait; it is never reached when the test passes.
const failsafe = 10 * time.Second

// runDriver runs h's Member on its own goroutine in lockstep with the
// test: the member reports each time it is about to wait, and the test
// then moves the clock, pushes a state or ends the context.
type runDriver struct {
	*harness
	idle   chan time.Time
	upd    chan rolestate.State
	cancel context.CancelFunc
	errc   chan error
}

func startRun(t *testing.T, h *harness, work Work) *runDriver {
	t.Helper()
	noLeaks(t)
	d := &runDriver{harness: h, idle: make(chan time.Time), errc: make(chan error, 1)}
	h.m.idle = func(_ codec.Role, until time.Time) { d.idle <- until }
	h.m.manualRounds = true
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.errc <- h.m.Run(ctx, work) }()
	d.upd = <-h.src.follows
	t.Cleanup(func() {
		if _, ok := d.end(); !ok {
			t.Error("Run did not return (a goroutine of the member failed?)")
		}
	})
	return d
}

// end ends Run's context and returns what Run returned (and puts it back
// for a later end), letting through the waits the member reports
// meanwhile: one it reached before the context ended, after a step the
// test did not wait for, would otherwise block it. ok is false when Run
// did not return within failsafe.
func (d *runDriver) end() (err error, ok bool) {
	d.cancel()
	deadline := time.After(failsafe)
	for {
		select {
		case <-d.idle:
		case err := <-d.errc:
			d.errc <- err
			return err, true
		case <-deadline:
			return nil, false
		}
	}
}

// wait returns when the member waits next, with the time it waits until.
func (d *runDriver) wait() time.Time {
	d.t.Helper()
	select {
	case u := <-d.idle:
		return u
	case err := <-d.errc:
		d.t.Fatalf("Run returned early: %v", err)
	case <-time.After(failsafe):
		d.t.Fatal("the member never reached its next wait")
	}
	return time.Time{}
}

// push delivers st as a view update and returns the member's next wait.
func (d *runDriver) push(st rolestate.State) time.Time {
	d.upd <- st
	return d.wait()
}

// stop ends Run's context and returns what Run returns (see end).
func (d *runDriver) stop() error {
	d.t.Helper()
	err, ok := d.end()
	if !ok {
		d.t.Fatal("Run did not return")
	}
	return err
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failsafe):
		t.Fatal("nothing received")
	}
	var zero T
	return zero
}

// worker is a Work that reports when it starts and ends.
type worker struct {
	started chan Held
	ended   chan time.Time // the fake time at which its context ended
	clk     *fakeClock
	runs    atomic.Int32
	running atomic.Int32
}

func newWorker(clk *fakeClock) *worker {
	return &worker{started: make(chan Held, 8), ended: make(chan time.Time, 8), clk: clk}
}

func (w *worker) work(ctx context.Context, held Held) error {
	if w.running.Add(1) != 1 {
		panic("two runs of work at once")
	}
	defer w.running.Add(-1)
	w.runs.Add(1)
	w.started <- held
	<-ctx.Done()
	w.ended <- w.clk.Now()
	return nil
}

// holdWithSlowStop runs member a of h with a work that, once cancelled,
// closes cancelled and returns only when finish is closed, and waits
// until a holds role under tok1 (leased at t0) and its work has started.
func holdWithSlowStop(t *testing.T, h *harness) (d *runDriver, cancelled, finish chan struct{}) {
	t.Helper()
	started := make(chan struct{})
	cancelled, finish = make(chan struct{}), make(chan struct{})
	work := func(ctx context.Context, _ Held) error {
		close(started)
		<-ctx.Done()
		close(cancelled)
		<-finish
		return nil
	}
	h.expectElection(1)
	d = startRun(t, h, work)
	d.wait()
	recv(t, started)
	return d, cancelled, finish
}

// ---------------------------------------------------------------------------
// The fake clock, the fake source, and states.

// t0 is the start of every test's fake time.
var t0 = time.UnixMilli(1_700_000_000_000)

// fakeClock is a Clock that moves only when a test says so.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	armed  *sync.Cond // broadcast whenever a timer is armed
}

type fakeTimer struct {
	c     *fakeClock
	at    time.Time
	ch    chan time.Time
	f     func()
	state int // 0 armed, 1 fired, 2 stopped
}

func newFakeClock() *fakeClock {
	c := &fakeClock{now: t0}
	c.armed = sync.NewCond(&c.mu)
	return c
}

// waitTimers blocks until at least n timers are armed and not yet due.
func (c *fakeClock) waitTimers(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		armed := 0
		for _, t := range c.timers {
			if t.state == 0 {
				armed++
			}
		}
		if armed >= n {
			return
		}
		c.armed.Wait()
	}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.arm(t, d)
	return t
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{c: c, f: f}
	c.arm(t, d)
	return t
}

// arm arms t to fire d from now; a timer due now fires now, on the
// caller's goroutine, and no other (the timers the member's own timers
// call back take locks: firing another here could wait for the caller's).
func (c *fakeClock) arm(t *fakeTimer, d time.Duration) {
	c.mu.Lock()
	t.at = c.now.Add(d)
	now := c.now
	if t.at.After(now) {
		c.timers = append(c.timers, t)
		c.armed.Broadcast()
		c.mu.Unlock()
		return
	}
	t.state = 1
	c.mu.Unlock()
	if t.f != nil {
		t.f()
	} else {
		t.ch <- now
	}
}

// Advance moves the clock by d and fires, in time order, every timer due.
// AfterFunc functions run on the caller's goroutine.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.state != 0:
		case !t.at.After(now):
			t.state = 1
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		if t.f != nil {
			t.f()
		} else {
			t.ch <- now
		}
	}
}

// Set moves the clock to at (never backwards).
func (c *fakeClock) Set(at time.Time) {
	if d := at.Sub(c.Now()); d > 0 {
		c.Advance(d)
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.state != 0 {
		return false
	}
	t.state = 2
	return true
}

// fakeSource is a Source whose state the test sets; Follow hands the test
// a channel to push updates on.
type fakeSource struct {
	mu      sync.Mutex
	st      rolestate.State
	follows chan chan rolestate.State
	// confirm, when set, answers Confirm; without it Confirm answers
	// Role's state and no open transaction.
	confirm  func(codec.Role) (rolestate.Confirmed, error)
	confirms int // calls of Confirm
	// sessions answers Session ([SessionSource]): each member's latest
	// session record; a member not in it has none.
	sessions map[codec.MemberID]rolestate.SessionSeen
}

func newFakeSource(st rolestate.State) *fakeSource {
	return &fakeSource{st: st, follows: make(chan chan rolestate.State, 8)}
}

func (f *fakeSource) Role(ctx context.Context, role codec.Role) (rolestate.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Clone(), nil
}

func (f *fakeSource) Confirm(ctx context.Context, role codec.Role) (rolestate.Confirmed, error) {
	f.mu.Lock()
	f.confirms++
	confirm, st := f.confirm, f.st.Clone()
	f.mu.Unlock()
	if confirm != nil {
		return confirm(role)
	}
	return rolestate.Confirmed{State: st, OpenProducerID: -1}, nil
}

// confirmed returns the number of Confirm calls so far.
func (f *fakeSource) confirmed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.confirms
}

func (f *fakeSource) Follow(ctx context.Context, role codec.Role) <-chan rolestate.State {
	in := make(chan rolestate.State)
	out := make(chan rolestate.State)
	f.follows <- in
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case st := <-in:
				select {
				case out <- st:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// Session implements [SessionSource] from f.sessions.
func (f *fakeSource) Session(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	se, ok := f.sessions[member]
	return se, ok, nil
}

// beat records member's latest session record: a heartbeat of a lease's
// span, at offset off, seen at at.
func (f *fakeSource) beat(member codec.MemberID, off int64, at time.Time, span time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sessions == nil {
		f.sessions = map[codec.MemberID]rolestate.SessionSeen{}
	}
	f.sessions[member] = rolestate.SessionSeen{Offset: off, SeenAt: at, Heartbeat: codec.Heartbeat{Member: member,
		Session: codec.Session{ProducerID: 900, Nonce: "ahead"}, GrantedAt: at.UnixMilli(), Deadline: at.Add(span).UnixMilli()}}
}

// set changes what Role returns.
func (f *fakeSource) set(st rolestate.State) {
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
}

// state builds a RoleState: a lease (nil for none) at leaseOff, and
// candidates given as member, offset pairs.
func state(role codec.Role, lease *codec.Lease, leaseOff int64, cands ...any) rolestate.State {
	st := rolestate.State{Role: role, Lease: lease, LeaseOffset: -1}
	if lease != nil {
		st.LeaseOffset = leaseOff
	}
	for i := 0; i+1 < len(cands); i += 2 {
		st.Candidates = append(st.Candidates, rolestate.Candidate{
			Member: codec.MemberID(cands[i].(string)), Offset: int64(cands[i+1].(int)),
		})
	}
	rerank(st.Candidates)
	return st
}

func leaseOf(member string, tok codec.Token, granted time.Time, d time.Duration) *codec.Lease {
	return &codec.Lease{Member: codec.MemberID(member), Token: tok, GrantedAt: granted.UnixMilli(), Deadline: granted.Add(d).UnixMilli()}
}

// noLeaks fails the test, through go.uber.org/goleak, if a goroutine
// that was not running when it called noLeaks is still running when the
// test ends (after the test's other cleanups; goleak retries for a while
// so that exiting goroutines can finish exiting).
func noLeaks(t *testing.T) {
	t.Helper()
	opts := append(testcluster.LeakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// rerank sorts candidates by offset and renumbers their ranks, as the view
// and rolestate.Fold hand them out.
func rerank(cs []rolestate.Candidate) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].Offset < cs[j].Offset })
	for i := range cs {
		cs[i].Rank = i
	}
}

func members(st rolestate.State) []codec.MemberID {
	var out []codec.MemberID
	for _, c := range st.Candidates {
		out = append(out, c.Member)
	}
	return out
}
