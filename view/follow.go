package view

import (
	"context"
	"slices"
	"sync"

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
	ch, stop := v.FollowNotify(ctx, role, nil)
	context.AfterFunc(ctx, stop)
	return ch
}

// FollowNotify is [View.Follow] until stop is called (not ctx's end: ctx
// ended at the call only gives a closed channel), and calls notify, when
// not nil, after each state it sends and once it closes the channel, with
// the view's locks held: notify must not block. It costs no goroutine and
// no context. With it *View is a processor.FollowNotifier.
func (v *View) FollowNotify(ctx context.Context, role codec.Role, notify func()) (ch <-chan rolestate.State, stop func()) {
	f := &follower{out: make(chan rolestate.State, 1), notify: notify}
	ix := v.index
	ix.mu.Lock()
	if ix.stopped || ctx.Err() != nil {
		ix.mu.Unlock()
		close(f.out)
		return f.out, func() {}
	}
	ix.follows[role] = append(ix.follows[role], f)
	if ix.ready {
		f.offer(ix.stateLocked(ix.roles[role], role))
	}
	ix.mu.Unlock()
	return f.out, func() {
		ix.mu.Lock()
		ix.unfollowLocked(role, f)
		ix.mu.Unlock()
		f.close()
	}
}

// follower is one Follow call.
type follower struct {
	mu     sync.Mutex // orders the sends and the close
	out    chan rolestate.State
	closed bool
	notify func() // after each send; nil: none
}

// offer sends st without blocking, replacing a state the reader has not
// taken.
func (f *follower) offer(st rolestate.State) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	select {
	case f.out <- st:
	default:
		select {
		case <-f.out:
		default:
		}
		f.out <- st
	}
	f.mu.Unlock()
	if f.notify != nil {
		f.notify()
	}
}

func (f *follower) close() {
	f.mu.Lock()
	was := f.closed
	if !was {
		f.closed = true
		close(f.out)
	}
	f.mu.Unlock()
	if !was && f.notify != nil {
		f.notify()
	}
}

// offerLocked offers role's current state to its followers, once the view
// is ready. ix.mu must be held.
func (ix *index) offerLocked(role codec.Role) {
	if !ix.ready {
		return
	}
	for _, f := range ix.follows[role] {
		f.offer(ix.stateLocked(ix.roles[role], role))
	}
}

// readyLocked marks the index ready (the view's first catch-up) and gives
// every follower its role's state. ix.mu must be held for writing.
func (ix *index) readyLocked() {
	if ix.ready {
		return
	}
	ix.ready = true
	for role := range ix.follows {
		ix.offerLocked(role)
	}
}

// unfollowLocked forgets f. ix.mu must be held for writing.
func (ix *index) unfollowLocked(role codec.Role, f *follower) {
	fs := slices.DeleteFunc(ix.follows[role], func(g *follower) bool { return g == f })
	if len(fs) == 0 {
		delete(ix.follows, role)
		return
	}
	ix.follows[role] = fs
}

// closeFollowersLocked closes every follower's channel (Run returned).
// ix.mu must be held for writing.
func (ix *index) closeFollowersLocked() {
	for role, fs := range ix.follows {
		for _, f := range fs {
			f.close()
		}
		delete(ix.follows, role)
	}
}
