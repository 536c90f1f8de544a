package rolestate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func lease(t *testing.T, granted time.Time, d time.Duration) *codec.Lease {
	t.Helper()
	l, err := codec.NewLease("a", codec.Token{ProducerID: 1, Epoch: 1}, granted.UnixMilli(), granted.Add(d).UnixMilli())
	require.NoError(t, err)
	return &l
}

// TestLiveFromWhenSeen: a stamped lease is live for its span from
// LeaseSeenAt, whatever its holder's clock said; Holder agrees with Live.
func TestLiveFromWhenSeen(t *testing.T) {
	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second, time.Hour} {
		s := State{Lease: lease(t, t0.Add(skew), 10*time.Second), LeaseSeenAt: t0}
		assert.Equal(t, t0.Add(10*time.Second), s.LeaseEnd(), "skew %s", skew)
		assert.True(t, s.Live(t0.Add(10*time.Second-time.Millisecond)), "skew %s", skew)
		assert.False(t, s.Live(t0.Add(10*time.Second)), "skew %s", skew)
		_, held := s.Holder(t0.Add(10*time.Second - time.Millisecond).UnixMilli())
		assert.True(t, held)
		_, held = s.Holder(t0.Add(10 * time.Second).UnixMilli())
		assert.False(t, held)
	}
}

// TestLiveWithoutStamp: a state without LeaseSeenAt (Fold's) falls back
// to the writer's clock: GrantedAt plus the span, the deadline capped at
// MaxLeaseSpan.
func TestLiveWithoutStamp(t *testing.T) {
	s := Fold("r", []Record{{Offset: 0, Key: codec.LeaseKey("r"), Record: codec.Record{Lease: lease(t, t0, 10*time.Second)}}})
	require.NotNil(t, s.Lease)
	assert.True(t, s.LeaseSeenAt.IsZero())
	assert.True(t, t0.Add(10*time.Second).Equal(s.LeaseEnd()))
	assert.True(t, s.Live(t0.Add(9*time.Second)))
	assert.False(t, s.Live(t0.Add(10*time.Second)))

	long := State{Lease: lease(t, t0, 24*time.Hour)}
	assert.True(t, t0.Add(MaxLeaseSpan).Equal(long.LeaseEnd()), "the span is capped")
	assert.False(t, long.Live(t0.Add(MaxLeaseSpan)))
}

// TestReleaseNeverLive: a release holds for no observer at no time, stamped
// or not; no lease holds either.
func TestReleaseNeverLive(t *testing.T) {
	r := codec.ReleaseLease("a", codec.Token{ProducerID: 1, Epoch: 1})
	for _, s := range []State{{Lease: &r}, {Lease: &r, LeaseSeenAt: t0}} {
		for _, now := range []time.Time{time.UnixMilli(0), t0.Add(-time.Hour), t0, t0.Add(time.Hour)} {
			assert.False(t, s.Live(now))
			_, held := s.Holder(now.UnixMilli())
			assert.False(t, held)
		}
	}
	assert.False(t, State{LeaseSeenAt: t0}.Live(t0))
	assert.True(t, State{}.LeaseEnd().IsZero())
}

// TestFence: a holding's number is the offset of its first lease record,
// carried by the holding's later leases, so a state folded from what
// compaction left (the rewrite or the release alone) reports the same
// number; a new holding's first lease gives a new, higher one.
func TestFence(t *testing.T) {
	tok := codec.Token{ProducerID: 1, Epoch: 1}
	first := codec.Lease{Member: "a", Token: tok, GrantedAt: 1, Deadline: 10_000}
	rewrite := codec.Lease{Member: "a", Token: tok, GrantedAt: 2, Deadline: 10_001, Fence: 3}
	release := codec.ReleaseLease("a", tok)
	release.Fence = 3
	next := codec.Lease{Member: "b", Token: codec.Token{ProducerID: 1, Epoch: 2}, GrantedAt: 3, Deadline: 10_002}
	reg := Record{Offset: 2, Key: codec.RegistrationKey("r", "a"), Record: codec.Record{Registration: &codec.Registration{Member: "a"}}}
	rec := func(off int64, l codec.Lease) Record {
		return Record{Offset: off, Key: codec.LeaseKey("r"), Record: codec.Record{Lease: &l}}
	}
	assert.Equal(t, int64(-1), Fold("r", []Record{reg}).Fence(), "no lease")
	for _, c := range []struct {
		recs []Record
		want int64
	}{
		{[]Record{reg, rec(3, first)}, 3},
		{[]Record{reg, rec(3, first), rec(7, rewrite)}, 3},
		{[]Record{rec(7, rewrite)}, 3},
		{[]Record{rec(9, release)}, 3},
		{[]Record{rec(7, rewrite), rec(12, next)}, 12},
	} {
		st := Fold("r", c.recs)
		assert.Equal(t, c.want, st.Fence(), "%+v", c.recs)
	}
}
