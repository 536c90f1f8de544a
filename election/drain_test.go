package election

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// Two members of a group: Drain of the one that holds every role hands
// them to the other, and returns once it holds none.
func TestSessionDrainHandsTheGroupOver(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	roles := []codec.Role{"g-0", "g-1"}
	holds := func(s *Session) (n int) {
		for _, r := range roles {
			if _, held, _, _ := s.tr.holding(r); held {
				n++
			}
		}
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func(member codec.MemberID) (*Session, chan error) {
		cfg := config(c, member, roles[0], newRecorder())
		cfg.Roles, cfg.Group = roles, &processor.Group{Name: "g"}
		s, err := New(cfg)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, nil) }()
		return s, done
	}
	a, aDone := start("node-a")
	require.Eventually(t, func() bool { return holds(a) == 2 }, waitFor, 10*time.Millisecond, "the only member holds both roles")
	b, bDone := start("node-b")

	dctx, dcancel := context.WithTimeout(ctx, waitFor)
	defer dcancel()
	require.NoError(t, a.Drain(dctx))
	assert.Equal(t, 0, holds(a), "Drain returned: the member holds none of the group's roles")
	require.Eventually(t, func() bool { return holds(b) == 2 }, waitFor, 10*time.Millisecond, "the other member takes both")
	assert.Equal(t, 0, holds(a), "a drained member campaigns no more")

	cancel()
	assert.NoError(t, <-aDone)
	assert.NoError(t, <-bDone)
	assert.ErrorIs(t, a.Drain(context.Background()), ErrNotRunning, "after Run")
}

// Drain needs a member of a group.
func TestDrainWithoutGroup(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	r, err := New(Config{Cluster: c.Config})
	require.NoError(t, err)
	defer r.Close()
	assert.ErrorIs(t, r.Drain(context.Background()), ErrReadOnly)
	m, err := New(config(c, "node-a", "r", newRecorder()))
	require.NoError(t, err)
	defer m.Close()
	assert.ErrorContains(t, m.Drain(context.Background()), "in no group")
}
