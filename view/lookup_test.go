package view

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// TestHolderAndLeaderJudgeFromWhenSeen: a lease written by a holder whose
// clock is 30 s ahead, or 30 s behind, of the view's is live for its span
// from when the view applied its record, on the view's clock: not 30 s
// more (the deadline is 30 s in the view's future) nor 30 s less (the
// deadline is already past when the view reads it). View.Holder and
// View.Leader agree, and a release is never live.
func TestHolderAndLeaderJudgeFromWhenSeen(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	clk := newFakeClock()
	v, _ := runView(t, c.Config, Options{Clock: clk.Now})
	ctx := testCtx(t)
	role := codec.Role("skewed")
	tp := w.txnProducer("skew-writer")
	w.register(role, "a")
	const span = 10 * time.Second

	live := func(want bool, msg string) {
		t.Helper()
		_, held, err := v.Holder(ctx, role, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, want, held, "Holder: "+msg)
		_, held, err = v.Holder(ctx, role, clk.Now())
		require.NoError(t, err)
		assert.Equal(t, want, held, "Holder at the view's now: "+msg)
		ld, ok, err := v.Leader(ctx, role, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, want, ok, "Leader: "+msg)
		if want {
			assert.Equal(t, codec.MemberID("a"), ld.Lease.Member)
		}
	}

	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second} {
		// The view applies the record at seen, on its clock; the
		// holder's clock reads seen+skew.
		seen := clk.Now()
		l := tp.sign(mkLease("a", 1, seen.Add(skew), span))
		w.lease(tp, role, l, true)
		caughtUp(t, v)
		st, err := v.Role(ctx, role)
		require.NoError(t, err)
		require.Equal(t, l, *st.Lease)
		require.Equal(t, seen, st.LeaseSeenAt)
		live(true, "just seen, skew "+skew.String())

		clk.Advance(span - time.Millisecond)
		live(true, "a millisecond before its span from when seen, skew "+skew.String())
		clk.Advance(time.Millisecond)
		live(false, "its span from when seen has passed, skew "+skew.String())
		clk.Advance(time.Second)
	}

	// A release is never live, even just seen and under any clock.
	w.lease(tp, role, tp.sign(codec.ReleaseLease("a", codec.Token{})), true)
	caughtUp(t, v)
	live(false, "a release")
	_, held, err := v.Holder(ctx, role, time.UnixMilli(0))
	require.NoError(t, err)
	assert.False(t, held, "a release at the epoch")
}
