package processor

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/fencing/fencingtest"
	"github.com/krabka/krole/rolestate"
)

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
	h := &harness{t: t, me: me, tr: fencingtest.NewMockTransport(t), clk: newFakeClock(),
		src: newFakeSource(state(role, nil, 0)), reg: prometheus.NewRegistry(),
		minted: map[codec.Role]codec.Token{}, described: map[codec.Role]fencing.Described{}}
	if s.HeartbeatJitter == 0 {
		s.HeartbeatJitter = -1 // renewals exactly at HeartbeatInterval, as the tests expect
	}
	m, err := New(echoTransport{h.tr, h}, h.src, me, []codec.Role{role}, Options{
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

// withCandidate returns a copy of st in which member is a candidate
// registered at offset off.
func withCandidate(st rolestate.State, member codec.MemberID, off, nowMS int64) rolestate.State {
	c := st.Clone()
	cs := c.Candidates[:0]
	for _, x := range c.Candidates {
		if x.Member != member {
			cs = append(cs, x)
		}
	}
	c.Candidates = append(cs, rolestate.Candidate{Member: member, Offset: off, RegisteredAt: nowMS})
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

// CheckToken answers h.tokErr.
func (e echoTransport) CheckToken(codec.Role, codec.Token) error {
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	return e.h.tokErr
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
