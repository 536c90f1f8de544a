package view

import (
	"context"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// Follow returns a channel of role's state: once the view has caught up,
// then after every change (an unknown role is rolestate.State{Role: role,
// LeaseOffset: -1}). It does not block. A reader that falls behind is not
// waited for: an unread state is replaced by the newer one. The channel
// closes when ctx ends or Run returns. With [View.Role], Follow makes
// *View a processor.Source.
//
// A Follow costs no goroutine: the view offers each state as it applies
// the change (under the table's lock, so a reader never gets an older
// state after a newer one), and a context.AfterFunc closes the channel.
func (v *View) Follow(ctx context.Context, role codec.Role) <-chan rolestate.State {
	out := make(chan rolestate.State, 1)
	stop := v.FollowNotify(ctx, role, func(st rolestate.State, ok bool) {
		if !ok {
			close(out)
			return
		}
		select {
		case out <- st:
		default:
			select {
			case <-out:
			default:
			}
			out <- st
		}
	})
	context.AfterFunc(ctx, stop)
	return out
}

// FollowNotify follows role as [View.Follow] does, without a channel, a
// goroutine or a context: until stop is called (not ctx's end: ctx ended
// at the call only ends it at once) it calls offer with role's state
// once the view has caught up and after every change, then offer(_,
// false) once, when stop is called or Run returns. offer is called with
// the view's locks held, one call at a time, in order: it must not block
// or call the view. With it *View is a processor.FollowNotifier.
func (v *View) FollowNotify(ctx context.Context, role codec.Role, offer func(st rolestate.State, ok bool)) (stop func()) {
	ix := v.index
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.stopped || ctx.Err() != nil {
		offer(rolestate.State{}, false)
		return func() {}
	}
	f := &follower{ix: ix, role: role, offer: offer}
	if g := ix.follows[role]; g == nil {
		ix.follows[role] = f
	} else {
		for g.next != nil {
			g = g.next
		}
		g.next = f
	}
	if ix.ready {
		f.offer(ix.stateLocked(ix.roles[role], role), true)
	}
	return f.stop
}

// follower is one Follow call. Its fields are guarded by ix.mu, under
// which every offer is made.
type follower struct {
	ix     *index
	role   codec.Role
	offer  func(st rolestate.State, ok bool)
	next   *follower // the role's next follower, in the order they came
	closed bool
}

// stop forgets f and ends it, once.
func (f *follower) stop() {
	f.ix.mu.Lock()
	defer f.ix.mu.Unlock()
	f.ix.unfollowLocked(f.role, f)
	f.closeLocked()
}

// closeLocked ends f (offer(_, false)) unless ended already. ix.mu must
// be held for writing.
func (f *follower) closeLocked() {
	if !f.closed {
		f.closed = true
		f.offer(rolestate.State{}, false)
	}
}

// offerLocked offers role's current state to its followers, once the view
// is ready. ix.mu must be held.
func (ix *index) offerLocked(role codec.Role) {
	if !ix.ready {
		return
	}
	for f := ix.follows[role]; f != nil; f = f.next {
		f.offer(ix.stateLocked(ix.roles[role], role), true)
	}
}

// readyLocked marks the index ready (the view's first catch-up) and gives
// every follower its role's state. ix.mu must be held for writing.
func (ix *index) readyLocked() {
	if ix.ready {
		return
	}
	ix.ready = true
	ix.moves.readyAt = ix.clock()
	for role := range ix.follows {
		ix.offerLocked(role)
	}
}

// unfollowLocked forgets f. ix.mu must be held for writing.
func (ix *index) unfollowLocked(role codec.Role, f *follower) {
	head := ix.follows[role]
	switch {
	case head == f && f.next == nil:
		delete(ix.follows, role)
	case head == f:
		ix.follows[role] = f.next
	case head != nil:
		for g := head; g.next != nil; g = g.next {
			if g.next == f {
				g.next = f.next
				break
			}
		}
	}
	f.next = nil
}

// closeFollowersLocked closes every follower's channel (Run returned).
// ix.mu must be held for writing.
func (ix *index) closeFollowersLocked() {
	for role, f := range ix.follows {
		delete(ix.follows, role)
		for f != nil {
			next := f.next
			f.next = nil
			f.closeLocked()
			f = next
		}
	}
}
