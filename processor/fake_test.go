package processor

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

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
