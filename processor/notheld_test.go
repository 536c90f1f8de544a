package processor

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"

	"github.com/krabka/krole/fencing"
)

// A fenced writer or stream that shares the member's transport can be
// fenced first; the transport then forgets the token and the renewal gets
// ErrNotHeld. That is a lost role too, not a retry.
func TestRenewalNotHeldEndsLeadershipAtOnce(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	elect(t, h, tok1, 0)
	h.see(state(role, leaseOf("a", tok1, t0, 10*sec), 1, "a", 0))
	workCtx := h.r.hold.ctx

	h.clk.Set(t0.Add(2 * sec))
	notHeld := &fencing.Error{Kind: fencing.ErrNotHeld, Role: role}
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("a", tok1, t0.Add(2*sec))).Return(notHeld).Once()
	assert.Equal(t, DoRenew, h.step().Kind)

	assert.Nil(t, h.r.hold, "no longer the holder, at once")
	assert.Error(t, workCtx.Err(), "work's context is cancelled")
	assert.Equal(t, []string{"elected 42/1", "revoked fenced 42/1"}, h.transitions())
	assert.Equal(t, 1.0, h.metric("krole_fenced_total"))
}
