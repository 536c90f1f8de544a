package view

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// TestLeaderValue: Leader gives the live holder with the value its lease
// carries (written under its token), from the topic and from a restored
// state dir. A registration, which anyone with Write on the topic can
// append, changes a candidate's value but never the holder's: a
// stranger's plain re-registration of the holder with another value (what
// `kcat -P` can do) leaves Leader's value as the lease says, and so does
// a holder deregistered while holding. An expired lease gives no leader.
func TestLeaderValue(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	m := c.Members(t)
	ctx := m.Context()
	_, err := m.Transport.RegisterValue(ctx, "db", "m1", "10.0.0.1:5432")
	require.NoError(t, err)
	_, err = m.Transport.RegisterValue(ctx, "db", "m2", "10.0.0.2:5432")
	require.NoError(t, err)
	tok, err := m.Transport.AcquireEpoch(ctx, "db")
	require.NoError(t, err)
	now := time.Now()
	l, err := codec.NewLease("m1", tok, now.UnixMilli(), now.Add(time.Hour).UnixMilli())
	require.NoError(t, err)
	l.Value = "10.0.0.1:5432"
	fence, err := m.Transport.WriteLease(ctx, "db", tok, l)
	require.NoError(t, err)
	dir := t.TempDir()

	v1, stop1 := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v1)
	ld, ok, err := v1.Leader(testCtx(t), "db", time.Time{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Leader{Lease: l, Fence: fence, Value: "10.0.0.1:5432"}, ld)
	cs, err := v1.Candidates(testCtx(t), "db")
	require.NoError(t, err)
	require.Len(t, cs, 2)
	assert.Equal(t, "10.0.0.2:5432", cs[1].Value)
	_, ok, err = v1.Leader(testCtx(t), "db", time.UnixMilli(l.Deadline))
	require.NoError(t, err)
	assert.False(t, ok, "no leader once the lease has run out")
	_, ok, err = v1.Leader(testCtx(t), "nosuch", time.Time{})
	require.NoError(t, err)
	assert.False(t, ok)
	stop1()

	// A stranger re-registers the holder with its own value (a plain
	// append); restored from the state dir, then the newer records on top.
	w := newWriter(t, c, 2)
	w.registerValue("db", "m1", "evil.example:6666")
	v2, _ := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v2)
	s, err := v2.Role(testCtx(t), "db")
	require.NoError(t, err)
	got, _ := s.Value("m1")
	assert.Equal(t, "evil.example:6666", got, "the registration's value is the candidate's")
	ld, ok, err = v2.Leader(testCtx(t), "db", time.Time{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "10.0.0.1:5432", ld.Value, "the holder's value is its lease's, restored from the state dir")

	// A holder deregistered while holding keeps its lease's value.
	require.NoError(t, m.Transport.Deregister(ctx, "db", "m1"))
	v3, _ := runView(t, c.Config, Options{})
	caughtUp(t, v3)
	ld, ok, err = v3.Leader(testCtx(t), "db", time.Time{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Leader{Lease: l, Fence: fence, Value: "10.0.0.1:5432"}, ld)
}

// TestFenceFromALaterLease: a holding's later leases carry its number, so
// a view that finds only a later one (compaction removed the first lease
// record: here it was never written) gives the same number, from the
// topic and from a restored state dir; the next holding's first lease
// gives its own offset.
func TestFenceFromALaterLease(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	ctx := m.Context()
	m.Register("db", "m1")
	m.Register("db", "m2")
	tok, err := m.Transport.AcquireEpoch(ctx, "db")
	require.NoError(t, err)
	now := time.Now()
	rewrite, err := codec.NewLease("m1", tok, now.UnixMilli(), now.Add(time.Hour).UnixMilli())
	require.NoError(t, err)
	rewrite.Fence = 1 // the offset its holding's first lease had
	off, err := m.Transport.WriteLease(ctx, "db", tok, rewrite)
	require.NoError(t, err)
	require.Greater(t, off, int64(1))

	dir := t.TempDir()
	v1, stop1 := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v1)
	st, err := v1.Role(testCtx(t), "db")
	require.NoError(t, err)
	assert.Equal(t, off, st.LeaseOffset)
	assert.Equal(t, int64(1), st.Fence(), "the number the rewrite carries, not its offset")
	ld, ok, err := v1.Leader(testCtx(t), "db", time.Time{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, int64(1), ld.Fence)
	stop1()

	v2, _ := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v2)
	st, err = v2.Role(testCtx(t), "db")
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Fence(), "restored from the state dir")

	next := m.Lease("db", "m2", time.Hour)
	require.NoError(t, v2.WaitCaughtUp(testCtx(t)))
	st, err = v2.Role(testCtx(t), "db")
	require.NoError(t, err)
	require.Equal(t, next.Token, st.Lease.Token)
	assert.Equal(t, m.LastLease, st.Fence(), "a new holding's first lease: its own offset")
	assert.Greater(t, st.Fence(), off)
}
