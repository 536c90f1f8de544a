package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// ConfirmFreshness is the least of RetryBackoff, Stagger/4 and a quarter
// of the margin between HeartbeatDeadline and LeaseDuration (the proof in
// the package doc needs the margin to exceed it), and 0 (no
// confirmation from the source's own reads) when there is no margin.
func TestConfirmFreshness(t *testing.T) {
	d := Settings{LeaseDuration: 3 * time.Second}.WithDefaults()
	assert.Equal(t, 75*time.Millisecond, d.ConfirmFreshness(), "3s lease: RetryBackoff 75ms, Stagger 300ms, margin 600ms")
	assert.Equal(t, 10*time.Millisecond, Settings{LeaseDuration: 3 * time.Second, RetryBackoff: 10 * time.Millisecond}.WithDefaults().ConfirmFreshness())
	assert.Equal(t, time.Millisecond, Settings{LeaseDuration: 3 * time.Second, Stagger: 4 * time.Millisecond}.WithDefaults().ConfirmFreshness())
	narrow := Settings{LeaseDuration: 3 * time.Second, HeartbeatDeadline: 2960 * time.Millisecond}.WithDefaults()
	assert.Equal(t, 10*time.Millisecond, narrow.ConfirmFreshness(), "a quarter of a 40ms margin")
	none := Settings{LeaseDuration: 3 * time.Second, HeartbeatDeadline: 3 * time.Second}.WithDefaults()
	assert.Zero(t, none.ConfirmFreshness(), "no margin: always the round trip")
	for _, s := range []Settings{d, narrow, none} {
		assert.LessOrEqual(t, 4*s.ConfirmFreshness(), s.LeaseDuration-s.HeartbeatDeadline)
		assert.LessOrEqual(t, 4*s.ConfirmFreshness(), s.Stagger)
		assert.LessOrEqual(t, s.ConfirmFreshness(), s.RetryBackoff)
	}
}
