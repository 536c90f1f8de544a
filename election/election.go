package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// Election is one role of a [Session] with the calls of etcd's
// concurrency.Election. Campaign and Resign act through the session's
// member; Leader and Observe only read its view. Safe for concurrent use.
type Election struct {
	s    *Session
	role codec.Role
}

// Holding is this member's holding of a role, as [Election.Campaign]
// returns it.
type Holding struct {
	Role   codec.Role
	Member codec.MemberID
	Token  codec.Token // pass it, or Held, to [Session.Writer]
	// Fence is the holding's fencing number ([processor.Held].Fence), for
	// a target outside Kafka that refuses earlier holdings.
	Fence int64
	Value string // the value this member campaigned with
}

// Held returns the holding as [processor.Held] (without its lease), for
// [Session.Writer].
func (h Holding) Held() processor.Held {
	return processor.Held{Role: h.Role, Member: h.Member, Token: h.Token, Fence: h.Fence}
}

// Holder is a role's holder as [Election.Leader] and [Election.Observe]
// give it. The zero Holder (Member "") says that the role has no live
// holder.
type Holder struct {
	Member codec.MemberID
	Token  codec.Token
	Fence  int64  // the holding's fencing number ([processor.Held].Fence)
	Value  string // the value its lease carries, written under its token
}

// Election returns the Election of role, one of Config.Roles, else an
// error matching [ErrUnknownRole]. A session without a member accepts any
// valid role name; its Campaign and Resign return [ErrReadOnly].
func (s *Session) Election(role codec.Role) (*Election, error) {
	if s.m == nil {
		if err := role.Validate(); err != nil {
			return nil, fmt.Errorf("election: %w", err)
		}
		return &Election{s: s, role: role}, nil
	}
	for _, r := range s.m.Roles() {
		if r == role {
			return &Election{s: s, role: role}, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownRole, role)
}

// Campaign registers this member for the role (again, at the back, after
// [Election.Resign]), blocks until it holds the role, and returns the
// holding. A new value re-registers the member at the back of the queue;
// a holder that changes its value keeps the role and rewrites its lease
// at once (etcd's Proclaim). It starts a session nobody runs.
//
// Cancelling ctx returns ctx.Err(); the member stays a candidate. Once
// the session has stopped it returns an error matching [ErrNotRunning],
// wrapping why. An invalid value returns an error matching
// [codec.ErrInvalid]; a session without a member, [ErrReadOnly].
func (e *Election) Campaign(ctx context.Context, value string) (Holding, error) {
	if e.s.m == nil {
		return Holding{}, ErrReadOnly
	}
	if err := codec.CheckWriteValue(value); err != nil {
		return Holding{}, fmt.Errorf("election: %w", err)
	}
	e.s.start()
	if err := e.s.m.Rejoin(e.role); err != nil { // after a Resign: campaign again
		return Holding{}, err
	}
	if err := e.s.vt.change(e.role, value, func() error {
		if e.s.g.shut(e.role) {
			return nil // the member's first registration, to come, carries it
		}
		// Registered by this process already (the confirmed view holds
		// every earlier append): register again with the value. Otherwise
		// the member's own registration, to come, carries it.
		c, err := e.s.v.Confirm(ctx, e.role)
		if err != nil {
			return err
		}
		if i := c.State.Rank(e.s.m.ID()); i < 0 || c.State.Candidates[i].Instance != e.s.m.Instance() {
			return nil
		}
		_, err = e.s.t.AppendRegistration(ctx, e.role, codec.Registration{Member: e.s.m.ID(), Value: value, Instance: e.s.m.Instance()})
		// A holder's value is its lease's: rewrite it now, not hourly.
		_ = e.s.m.RewriteLease(e.role)
		return err
	}); err != nil {
		return Holding{}, err
	}
	e.s.g.open(e.role)
	for {
		h, held, changed, done := e.s.tr.holding(e.role)
		if held {
			return Holding{Role: e.role, Member: e.s.m.ID(), Token: h.tok, Fence: h.fence, Value: value}, nil
		}
		select {
		case <-ctx.Done():
			return Holding{}, ctx.Err()
		case <-done:
			return Holding{}, e.s.tr.notRunning()
		case <-changed:
		}
	}
}

// Resign gives the role up, as etcd's Resign: a holder stops its work and
// writes the release; the member deregisters and does not campaign again
// until the next [Election.Campaign] ([processor.Member.Withdraw]). It
// blocks until then and until this session's view no longer shows the
// holding, or ctx ends. It returns [ErrNotHolder] when the member did not
// hold the role (it has left the queue all the same), [ErrNotRunning],
// the release's error, or [ErrReadOnly]. [Session.Resign] instead queues
// the member again.
func (e *Election) Resign(ctx context.Context) error {
	if e.s.m == nil {
		return ErrReadOnly
	}
	own, held, _, done := e.s.tr.holding(e.role)
	tok := own.tok
	if e.s.g.shut(e.role) {
		select {
		case <-done:
			return e.s.tr.notRunning()
		default:
			return ErrNotHolder
		}
	}
	if err := e.s.m.Withdraw(ctx, e.role); err != nil {
		if errors.Is(err, processor.ErrNotRunning) {
			return e.s.tr.notRunning()
		}
		return err
	}
	if !held {
		return ErrNotHolder
	}
	// Read-your-writes: wait until the view has the release (or anything
	// after this holding), bounded by ctx and a transaction timeout.
	wctx, cancel := context.WithTimeout(ctx, e.s.m.Settings().TransactionTimeout)
	defer cancel()
	for st := range e.s.v.Follow(wctx, e.role) {
		if l := st.Lease; l == nil || l.Member != e.s.m.ID() || l.Token != tok || l.Released() {
			break
		}
	}
	return nil
}

// Leader returns the role's live holder, as the session's view believes
// it (not the broker's fence), or [ErrNoLeader]. It only reads, starts
// only the view, and blocks for the view's first catch-up or until ctx
// ends. It reads this session's own writes: while this member holds the
// role, Leader names it even before the view shows its lease.
func (e *Election) Leader(ctx context.Context) (Holder, error) {
	e.s.start()
	h, _, err := e.holder(ctx)
	if err == nil && h.Member == "" {
		err = ErrNoLeader
	}
	return h, err
}

// Observe returns a channel of the role's holders, as [Election.Leader]
// judges them: the current one, then one per change (the zero Holder for
// none), never on renewals. A slow reader misses intermediate holders,
// never the latest. The channel, and Observe's goroutine, end when ctx
// ends or the session stops.
func (e *Election) Observe(ctx context.Context) <-chan Holder {
	e.s.start()
	out := make(chan Holder)
	go func() {
		defer close(out)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		states := e.s.v.Follow(ctx, e.role) // a change of the role's records
		var last *Holder
		for {
			_, _, own, done := e.s.tr.holding(e.role) // a change of this member's holding
			cur, end, err := e.holder(ctx)
			if err != nil {
				return // ctx ended, or the view stopped
			}
			if last == nil || last.Member != cur.Member || last.Token != cur.Token {
				select {
				case out <- cur:
					last = &cur
				case <-ctx.Done():
					return
				case <-done:
					return
				}
			}
			// No record marks a lease running out: wake at its end, when
			// the holder's heartbeats may have moved it on.
			var (
				t      processor.Timer
				expiry <-chan time.Time
			)
			if !end.IsZero() {
				t = e.s.clk.NewTimer(max(end.Sub(e.s.clk.Now()), minRearm))
				expiry = t.C()
			}
			stop := true
			select {
			case <-ctx.Done():
			case <-done:
			case _, ok := <-states:
				stop = !ok
			case <-own:
				stop = false
			case <-expiry:
				stop = false
			}
			if t != nil {
				t.Stop()
			}
			if stop {
				return
			}
		}
	}()
	return out
}

// minRearm bounds how soon Observe wakes again for a lease's end, so that
// a clock that does not move with its timers cannot make it spin.
const minRearm = 10 * time.Millisecond

// holder returns the role's live holder (zero for none) and when its
// lease ends (zero for none, or for this member: its events say).
func (e *Election) holder(ctx context.Context) (Holder, time.Time, error) {
	own, held, _, _ := e.s.tr.holding(e.role)
	st, err := e.s.v.Role(ctx, e.role)
	if err != nil {
		return Holder{}, time.Time{}, err
	}
	live := st.Live(e.s.clk.Now())
	if held && (!live || !st.Lease.Token.Newer(own.tok)) {
		return Holder{Member: e.s.m.ID(), Token: own.tok, Fence: own.fence, Value: e.s.vt.get(e.role)}, time.Time{}, nil
	}
	if !live {
		return Holder{}, time.Time{}, nil
	}
	return Holder{Member: st.Lease.Member, Token: st.Lease.Token, Fence: st.Fence(), Value: st.Lease.Value}, st.LeaseEnd(), nil
}

// tracker follows which roles the member holds, from its events.
type tracker struct {
	mu      sync.Mutex
	held    map[codec.Role]ownHolding
	changed chan struct{} // closed and replaced on every change
	done    chan struct{} // closed when Run returns
	ended   bool
	err     error // what Run returned
}

func newTracker() *tracker {
	return &tracker{held: map[codec.Role]ownHolding{}, changed: make(chan struct{}), done: make(chan struct{})}
}

// ownHolding is a holding of the member's, as its Elected event gave it.
type ownHolding struct {
	tok   codec.Token
	fence int64
}

// note records an event; called one at a time, it does not block.
func (t *tracker) note(e processor.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Kind {
	case processor.Elected:
		t.held[e.Role] = ownHolding{tok: e.Token, fence: e.Fence}
	case processor.Revoked:
		delete(t.held, e.Role)
	default:
		return
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// end says that Run has returned err.
func (t *tracker) end(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ended {
		t.ended, t.err = true, err
		close(t.done)
	}
}

// result is what Run returned, once it has.
func (t *tracker) result() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// notRunning is the error of a call made once Run has returned:
// ErrNotRunning, wrapping what Run returned when it was an error.
func (t *tracker) notRunning() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return fmt.Errorf("%w: %w", ErrNotRunning, t.err)
	}
	return ErrNotRunning
}

func (t *tracker) holding(role codec.Role) (ownHolding, bool, <-chan struct{}, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.held[role]
	return h, ok, t.changed, t.done
}

// values are the values a session registers with, per role.
type values struct {
	// reg holds one lock per role across each registration's append, so
	// the last one appended carries the latest value.
	reg map[codec.Role]*sync.Mutex

	mu  sync.Mutex
	def string
	by  map[codec.Role]string
}

// regLock returns role's registration lock.
func (v *values) regLock(role codec.Role) *sync.Mutex {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.reg == nil {
		v.reg = map[codec.Role]*sync.Mutex{}
	}
	l, ok := v.reg[role]
	if !ok {
		l = &sync.Mutex{}
		v.reg[role] = l
	}
	return l
}

// register appends role's registration with its current value.
func (v *values) register(role codec.Role, write func(value string) (int64, error)) (int64, error) {
	l := v.regLock(role)
	l.Lock()
	defer l.Unlock()
	return write(v.get(role))
}

// change sets role's value and, when it changed, registers with it.
func (v *values) change(role codec.Role, value string, write func() error) error {
	l := v.regLock(role)
	l.Lock()
	defer l.Unlock()
	if !v.set(role, value) {
		return nil
	}
	return write()
}

func (v *values) get(role codec.Role) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.by[role]; ok {
		return s
	}
	return v.def
}

// set makes value role's and reports whether it changed.
func (v *values) set(role codec.Role, value string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, ok := v.by[role]
	if !ok {
		old = v.def
	}
	if v.by == nil {
		v.by = map[codec.Role]string{}
	}
	v.by[role] = value
	return old != value
}
