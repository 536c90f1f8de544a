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
// concurrency.Election: [Election.Campaign], [Election.Resign],
// [Election.Leader] and [Election.Observe]. The session's member stays
// the engine: it registers, campaigns and renews from the session's start
// on ([Session.Run], or the first Campaign, Leader or Observe), whether
// or not Campaign is called, until [Election.Resign] takes it out of the
// role's queue; the Election waits for and reports what the member does.
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
	// Value is the value this member campaigned with.
	Value string
}

// Held returns the holding as [processor.Held] (without its lease), for
// [Session.Writer].
func (h Holding) Held() processor.Held {
	return processor.Held{Role: h.Role, Member: h.Member, Token: h.Token}
}

// Holder is a role's holder as [Election.Leader] and [Election.Observe]
// give it. The zero Holder (Member "") says that the role has no live
// holder.
type Holder struct {
	Member codec.MemberID
	Token  codec.Token
	// Value is the value the holder registered with; "" when none, or
	// when it is no longer a candidate.
	Value string
}

// Election returns the Election of role, one of Config.Roles; for any
// other role it returns an error matching [ErrUnknownRole].
func (s *Session) Election(role codec.Role) (*Election, error) {
	for _, r := range s.m.Roles() {
		if r == role {
			return &Election{s: s, role: role}, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownRole, role)
}

// Campaign blocks until this member holds the role, and returns the
// holding. value is carried in the member's registration, for
// [Election.Leader], `krole leader` and the lookups: a value other than
// the one registered re-registers the member with it, which puts it at
// the back of the queue (as a new etcd campaign key is the newest); a
// holder that changes its value keeps the role (etcd's Proclaim).
//
// Nothing else need be started: a session that [Session.Run] does not
// run is started by its first Campaign (or Leader, or Observe), in the
// background, and stopped by [Session.Close]. After [Election.Resign],
// Campaign puts the member back in the queue, at the back. Cancelling ctx
// ends the wait with ctx.Err(); the member stays a candidate (Resign, or
// end the session, to leave). Once the session has stopped it returns an
// error matching [ErrNotRunning], wrapping why it stopped when that was
// an error (a [*MemberInUseError], a [*ViewError]). A value that
// [codec.CheckValue] refuses returns an error matching
// [codec.ErrInvalid].
func (e *Election) Campaign(ctx context.Context, value string) (Holding, error) {
	if err := codec.CheckWriteValue(value); err != nil {
		return Holding{}, fmt.Errorf("election: %w", err)
	}
	e.s.start()
	if err := e.s.m.Rejoin(e.role); err != nil { // after a Resign: campaign again
		return Holding{}, err
	}
	if err := e.s.vt.change(e.role, value, func() error {
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
	for {
		tok, held, changed, done := e.s.tr.holding(e.role)
		if held {
			return Holding{Role: e.role, Member: e.s.m.ID(), Token: tok, Value: value}, nil
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
// has left the queue all the same), [ErrNotRunning] when the session
// is not running, or the release's error. See
// [processor.Member.Withdraw]. (Session.Resign, and an operator's `krole
// resign --member`, instead hand over and queue the member again.)
func (e *Election) Resign(ctx context.Context) error {
	tok, held, _, _ := e.s.tr.holding(e.role)
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
// view believes it (not the broker's fence), or [ErrNoLeader]. It waits
// for the view's first catch-up, bounded by ctx, as every lookup does.
//
// It reads this session's own writes: while this member holds the role
// (from the moment [Election.Campaign] returns until it loses or resigns
// it), Leader names this member with its token and value even if the
// view has not shown its lease yet, unless the view shows a newer token
// of the role. Other sessions' views learn of it within their lag.
func (e *Election) Leader(ctx context.Context) (Holder, error) {
	e.s.start()
	tok, held, _, _ := e.s.tr.holding(e.role)
	l, ok, err := e.s.v.Leader(ctx, e.role, time.Time{})
	if err != nil {
		return Holder{}, err
	}
	if held && (!ok || !l.Lease.Token.Newer(tok)) {
		return Holder{Member: e.s.m.ID(), Token: tok, Value: e.s.vt.get(e.role)}, nil
	}
	if !ok {
		return Holder{}, ErrNoLeader
	}
	return Holder{Member: l.Lease.Member, Token: l.Lease.Token, Value: l.Value}, nil
}

// Observe returns a channel of the role's holders: first the current one,
// then one each time the holder changes (a new holder or token, or none:
// the zero Holder), never on renewals. Changes are judged as the session's
// member judges them (its HolderChanged events, which include a lease
// running out); until the member has judged the role, the first holder
// comes from [Election.Leader]. A session nobody runs is started by
// Observe, as by Campaign. A slow reader misses intermediate holders,
// never the latest. The channel closes when ctx ends or the session
// stops; Observe starts one goroutine, which ends then.
func (e *Election) Observe(ctx context.Context) <-chan Holder {
	e.s.start()
	out := make(chan Holder)
	go func() {
		defer close(out)
		var last *Holder
		for {
			lease, known, changed, done := e.s.tr.holder(e.role)
			var cur Holder
			if known {
				if lease != nil {
					cur = Holder{Member: lease.Member, Token: lease.Token, Value: lease.Value}
				}
			} else if h, err := e.Leader(ctx); err == nil {
				cur = h
			} else if ctx.Err() != nil {
				return
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
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-changed:
			}
		}
	}()
	return out
}

// tracker follows the member's events for the Elections: which roles it
// holds, and the latest holder it saw of each.
type tracker struct {
	mu      sync.Mutex
	held    map[codec.Role]codec.Token
	holders map[codec.Role]*codec.Lease // from HolderChanged; nil value: vacant
	changed chan struct{}               // closed and replaced on every change
	done    chan struct{}               // closed when Run returns
	ended   bool
	err     error // what Run returned
}

func newTracker() *tracker {
	return &tracker{held: map[codec.Role]codec.Token{}, holders: map[codec.Role]*codec.Lease{},
		changed: make(chan struct{}), done: make(chan struct{})}
}

// note records an event of the member; it is called on the member's
// event path, one event at a time, and does not block.
func (t *tracker) note(e processor.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Kind {
	case processor.Elected:
		t.held[e.Role] = e.Token
	case processor.Revoked:
		delete(t.held, e.Role)
	case processor.HolderChanged:
		var l *codec.Lease
		if e.Holder != nil {
			c := *e.Holder
			l = &c
		}
		t.holders[e.Role] = l
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

func (t *tracker) holding(role codec.Role) (codec.Token, bool, <-chan struct{}, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tok, ok := t.held[role]
	return tok, ok, t.changed, t.done
}

func (t *tracker) holder(role codec.Role) (*codec.Lease, bool, <-chan struct{}, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.holders[role]
	return l, ok, t.changed, t.done
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
