package view

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// healthy waits until the view reports itself healthy.
func healthy(t *testing.T, v *View) Health {
	t.Helper()
	var h Health
	require.Eventually(t, func() bool { h = v.Health(); return h.Healthy }, 20*time.Second, 10*time.Millisecond,
		"the view never turned healthy: %+v", h)
	return h
}

// TestHealthWhenTheClusterStops: a view that reaches its cluster is
// healthy; once the cluster is gone and StaleAfter has passed on the
// view's clock without an answer, it reports the cluster unreachable, with
// when it last heard from it and when its data was last current.
func TestHealthWhenTheClusterStops(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	c.RequireFake(t)
	clk := newFakeClock()
	idle, err := New(Options{Config: c.Config, Clock: clk.Now})
	require.NoError(t, err)
	h := idle.Health()
	assert.False(t, h.Healthy)
	assert.NotEmpty(t, h.Reason, "not running")

	v, _ := runView(t, c.Config, Options{Clock: clk.Now, HealthInterval: 20 * time.Millisecond})
	caughtUp(t, v)
	h = healthy(t, v)
	assert.Empty(t, h.Reason)
	assert.False(t, h.Unreachable)
	assert.Equal(t, clk.Now(), h.CaughtUpAt)
	assert.Equal(t, clk.Now(), h.LastContact)

	// The clock moves on with the cluster up: the probes keep the view
	// healthy.
	clk.Advance(time.Minute)
	h = healthy(t, v)
	assert.Equal(t, clk.Now(), h.LastContact, "a probe answered after the clock moved")
	assert.Equal(t, clk.Now(), h.CaughtUpAt)

	c.Fake.Close()
	require.Eventually(t, func() bool { return v.Stats().ProbeError != nil }, 20*time.Second, 10*time.Millisecond,
		"the probes fail once the cluster is gone")
	before := clk.Now()
	clk.Advance(DefaultStaleAfter - time.Millisecond)
	assert.True(t, v.Health().Healthy, "not stale before StaleAfter")
	clk.Advance(2 * time.Millisecond)
	h = v.Health()
	assert.False(t, h.Healthy)
	assert.True(t, h.Unreachable)
	assert.Contains(t, h.Reason, before.UTC().Format(time.RFC3339), "the reason says since when")
	assert.Equal(t, before, h.LastContact)
	assert.Equal(t, before, h.CaughtUpAt, "the data is as of the last catch-up")

	st, err := v.Role(testCtx(t), "nosuch")
	require.NoError(t, err, "lookups still answer from the table")
	assert.Nil(t, st.Lease)
}

// TestHealthWhenTheViewLags: brokers answer, but the view's consumer does
// not get what is committed: once StaleAfter has passed since it was last
// confirmed caught up, the view is unhealthy, and not for want of a broker.
func TestHealthWhenTheViewLags(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	clk := newFakeClock()
	v, _ := runView(t, c.Config, Options{Clock: clk.Now, HealthInterval: 20 * time.Millisecond})
	caughtUp(t, v)
	healthy(t, v)
	g := holdConsumer(t, c)
	g.held(t)
	c.Members(t).Register("db", "m1")
	caughtAt := clk.Now()
	clk.Advance(DefaultStaleAfter + time.Second)
	var h Health
	require.Eventually(t, func() bool {
		h = v.Health()
		return !h.Healthy && h.LastContact.Equal(clk.Now())
	}, 20*time.Second, 10*time.Millisecond, "a probe answered, and the view is stale: %+v", h)
	assert.False(t, h.Unreachable)
	assert.Equal(t, caughtAt, h.CaughtUpAt)
	assert.Contains(t, h.Reason, "caught up")

	g.release()
	h = healthy(t, v)
	assert.Equal(t, clk.Now(), h.CaughtUpAt)
}

// TestHealthWhenTheTopicStartsOver: a view restored from its state dir
// onto a topic that holds less than it read (the topic was recreated)
// says so, and Confirm refuses to confirm.
func TestHealthWhenTheTopicStartsOver(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	for _, mem := range []codec.MemberID{"a", "b", "c", "d"} {
		m.Register("db", mem)
	}
	dir := t.TempDir()
	v, stop := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v)
	stop()

	// The same topic name on a new cluster: fewer records.
	c2 := testcluster.Start(t, testcluster.Options{Partitions: 1})
	c2.RequireFake(t)
	cfg := c2.Config
	cfg.Topic = c.Config.Topic
	require.NoError(t, devcluster.CreateTopic(testCtx(t), cfg, 1, 1))
	w := newWriter(t, &testcluster.Cluster{Config: cfg}, 1)
	w.register("db", "z")
	v2, _ := runView(t, cfg, Options{StateDir: dir, HealthInterval: 20 * time.Millisecond})
	var h Health
	require.Eventually(t, func() bool {
		h = v2.Health()
		return h.Reason != "" && !h.Unreachable && strings.Contains(h.Reason, "backwards")
	},
		20*time.Second, 10*time.Millisecond, "%+v", h)
	assert.False(t, h.Healthy)
	_, err := v2.Confirm(testCtx(t), "db")
	assert.ErrorIs(t, err, ErrRewound)
}

// TestLeaseSeenAt: each lease carries when the view applied it, by the
// view's clock, in lookups, Watch and Follow; a lease restored from the
// state dir carries when it was restored.
func TestLeaseSeenAt(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	clk := newFakeClock()
	dir := t.TempDir()
	v, stop := runView(t, c.Config, Options{Clock: clk.Now, StateDir: dir})
	caughtUp(t, v)
	ctx := testCtx(t)
	changes := v.Watch(ctx, "db")
	follow := v.Follow(ctx, "db")
	first := <-follow
	assert.Nil(t, first.Lease)
	assert.True(t, first.LeaseSeenAt.IsZero())

	t1 := clk.Now()
	// Written with a holder's clock a day ahead: the view's stamp is its
	// own.
	m.LeaseAt("db", "m1", time.Now().Add(24*time.Hour), time.Now().Add(24*time.Hour+time.Minute))
	caughtUp(t, v)
	clk.Advance(time.Hour) // after the apply: the stamp stays t1
	st, err := v.Role(ctx, "db")
	require.NoError(t, err)
	require.NotNil(t, st.Lease)
	assert.Equal(t, t1, st.LeaseSeenAt)
	ch := <-changes
	assert.Equal(t, t1, ch.After.LeaseSeenAt)
	assert.True(t, ch.Before.LeaseSeenAt.IsZero())
	got := <-follow
	assert.Equal(t, t1, got.LeaseSeenAt)

	t2 := clk.Now()
	m.Lease("db", "m2", time.Minute)
	caughtUp(t, v)
	st, err = v.Role(ctx, "db")
	require.NoError(t, err)
	assert.Equal(t, codec.MemberID("m2"), st.Lease.Member)
	assert.Equal(t, t2, st.LeaseSeenAt, "a new lease record, a new stamp")
	snap, err := v.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap, 1)
	assert.Equal(t, t2, snap[0].LeaseSeenAt)
	stop()

	clk.Advance(time.Hour)
	t3 := clk.Now()
	v2, _ := runView(t, c.Config, Options{Clock: clk.Now, StateDir: dir})
	caughtUp(t, v2)
	st, err = v2.Role(ctx, "db")
	require.NoError(t, err)
	require.NotNil(t, st.Lease)
	assert.Equal(t, t3, st.LeaseSeenAt, "restored from the state dir: stamped when restored")
}

// unseen returns states without LeaseSeenAt, which only the view that
// applied a lease knows, to compare tables.
func unseen(states ...rolestate.State) []rolestate.State {
	out := make([]rolestate.State, len(states))
	for i, st := range states {
		st.LeaseSeenAt = time.Time{}
		out[i] = st
	}
	return out
}
