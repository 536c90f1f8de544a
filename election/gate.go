package election

import (
	"context"
	"sync"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// gates say which of the member's roles it may campaign for: a role's
// gate opens at its first Campaign, or for every role at Session.Run, and
// stays open (Election.Resign withdraws the member; Campaign rejoins it).
type gates struct {
	mu    sync.Mutex
	roles map[codec.Role]chan struct{} // closed once the role's gate is open
	any   chan struct{}                // closed once some gate is open
}

func newGates(roles []codec.Role) *gates {
	g := &gates{roles: make(map[codec.Role]chan struct{}, len(roles)), any: make(chan struct{})}
	for _, r := range roles {
		g.roles[r] = make(chan struct{})
	}
	return g
}

// open opens role's gate.
func (g *gates) open(role codec.Role) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.openLocked(role)
}

// openAll opens every gate.
func (g *gates) openAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for r := range g.roles {
		g.openLocked(r)
	}
}

func (g *gates) openLocked(role codec.Role) {
	ch, ok := g.roles[role]
	if !ok || isClosed(ch) {
		return
	}
	close(ch)
	if !isClosed(g.any) {
		close(g.any)
	}
}

// shut reports whether role is one of the member's roles whose gate is
// still shut: the member has never registered for it.
func (g *gates) shut(role codec.Role) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.roles[role]
	return ok && !isClosed(ch)
}

// wait blocks until role's gate is open (nil) or ctx ends (ctx.Err()).
func (g *gates) wait(ctx context.Context, role codec.Role) error {
	g.mu.Lock()
	ch, ok := g.roles[role]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// gatedSource is the view as the member's source, whose Follow of a role
// waits for the role's gate. A role's goroutine calls Follow before
// anything else, so the member does nothing for a role whose gate is shut.
type gatedSource struct {
	*view.View
	g *gates
}

// The view lists a group's members: a session's member may run a group.
var _ processor.GroupSource = gatedSource{}

// The view holds drain requests: a request names the member to drain.
var _ processor.DrainSource = gatedSource{}

// The view wakes a waiting role itself: its goroutine parks meanwhile.
var _ processor.FollowNotifier = gatedSource{}

// Follow implements processor.Source: the view's Follow once role's gate
// is open; a closed channel if ctx ends first.
func (s gatedSource) Follow(ctx context.Context, role codec.Role) <-chan rolestate.State {
	if s.g.wait(ctx, role) != nil {
		return closedStates()
	}
	return s.View.Follow(ctx, role)
}

// FollowNotify is the view's once role's gate is open, like Follow.
func (s gatedSource) FollowNotify(ctx context.Context, role codec.Role, offer func(st rolestate.State, ok bool)) func() {
	if s.g.wait(ctx, role) != nil {
		offer(rolestate.State{}, false)
		return func() {}
	}
	return s.View.FollowNotify(ctx, role, offer)
}

func closedStates() <-chan rolestate.State {
	ch := make(chan rolestate.State)
	close(ch)
	return ch
}
