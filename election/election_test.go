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

// startSession runs a session of member for role until the test ends,
// and returns it and a function that ends its Run and waits for it.
func startSession(t *testing.T, c *testcluster.Cluster, member codec.MemberID, role codec.Role) (*Session, func()) {
	t.Helper()
	s, err := New(Config{Cluster: c.Config, Member: member, Roles: []codec.Role{role}, Settings: testSettings})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(waitFor):
			t.Errorf("Run did not return")
		}
	}
	t.Cleanup(stop)
	return s, func() { cancel(); <-done; done <- nil }
}

// The etcd-shaped calls: Campaign blocks until the member holds the role
// and returns its token; Leader gives the holder and its value; Observe
// gives the current holder and then each change; Resign hands the role to
// the next candidate, whose Campaign then returns; Campaign after Run has
// returned says so.
func TestElectionCampaignLeaderObserveResign(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	sa, _ := startSession(t, c, "a", "db")
	ea, err := sa.Election("db")
	require.NoError(t, err)
	_, err = sa.Election("other")
	assert.ErrorIs(t, err, ErrUnknownRole)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ha, err := ea.Campaign(ctx, "10.0.0.1:80")
	require.NoError(t, err)
	assert.Equal(t, Holding{Role: "db", Member: "a", Token: ha.Token, Fence: ha.Fence, Value: "10.0.0.1:80"}, ha)

	sb, stopB := startSession(t, c, "b", "db")
	eb, err := sb.Election("db")
	require.NoError(t, err)
	obs := eb.Observe(ctx)
	first := <-obs
	assert.Equal(t, Holder{Member: "a", Token: ha.Token, Fence: ha.Fence, Value: "10.0.0.1:80"}, first)
	require.Eventually(t, func() bool { // the value reached b's view with a's new registration
		h, err := eb.Leader(ctx)
		return err == nil && h == first
	}, waitFor, 10*time.Millisecond)

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = eb.Campaign(short, "10.0.0.2:80")
	cancelShort()
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a holds the role: b's campaign waits")

	campaigned := make(chan Holding, 1)
	go func() {
		h, err := eb.Campaign(ctx, "10.0.0.2:80")
		assert.NoError(t, err)
		campaigned <- h
	}()
	require.NoError(t, ea.Resign(ctx))
	hb := <-campaigned
	assert.Equal(t, codec.MemberID("b"), hb.Member)
	assert.True(t, hb.Token.Newer(ha.Token))
	assert.Greater(t, ha.Fence, int64(0))
	assert.Greater(t, hb.Fence, ha.Fence, "the next holding's number is greater")
	assert.Equal(t, hb.Fence, hb.Held().Fence)
	for h := range obs {
		if h.Member == "b" {
			assert.Equal(t, Holder{Member: "b", Token: hb.Token, Fence: hb.Fence, Value: "10.0.0.2:80"}, h)
			break
		}
		assert.Equal(t, Holder{}, h, "between a and b: no holder, only")
	}
	assert.ErrorIs(t, ea.Resign(ctx), processor.ErrNotHolder)

	stopB()
	_, err = eb.Campaign(ctx, "10.0.0.2:80")
	assert.ErrorIs(t, err, ErrNotRunning)
	_, open := <-obs
	assert.False(t, open, "Observe's channel closes when Run returns")
}

// A holder that changes its value (Campaign with another value while
// holding, etcd's Proclaim) writes a lease with it at once: a second
// session's Leader reports the new value well before the next scheduled
// renewal (the heartbeat interval here is 20 s; the check gives up after 10 s,
// half of it). Without the prompt write the old value would stay until
// then. The value comes from the lease, written under the holder's token.
func TestCampaignWhileHoldingWritesTheNewValueAtOnce(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	slow := processor.Settings{LeaseDuration: 60 * time.Second, HeartbeatInterval: 20 * time.Second, Stagger: 300 * time.Millisecond}
	s, err := New(Config{Cluster: c.Config, Member: "a", Roles: []codec.Role{"db"}, Value: "10.0.0.1:80", Settings: slow})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	ea, err := s.Election("db")
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, waitFor)
	defer wcancel()
	h, err := ea.Campaign(wctx, "10.0.0.1:80")
	require.NoError(t, err)

	sb, _ := startSession(t, c, "b", "db")
	eb, err := sb.Election("db")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		l, err := eb.Leader(wctx)
		return err == nil && l == Holder{Member: "a", Token: h.Token, Fence: h.Fence, Value: "10.0.0.1:80"}
	}, waitFor, 10*time.Millisecond, "b's view shows a's value from its lease")

	changed := time.Now()
	h2, err := ea.Campaign(wctx, "10.0.0.9:80")
	require.NoError(t, err)
	assert.Equal(t, h.Token, h2.Token, "a keeps the role under the same token")
	require.Eventually(t, func() bool {
		l, err := eb.Leader(wctx)
		return err == nil && l == Holder{Member: "a", Token: h.Token, Fence: h.Fence, Value: "10.0.0.9:80"}
	}, slow.HeartbeatInterval/2, 10*time.Millisecond, "the new value is in a lease before the next renewal")
	t.Logf("new value seen %v after Campaign", time.Since(changed).Round(time.Millisecond))

	// Refused when written: a value with a control character.
	_, err = ea.Campaign(wctx, "10.0.0.9:80\r\nX-Evil: 1")
	require.ErrorIs(t, err, codec.ErrInvalid)
	assert.Contains(t, err.Error(), "control character")
	_, err = New(Config{Cluster: c.Config, Member: "c", Roles: []codec.Role{"db"}, Value: "\x1b[2J", Settings: slow})
	require.ErrorIs(t, err, codec.ErrInvalid)
}
