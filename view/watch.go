package view

import (
	"context"
	"sync"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// Change is what happened to one role between two states the table really
// had (changes a subscriber fell behind on coalesce: see [View.Watch]).
// The flags compare Before with After; several may hold at once. A lease
// that merely expires is no change (no record is written): use
// [rolestate.State.Holder] with the current time.
type Change struct {
	// Role is the role that changed.
	Role codec.Role `json:"role"`

	// Before is the role as this subscriber last saw it (its previous
	// After, or the table at the Watch call); After, as the table holds it
	// when the Change is handed over. An unknown role has LeaseOffset -1
	// and no candidates.
	Before rolestate.State `json:"before"`
	After  rolestate.State `json:"after"`

	// Offset is the offset of the latest record folded into After.
	Offset int64 `json:"offset"`

	// HolderChanged: After's lease names a different member or token than
	// Before's, or one of them has no lease. A new term of the same member
	// (a new token) counts as a new holder.
	HolderChanged bool `json:"holder_changed"`

	// LeaseRenewed: the same member and token hold a lease with a new
	// deadline, and it is not a release.
	LeaseRenewed bool `json:"lease_renewed"`

	// LeaseReleased: After's lease is a release (Deadline = GrantedAt + 1 ms,
	// what a resigning holder writes) or the lease was deleted, and
	// Before's lease was not that same release.
	LeaseReleased bool `json:"lease_released"`

	// CandidatesChanged: the ranked candidates differ (a member joined,
	// left, or re-registered and moved to the back).
	CandidatesChanged bool `json:"candidates_changed"`

	// Joined are the members registered in After but not in Before with the
	// same offset: new candidates and re-registered ones, in rank order.
	Joined []codec.MemberID `json:"joined,omitempty"`

	// Left are the members registered in Before but not in After, in
	// Before's rank order.
	Left []codec.MemberID `json:"left,omitempty"`

	// SessionDropped: After's lease is Before's, and the holder's session
	// now drops it ([rolestate.State.SessionVouch]): the role is vacant, as
	// after a release.
	SessionDropped bool `json:"session_dropped,omitempty"`
}

func sameTerm(a, b *codec.Lease) bool {
	return a.Member == b.Member && a.Token == b.Token
}

// diff fills in what changed between c.Before and c.After; it reports
// whether anything did.
func (c *Change) diff() bool {
	b, a := c.Before.Lease, c.After.Lease
	switch {
	case b == nil && a == nil:
	case b == nil || a == nil:
		c.HolderChanged = true
		c.LeaseReleased = a == nil || a.Released()
	case !sameTerm(b, a):
		c.HolderChanged = true
		c.LeaseReleased = a.Released()
	case !sameLease(*a, *b):
		if a.Released() {
			c.LeaseReleased = !b.Released()
			c.LeaseRenewed = false
		} else {
			c.LeaseRenewed = true
		}
	}
	before := make(map[codec.MemberID]int64, len(c.Before.Candidates))
	for _, x := range c.Before.Candidates {
		before[x.Member] = x.Offset
	}
	for _, x := range c.After.Candidates {
		if off, ok := before[x.Member]; !ok || off != x.Offset {
			c.Joined = append(c.Joined, x.Member)
		}
		delete(before, x.Member)
	}
	for _, x := range c.Before.Candidates {
		if _, gone := before[x.Member]; gone {
			c.Left = append(c.Left, x.Member)
		}
	}
	c.CandidatesChanged = len(c.Joined) > 0 || len(c.Left) > 0
	c.SessionDropped = !c.HolderChanged && a != nil && c.After.SessionVouch() == rolestate.Dropped &&
		c.Before.SessionVouch() != rolestate.Dropped
	// A lease rewritten at another offset with the same content changes
	// nothing a subscriber acts on.
	return c.HolderChanged || c.LeaseRenewed || c.LeaseReleased || c.CandidatesChanged || c.SessionDropped
}

// sameLease reports whether a and b are the same lease, their sessions
// compared by value.
func sameLease(a, b codec.Lease) bool {
	as, bs := a.Session, b.Session
	a.Session, b.Session = nil, nil
	if a != b || (as == nil) != (bs == nil) {
		return false
	}
	return as == nil || *as == *bs
}

// subscriber is one Watch call: its pending changes per role, in the order
// the roles first changed, added under index.mu without blocking and
// handed over by its own goroutine.
type subscriber struct {
	filter map[codec.Role]bool // nil: every role

	mu      sync.Mutex
	pending map[codec.Role]*pendingChange
	queue   []codec.Role
	wake    chan struct{} // capacity 1
	out     chan Change
}

type pendingChange struct {
	before rolestate.State
	offset int64
}

// Watch returns a channel of the changes of roles (every role when none is
// given) that the table applies after the call. It does not block.
//
// Changes are handed over once the view has caught up ([View.WaitCaughtUp]).
// Those applied before, or while the subscriber is slow, coalesce per role
// (the first Before, the latest After), so a slow subscriber never blocks
// the view and never misses a role's latest state. A role's changes arrive
// in order, each Before the previous After; different roles', in the order
// they first changed.
//
// To start from a known state, call Watch, then [View.Lookup] or
// [View.Snapshot]: every later change is delivered, and one the lookup
// reflects already may be too (act on After).
//
// The channel closes, dropping pending changes, when ctx ends or Run
// returns (at once when Run has returned). Each call runs one goroutine
// until then.
func (v *View) Watch(ctx context.Context, roles ...codec.Role) <-chan Change {
	s := &subscriber{
		pending: map[codec.Role]*pendingChange{},
		wake:    make(chan struct{}, 1),
		out:     make(chan Change),
	}
	if len(roles) > 0 {
		s.filter = make(map[codec.Role]bool, len(roles))
		for _, r := range roles {
			s.filter[r] = true
		}
	}
	ix := v.index
	ix.mu.Lock()
	if ix.stopped {
		ix.mu.Unlock()
		close(s.out)
		return s.out
	}
	ix.addSub(s)
	ix.subWG.Add(1)
	ix.mu.Unlock()
	go v.serve(ctx, s)
	return s.out
}

// serve hands s's pending changes over until ctx ends or the view stops.
func (v *View) serve(ctx context.Context, s *subscriber) {
	ix := v.index
	defer ix.subWG.Done()
	defer close(s.out)
	defer func() {
		ix.mu.Lock()
		ix.removeSub(s)
		ix.mu.Unlock()
	}()
	select {
	case <-v.ready:
	case <-v.done:
		return
	case <-ctx.Done():
		return
	}
	for {
		c, ok := ix.next(s)
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-v.done:
				return
			case <-ctx.Done():
				return
			}
		}
		if !c.diff() {
			continue
		}
		select {
		case s.out <- c:
		case <-v.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// next takes s's oldest pending change and completes it with the role's
// current state, under ix.mu so that the role's next change starts from
// this After.
func (ix *index) next(s *subscriber) (Change, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return Change{}, false
	}
	role := s.queue[0]
	s.queue[0] = ""
	s.queue = s.queue[1:]
	pc := s.pending[role]
	delete(s.pending, role)
	return Change{Role: role, Before: pc.before, After: ix.stateLocked(ix.roles[role], role), Offset: pc.offset}, true
}

// addSub indexes s: under all when it wants every role, else under each
// role it wants. ix.mu must be held for writing.
func (ix *index) addSub(s *subscriber) {
	if s.filter == nil {
		ix.all[s] = struct{}{}
		return
	}
	for role := range s.filter {
		set := ix.byRole[role]
		if set == nil {
			set = map[*subscriber]struct{}{}
			ix.byRole[role] = set
		}
		set[s] = struct{}{}
	}
}

// removeSub undoes addSub. ix.mu must be held for writing.
func (ix *index) removeSub(s *subscriber) {
	if s.filter == nil {
		delete(ix.all, s)
		return
	}
	for role := range s.filter {
		set := ix.byRole[role]
		delete(set, s)
		if len(set) == 0 {
			delete(ix.byRole, role)
		}
	}
}

// needsBefore reports whether a subscriber of role (or of every role) has
// no pending change of it, and so needs its state before the change.
// ix.mu must be held.
func (ix *index) needsBefore(role codec.Role) bool {
	for s := range ix.byRole[role] {
		if !s.hasPending(role) {
			return true
		}
	}
	for s := range ix.all {
		if !s.hasPending(role) {
			return true
		}
	}
	return false
}

func (s *subscriber) hasPending(role codec.Role) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[role] != nil
}

// publish records that role changed at offset: each subscriber of role (or
// of every role) gets a pending change starting at before, or moves its
// pending one on. before must be the role's prior state when needsBefore
// said so under the same hold of ix.mu, held for writing. It never blocks.
func (ix *index) publish(role codec.Role, before rolestate.State, offset int64) {
	shared := false // before handed out once already: copy it for the next
	for s := range ix.byRole[role] {
		shared = s.add(role, before, offset, shared)
	}
	for s := range ix.all {
		shared = s.add(role, before, offset, shared)
	}
	ix.offerLocked(role)
}

// add gives s a pending change of role starting at before, or moves its
// pending offset on, and wakes it. shared says before was handed out
// already (so s gets a copy); add returns whether it is now.
func (s *subscriber) add(role codec.Role, before rolestate.State, offset int64, shared bool) bool {
	s.mu.Lock()
	if pc := s.pending[role]; pc != nil {
		pc.offset = offset
		s.mu.Unlock()
		return shared
	}
	b := before
	if shared {
		b = before.Clone()
	}
	s.pending[role] = &pendingChange{before: b, offset: offset}
	s.queue = append(s.queue, role)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}
