package view

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	if !assert.Eventually(t, func() bool {
		h = v.Health()
		return !h.Healthy && h.LastContact.Equal(clk.Now())
	}, 20*time.Second, 10*time.Millisecond, "a probe answered, and the view is stale") {
		require.FailNow(t, "the view's health at the end", "%+v (fake now %v)", v.Health(), clk.Now())
	}
	assert.False(t, h.Unreachable)
	assert.Equal(t, caughtAt, h.CaughtUpAt)
	assert.Contains(t, h.Reason, "caught up")

	g.release()
	h = healthy(t, v)
	assert.Equal(t, clk.Now(), h.CaughtUpAt)
}

// fetchesFromStart says whether a fetch reads some partition from offset
// 0: the first fetch of a rebuild.
func fetchesFromStart(fr *kmsg.FetchRequest) bool {
	for _, tp := range fr.Topics {
		for _, p := range tp.Partitions {
			if p.FetchOffset == 0 {
				return true
			}
		}
	}
	return false
}

// rewoundUntilRebuilt checks a view whose partition 0 went backwards while
// its rebuild is held at gate g: Health reports it and Confirm fails with
// ErrRewound, also once the rebuild has started (its first fetch is held);
// once g opens, the rebuilt table is adopted and both recover, Confirm
// answering from the rebuilt table: role db with candidate z only. clk is
// the view's fake clock, nil for time.Now.
func rewoundUntilRebuilt(t *testing.T, v *View, g *consumerGate, clk *fakeClock) rolestate.Confirmed {
	t.Helper()
	var h Health
	require.Eventually(t, func() bool {
		h = v.Health()
		return !h.Unreachable && strings.Contains(h.Reason, "backwards")
	}, 20*time.Second, 10*time.Millisecond, "Health never reported the offsets going backwards")
	assert.False(t, h.Healthy)
	g.held(t) // the partition was reset: its rebuild reads from offset 0
	assert.Equal(t, int64(1), v.Stats().Rebuilds)
	for range 3 { // probes of the monitor come and go: the mark holds
		if clk != nil {
			clk.Advance(time.Millisecond)
		}
		since := h.LastContact
		require.Eventually(t, func() bool { h = v.Health(); return h.LastContact.After(since) },
			20*time.Second, 5*time.Millisecond, "a probe answered")
		assert.False(t, h.Healthy, "still rebuilding")
		assert.Contains(t, h.Reason, "backwards")
		_, err := v.Confirm(testCtx(t), "db")
		require.ErrorIs(t, err, ErrRewound, "still rebuilding")
		var ob *OffsetsWentBackwardsError
		require.ErrorAs(t, err, &ob)
		assert.Equal(t, int32(0), ob.Partition)
	}

	g.release()
	healthy(t, v)
	conf, err := v.Confirm(testCtx(t), "db")
	require.NoError(t, err, "rebuilt and caught up: Confirm answers again")
	assert.Equal(t, []codec.MemberID{"z"}, members(conf.State.Candidates), "the rebuilt table")
	assert.True(t, v.Health().Healthy)
	return conf
}

// TestHealthWhenTheTopicStartsOver: a view restored from its state dir
// onto a topic that holds less than it read (the topic was recreated)
// says so, and Confirm refuses to confirm, until the view has rebuilt the
// partition's table from the new topic; then both recover.
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
	g := holdConsumerIf(t, c2, fetchesFromStart)
	v2, _ := runView(t, cfg, Options{StateDir: dir, HealthInterval: 20 * time.Millisecond, ReconnectBackoff: 20 * time.Millisecond})
	rewoundUntilRebuilt(t, v2, g, nil)
}

// TestHealthAndConfirmRecoverAfterARebuild: the role topic is recreated
// under a running, healthy view. Health reports the offsets going
// backwards and Confirm fails with ErrRewound from when the view notices
// until its rebuilt table replaces the old one, including while the
// partition is being read again from its start (when what the view has
// read is back at 0); then both recover, and a lease of the rebuilt table
// carries a LeaseSeenAt of the view's clock.
func TestHealthAndConfirmRecoverAfterARebuild(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	c.RequireFake(t)
	w := newWriter(t, c, 1)
	for _, mem := range []codec.MemberID{"a", "b", "c", "d"} {
		w.register("db", mem)
	}
	clk := newFakeClock()
	v, _ := runView(t, c.Config, Options{Clock: clk.Now, HealthInterval: 20 * time.Millisecond, ReconnectBackoff: 20 * time.Millisecond})
	caughtUp(t, v)
	healthy(t, v)
	conf, err := v.Confirm(testCtx(t), "db")
	require.NoError(t, err)
	require.Len(t, conf.State.Candidates, 4)

	g := holdConsumerIf(t, c, fetchesFromStart)
	recreateTopic(t, c, 1)
	w.register("db", "z")
	tp := w.txnProducer("db")
	w.lease(tp, "db", mkLease("z", 0, time.Now(), time.Hour), true)
	clk.Advance(time.Minute)
	conf = rewoundUntilRebuilt(t, v, g, clk)
	require.NotNil(t, conf.State.Lease, "the rebuilt table's lease")
	assert.Equal(t, clk.Now(), conf.State.LeaseSeenAt, "stamped by the view's clock, after the clock moved")
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

// TestIdleFetchesAreContact: with every probe held at the broker and
// nothing written, the long polls of the view's consumer, answered empty,
// still count as a broker answering: the view is not reported
// unreachable, only not confirmed caught up.
func TestIdleFetchesAreContact(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	c.RequireFake(t)
	clk := newFakeClock()
	v, _ := runView(t, c.Config, Options{Clock: clk.Now, HealthInterval: 20 * time.Millisecond})
	caughtUp(t, v)
	healthy(t, v)
	release, held := make(chan struct{}), make(chan struct{}, 1)
	t.Cleanup(func() { close(release) })
	c.Fake.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		if req.(*kmsg.ListOffsetsRequest).IsolationLevel == 1 { // a probe's
			select {
			case held <- struct{}{}:
			default:
			}
			c.Fake.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	select { // the monitor's next probe is held, and with it the monitor
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the monitor sent no probe")
	}
	clk.Advance(time.Minute)
	var h Health
	require.Eventually(t, func() bool { h = v.Health(); return h.LastContact.Equal(clk.Now()) },
		20*time.Second, 10*time.Millisecond, "an idle fetch of the consumer was answered")
	assert.False(t, h.Unreachable)
	assert.False(t, h.Healthy)
	assert.Contains(t, h.Reason, "caught up", "not confirmed caught up for a minute")
}
