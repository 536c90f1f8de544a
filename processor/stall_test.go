package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
)

// A renewal with time left before the renew deadline is attempted after a
// stall (issue 18, section 3): the writes the stall delayed do not make
// the member refuse it as "less than a lease write takes" when the other
// writes of the window were fast. Before, the moving average (above 5s
// after the 5 writes of a 6s stall) refused it with 1s left, and the role
// was lost at its deadline.
func TestRenewalAfterAStallIsAttempted(t *testing.T) {
	h := newHarness(t, "a", Settings{}) // lease 10s, renew every 2s, deadline 8s, 5 slots
	elect(t, h, tok1, 0)
	a := h.m.adm
	// Fast writes of the member's other roles, then the 5 writes in
	// flight during a 6s stall, ending at t0+7s.
	writeAt(a, t0.Add(time.Second), 10*time.Millisecond, 6)
	writeAt(a, t0.Add(7*time.Second), 6*time.Second, 5)

	h.clk.Set(t0.Add(7 * time.Second)) // 1s left before the renew deadline
	h.tr.On("WriteLease", mock.Anything, role, tok1, leaseAt("a", tok1, h.clk.Now())).Return(nil).Once()
	h.settle()
	h.tr.AssertExpectations(t)
	require.NotNil(t, h.r.hold, "still the holder")
	assert.Equal(t, t0.Add(7*time.Second), h.r.l.renewedAt, "renewed at once")
	assert.Equal(t, []string{"elected 42/1"}, h.transitions())
}
