package view

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// TestLeaderValue: Leader gives the live holder with the value it
// registered with, from the topic and from a restored state dir; a newer
// registration's value replaces the older; a holder that is no longer a
// candidate has none; an expired lease gives no leader.
func TestLeaderValue(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	m := c.Members(t)
	_, err := m.Transport.RegisterValue(m.Context(), "db", "m1", "10.0.0.1:5432")
	require.NoError(t, err)
	_, err = m.Transport.RegisterValue(m.Context(), "db", "m2", "10.0.0.2:5432")
	require.NoError(t, err)
	l := m.Lease("db", "m1", time.Hour)
	dir := t.TempDir()

	v1, stop1 := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v1)
	ld, ok, err := v1.Leader(testCtx(t), "db", time.Time{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Leader{Lease: l, Value: "10.0.0.1:5432"}, ld)
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

	// Restored from the state dir, then the newer records on top.
	_, err = m.Transport.RegisterValue(m.Context(), "db", "m2", "10.0.0.3:5432")
	require.NoError(t, err)
	v2, _ := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v2)
	s, err := v2.Role(testCtx(t), "db")
	require.NoError(t, err)
	got, _ := s.Value("m2")
	assert.Equal(t, "10.0.0.3:5432", got, "the newer registration's value")
	ld, ok, err = v2.Leader(testCtx(t), "db", time.Time{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "10.0.0.1:5432", ld.Value, "restored from the state dir")

	// A holder deregistered while holding has no value.
	require.NoError(t, m.Transport.Deregister(m.Context(), "db", "m1"))
	v3, _ := runView(t, c.Config, Options{})
	caughtUp(t, v3)
	ld, ok, err = v3.Leader(testCtx(t), "db", time.Time{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Leader{Lease: l}, ld)
}
