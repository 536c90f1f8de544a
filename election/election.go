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
// concurrency.Election: [Election.Campaign] and [Election.Resign] act
// through the session's member, which registers for the role at the
// first Campaign and campaigns until Resign; [Election.Leader] and
// [Election.Observe] only read the session's view of the role topic.
// Its methods are safe for concurrent use.
type Election struct {
	s    *Session
	role codec.Role
}

// Holding is this member's holding of a role, as [Election.Campaign]
// returns it.
type Holding struct {
	Role   codec.Role
	Member codec.MemberID
	// Token is the token the member holds the role under; pass it (or
	// the Holding's Held) to [Session.Writer] to write fenced.
	Token codec.Token
	// Fence is the holding's fencing number, [processor.Held].Fence:
	// strictly greater than every earlier holding's. Give it, with the
	// token, to a target outside Kafka that is to refuse writes of
	// earlier holdings.
	Fence int64
	// Value is the value this member campaigned with.
	Value string
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
	// Fence is the holding's fencing number (see
	// [processor.Held].Fence), as the holder's lease gives it
	// (rolestate.State.Fence), or this member's own.
	Fence int64
	// Value is the value the holder's lease carries, written under its
	// token (the value it campaigned with); "" when none.
	Value string
}

// Election returns the Election of role, one of Config.Roles; for any
// other role it returns an error matching [ErrUnknownRole]. In a session
// without a member it returns an Election of any valid role name, whose
// Leader and Observe work and whose Campaign and Resign return
// [ErrReadOnly].
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

// Campaign registers this member for the role (the first call; after
// [Election.Resign], again, at the back of the queue) and blocks until it
// holds the role, and returns the holding. It is the only call of an
// Election that registers. value is carried in the member's registration,
// for [Election.Leader], `krole leader` and the lookups: a value other
// than the one registered re-registers the member with it, which puts it
// at the back of the queue (as a new etcd campaign key is the newest); a
// holder that changes its value keeps the role (etcd's Proclaim).
//
// Nothing else need be started: a session that [Session.Run] does not
// run is started by its first Campaign (its view by a Leader or Observe
// before), in the background, and stopped by [Session.Close]. Cancelling
// ctx ends the wait with ctx.Err(); the member stays a candidate
// (Resign, or end the session, to leave). Once the session has stopped it
// returns an error matching [ErrNotRunning], wrapping why it stopped when
// that was an error (a [*MemberInUseError], a [*ViewError]). A value
// that [codec.CheckValue] refuses returns an error matching
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
		// Registered by this process already (the view, confirmed, holds
		// every append made before this call): register again with the
		// value. Otherwise the member's own registration, to come, carries
		// it: one that is waiting out another instance's registration of
		// its id writes nothing before it may.
		c, err := e.s.v.Confirm(ctx, e.role)
		if err != nil {
			return err
		}
		if i := c.State.Rank(e.s.m.ID()); i < 0 || c.State.Candidates[i].Instance != e.s.m.Instance() {
			return nil
		}
		_, err = e.s.t.AppendRegistration(ctx, e.role, codec.Registration{Member: e.s.m.ID(), Value: value, Instance: e.s.m.Instance()})
		// A holder's value is the one its lease carries: rewrite it at
		// once, so readers see the new value within a write, not at the
		// next hourly rewrite (processor.LeaseRewriteInterval).
		_ = e.s.m.RenewNow(e.role)
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

// Resign gives the role up, as etcd's Resign: when this member holds
// it, its work is stopped and the release written, so the next
// candidate takes the role at once; in any case the member leaves the
// queue (deregisters), and it does not campaign for the role again
// until [Election.Campaign] is called again. It blocks until that is
// done and this session's view no longer shows this member's holding
// (so that Leader, from this session, no longer names it), or ctx ends.
// It returns [ErrNotHolder] when this member did not hold the role (it
// has left the queue all the same; a role never campaigned for writes
// nothing), [ErrNotRunning] when the session is not running, the
// release's error, or [ErrReadOnly] in a session without a member. See
// [processor.Member.Withdraw]. (Session.Resign, and an operator's `krole
// resign --member`, instead hand over and queue the member again.)
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

// Leader returns the role's live holder and its value, as the session's
// view believes it (not the broker's fence), or [ErrNoLeader]. It only
// reads: it never registers or campaigns, and starts only the session's
// view. It waits for the view's first catch-up, bounded by ctx, as every
// lookup does.
//
// It reads this session's own writes: while this member holds the role
// (from the moment [Election.Campaign] returns until it loses or resigns
// it), Leader names this member with its token and value even if the
// view has not shown its lease yet, unless the view shows a newer token
// of the role. Other sessions' views learn of it within their lag.
func (e *Election) Leader(ctx context.Context) (Holder, error) {
	e.s.start()
	h, _, err := e.holder(ctx)
	if err == nil && h.Member == "" {
		err = ErrNoLeader
	}
	return h, err
}

// Observe returns a channel of the role's holders, as [Election.Leader]
// judges them: first the current one, then one each time the holder
// changes (a new holder or token, or none: the zero Holder, when its
// lease is released or runs out), never on renewals. Like Leader, it only
// reads, and starts only the session's view. A slow reader misses
// intermediate holders, never the latest. The channel closes when ctx
// ends or the session stops; Observe starts one goroutine, which ends
// then.
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

// holder returns the role's live holder as this session believes it (the
// zero Holder when none), and when the lease it judged live ends (zero
// when there is none, or the holder is this member, whose own events say
// when it stops).
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

// tracker follows the member's events for the Elections: which roles it
// holds.
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

// note records an event of the member; it is called on the member's
// event path, one event at a time, and does not block.
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
	// reg holds one lock per role, held across each registration's
	// append of that role, the member's and Campaign's, so that the last
	// one appended carries the latest value. Per role: one role's slow
	// append does not hold back the registrations of the others.
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

// register appends a registration of role with its current value,
// through write, under role's registration lock.
func (v *values) register(role codec.Role, write func(value string) (int64, error)) (int64, error) {
	l := v.regLock(role)
	l.Lock()
	defer l.Unlock()
	return write(v.get(role))
}

// change makes value role's and, when it changed, registers with it
// through write, under role's registration lock.
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
