package election

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// The etcd-shaped program works the first time.

// Campaign works without the program starting anything else: the
// session starts itself, and Close resigns (the release is in the
// records) and stops it.
func TestCampaignWithoutRun(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	rec := newRecorder()
	s, err := New(config(c, "a", "db", rec))
	require.NoError(t, err)
	e, err := s.Election("db")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	h, err := e.Campaign(ctx, "10.0.0.1:80")
	require.NoError(t, err, "Campaign without Run")
	assert.Equal(t, MemberID("a"), h.Member)
	cur, ok, err := c.Transport(t).Describe(ctx, "db")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, h.Token, cur, "the broker's current token is the holding's")

	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Run(context.Background(), nil), ErrAlreadyRun, "Run after Close")
	st := readRole(t, c, "db")
	require.NotNil(t, st.Lease)
	assert.True(t, released(st), "Close resigned")
	assert.Equal(t, h.Token, st.Lease.Token)
	assert.Empty(t, st.Candidates, "Close deregistered")
	_, err = e.Campaign(ctx, "10.0.0.1:80")
	assert.ErrorIs(t, err, ErrNotRunning)
}

// `go sess.Run(ctx, nil)` racing the first Campaign: whichever starts the
// session, Run returns once its ctx has ended and the session stopped,
// with no error.
func TestRunAdoptsASessionThatStartedItself(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	s, err := New(config(c, "a", "db", newRecorder()))
	require.NoError(t, err)
	e, err := s.Election("db")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = e.Leader(ctx) // starts the session
	if err != nil {
		require.ErrorIs(t, err, ErrNoLeader)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx, nil) }()
	_, err = e.Campaign(ctx, "")
	require.NoError(t, err)
	stop()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Run did not return")
	}
	st := readRole(t, c, "db")
	require.NotNil(t, st.Lease)
	assert.True(t, released(st), "the end of Run's ctx resigned")
	require.NoError(t, s.Close())
}

// Read-your-writes: right after Campaign returns, Leader from the same
// session names this member under the holding's token, every time (the
// view alone may not have read the session's own lease write yet).
func TestLeaderRightAfterCampaignNamesThisMember(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	roles := []codec.Role{"r0", "r1", "r2", "r3", "r4", "r5"}
	s, err := New(Config{Cluster: c.Config, Member: "a", Roles: roles, Settings: testSettings})
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for _, r := range roles {
		e, err := s.Election(r)
		require.NoError(t, err)
		h, err := e.Campaign(ctx, "v-"+string(r))
		require.NoError(t, err)
		l, err := e.Leader(ctx)
		require.NoError(t, err, "role %s: Leader right after Campaign", r)
		assert.Equal(t, Holder{Member: "a", Token: h.Token, Fence: h.Fence, Value: "v-" + string(r)}, l, "role %s", r)
	}
}

// After Election.Resign returns, a lone member does not take the role
// back: no Elected event for two leases, Leader says there is none, and
// the member is no candidate. Campaign puts it back and it holds the
// role under a newer token.
func TestResignDoesNotCampaignAgainUntilCampaign(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	rec := newRecorder()
	s, err := New(config(c, "a", "db", rec))
	require.NoError(t, err)
	defer s.Close()
	e, err := s.Election("db")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	h, err := e.Campaign(ctx, "")
	require.NoError(t, err)
	require.NoError(t, e.Resign(ctx))
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, ErrNoLeader, "Leader from the same session right after Resign")

	time.Sleep(2 * testSettings.LeaseDuration) // time enough to have been re-elected many times over
	_, evs := rec.snapshot()
	elected := 0
	for _, ev := range evs {
		if ev.Kind == processor.Elected {
			elected++
		}
	}
	assert.Equal(t, 1, elected, "elected once, by the Campaign; not again after Resign")
	st := readRole(t, c, "db")
	require.NotNil(t, st.Lease)
	assert.True(t, st.Lease.Released())
	assert.Equal(t, h.Token, st.Lease.Token, "the release is the last lease")
	assert.Empty(t, st.Candidates, "out of the queue")
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, ErrNoLeader)

	h2, err := e.Campaign(ctx, "")
	require.NoError(t, err)
	assert.True(t, h2.Token.Newer(h.Token))
	assert.ErrorIs(t, errors.Join(e.Resign(ctx), e.Resign(ctx)), ErrNotHolder, "a second Resign: not the holder")
}
