package processor

import (
	"context"
	"sync"

	"github.com/krabka/krole/codec"
)

// DrainSource is a [GroupSource] that can tell whether a drain request,
// written to the role topic by another process (krole drain), names an
// incarnation of a member's session (*view.View has it). A member of a
// group over one drains, as [Member.Drain] makes it, once a request names
// its current incarnation; a member started again draws a new nonce, so
// an older request does not drain it.
type DrainSource interface {
	DrainRequested(ctx context.Context, member codec.MemberID, nonce string) (bool, error)
}

// drainReq is what a drain request did to a member: done closes once the
// drain it started has handed every role over.
type drainReq struct {
	once sync.Once
	done chan struct{}
}

// ch returns the channel done, made at its first use.
func (d *drainReq) ch() chan struct{} {
	d.once.Do(func() { d.done = make(chan struct{}) })
	return d.done
}

// drainOnRequest starts draining, as Member.Drain does, when the source
// holds a drain request naming the member's current session incarnation
// and the member is not draining yet. The caller (replan) then computes
// the plan without the member.
func (b *balancer) drainOnRequest(ctx context.Context) {
	ds, ok := b.src.(DrainSource)
	if !ok || b.draining.Load() {
		return
	}
	b.m.sess.mu.Lock()
	nonce := b.m.sess.cur.Nonce
	b.m.sess.mu.Unlock()
	if nonce == "" {
		return
	}
	if asked, err := ds.DrainRequested(ctx, b.m.me, nonce); err != nil || !asked {
		return
	}
	if !b.draining.CompareAndSwap(false, true) {
		return // Member.Drain began meanwhile
	}
	b.m.log.Info("a drain request names this member's session: handing every role over", "nonce", nonce)
	b.m.sess.poke()
	done := b.req.ch()
	go func() {
		if b.awaitDrained(ctx) == nil {
			close(done)
		}
	}()
}

// DrainedOnRequest returns a channel that closes once a drain request
// through the role topic (see [DrainSource]) has made the member drain
// and the member holds no role: the process may leave then. It never
// closes for a member of no group, nor after a drain that [Member.Drain]
// began.
func (m *Member) DrainedOnRequest() <-chan struct{} {
	if m.grp == nil {
		return nil
	}
	return m.grp.req.ch()
}
