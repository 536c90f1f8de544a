package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"

	"github.com/krabka/krole/codec"
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

// Members that start together must not each see themselves first: until
// the view shows this member's own registration, it cannot know of the
// registrations written before it (lower offsets), so it does not
// challenge, however vacant the role looks.
func TestNoChallengeBeforeTheViewShowsOwnRegistration(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.noEcho = true
	h.see(state(role, nil, 0))
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(1), nil).Once()

	assert.Equal(t, DoRegister, h.step().Kind)
	a := h.step()
	assert.Equal(t, DoWait, a.Kind, "the role is vacant, but a's registration is not in its view yet")
	assert.Contains(t, a.Reason, "not in the view yet")

	// The view catches up: b registered first, at offset 0.
	h.see(state(role, nil, 2, "b", 0, "a", 1))
	a = h.step()
	assert.Equal(t, DoWait, a.Kind, "rank 1 waits its stagger behind b")
	assert.Equal(t, t0.Add(time.Second), a.Until)
	assert.Nil(t, h.r.hold)
}
