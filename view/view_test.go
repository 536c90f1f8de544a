package view

import (
	"context"
	"errors"
	"github.com/krabka/krole/rolestate"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

func TestJoinOrderTombstonesAndReregistration(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 3})
	w := newWriter(t, c, 3)
	v, _ := runView(t, c.Config, Options{})
	ctx := testCtx(t)

	role, other := codec.Role("db-primary"), codec.Role("cache")
	offA := w.register(role, "a")
	offB := w.register(role, "b")
	w.register(other, "x")
	offC := w.register(role, "c")
	caughtUp(t, v)

	cs, err := v.Candidates(ctx, role)
	require.NoError(t, err)
	require.Equal(t, []codec.MemberID{"a", "b", "c"}, members(cs))
	assert.Equal(t, []int64{offA, offB, offC}, []int64{cs[0].Offset, cs[1].Offset, cs[2].Offset})
	assert.Equal(t, []int{0, 1, 2}, []int{cs[0].Rank, cs[1].Rank, cs[2].Rank})

	// A tombstone removes b; a re-registration moves a to the back.
	w.deregister(role, "b")
	offA2 := w.register(role, "a")
	caughtUp(t, v)
	cs, err = v.Candidates(ctx, role)
	require.NoError(t, err)
	require.Equal(t, []codec.MemberID{"c", "a"}, members(cs))
	assert.Equal(t, offA2, cs[1].Offset)
	assert.Equal(t, 1, cs[1].Rank)

	roles, err := v.Roles(ctx)
	require.NoError(t, err)
	assert.Equal(t, []codec.Role{"cache", "db-primary"}, roles)

	st, known, err := v.Lookup(ctx, other)
	require.NoError(t, err)
	assert.True(t, known)
	assert.Equal(t, []codec.MemberID{"x"}, members(st.Candidates))
	assert.Nil(t, st.Lease)
	assert.Equal(t, int64(-1), st.LeaseOffset)

	st, known, err = v.Lookup(ctx, "nobody")
	require.NoError(t, err)
	assert.False(t, known)
	assert.Equal(t, rolestate.State{Role: "nobody", LeaseOffset: -1}, st)

	// The last candidate leaving removes the role from the table.
	w.deregister(other, "x")
	caughtUp(t, v)
	roles, err = v.Roles(ctx)
	require.NoError(t, err)
	assert.Equal(t, []codec.Role{"db-primary"}, roles)

	snap, err := v.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap, 1)
	assert.Equal(t, role, snap[0].Role)
	assert.Equal(t, []codec.MemberID{"c", "a"}, members(snap[0].Candidates))
}

func TestLeaseReplacementHolderAndAbortedWrites(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	w := newWriter(t, c, 2)
	now := time.UnixMilli(1_700_000_000_000)
	clk := newFakeClock()
	clk.Set(now) // the view sees each lease when its holder granted it
	v, _ := runView(t, c.Config, Options{Clock: clk.Now})
	ctx := testCtx(t)
	role := codec.Role("scheduler")
	tp := w.txnProducer("writer-1")

	l1 := tp.sign(mkLease("a", 1, now, 10*time.Second))
	off1 := w.lease(tp, role, l1, true)
	caughtUp(t, v)

	got, held, err := v.Holder(ctx, role, now.Add(time.Second))
	require.NoError(t, err)
	assert.True(t, held)
	assert.Equal(t, l1, got)
	_, held, err = v.Holder(ctx, role, now.Add(10*time.Second))
	require.NoError(t, err)
	assert.False(t, held, "a lease is over its span after the view saw it")

	// An aborted write never shows, and the partition that now ends in an
	// abort marker still counts as caught up.
	w.lease(tp, role, mkLease("mallory", 2, now, time.Hour), false)
	caughtUp(t, v)
	st, err := v.Role(ctx, role)
	require.NoError(t, err)
	require.NotNil(t, st.Lease)
	assert.Equal(t, l1, *st.Lease)
	assert.Equal(t, off1, st.LeaseOffset)

	// A later lease replaces it.
	l2 := tp.sign(mkLease("b", 3, now.Add(5*time.Second), 10*time.Second))
	off2 := w.lease(tp, role, l2, true)
	caughtUp(t, v)
	st, err = v.Role(ctx, role)
	require.NoError(t, err)
	require.NotNil(t, st.Lease)
	assert.Equal(t, l2, *st.Lease)
	assert.Equal(t, off2, st.LeaseOffset)
	assert.Greater(t, off2, off1)

	// A lease tombstone names no token: krole never writes one, and the
	// view skips it as forged.
	w.send(codec.LeaseKey(role).String(), nil, w.part(role))
	caughtUp(t, v)
	st, err = v.Role(ctx, role)
	require.NoError(t, err)
	require.NotNil(t, st.Lease)
	assert.Equal(t, l2, *st.Lease)
	assert.Equal(t, int64(1), v.Stats().Skipped[SkipForged])
}

func TestPoisonRecordsAreSkippedAndCounted(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 3})
	w := newWriter(t, c, 3)
	v, _ := runView(t, c.Config, Options{})
	ctx := testCtx(t)
	role := codec.Role("payments")
	p := w.part(role)
	wrongP := (p + 1) % 3

	w.register(role, "a")
	w.send("not-krole", []byte("hello"), p)                                                                 // bad key
	w.send("krole/reg/payments/../x", []byte(`{}`), p)                                                      // bad member name
	w.send(codec.RegistrationKey(role, "z").String(), []byte("\x00\xffgarbage"), p)                         // bad value
	w.send(codec.RegistrationKey(role, "z").String(), []byte(`{"v":99,"kind":"hologram","member":"z"}`), p) // newer version
	w.send(codec.LeaseKey(role).String(), []byte(`{"v":1,"kind":"registration","member":"q","registered_at":1}`), p)
	w.send(codec.RegistrationKey(role, "y").String(), []byte(`{"v":1,"kind":"registration","member":"y","registered_at":1}`), wrongP)
	w.register(role, "b")
	caughtUp(t, v)

	cs, err := v.Candidates(ctx, role)
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"a", "b"}, members(cs))
	roles, err := v.Roles(ctx)
	require.NoError(t, err)
	assert.Equal(t, []codec.Role{role}, roles)

	s := v.Stats()
	assert.Equal(t, int64(2), s.Skipped[SkipKey])
	assert.Equal(t, int64(1), s.Skipped[SkipValue])
	assert.Equal(t, int64(1), s.Skipped[SkipVersion])
	assert.Equal(t, int64(1), s.Skipped[SkipMismatch])
	assert.Equal(t, int64(1), s.Skipped[SkipPartition])
	assert.Equal(t, int64(2), s.Applied)
	assert.True(t, s.CaughtUp)
	require.Len(t, s.Partitions, 3)
	assert.Equal(t, int64(7), s.Partitions[p].Next)
	assert.Equal(t, int64(7), s.Partitions[p].CaughtUpTo)

	// The view keeps going after poison.
	w.deregister(role, "a")
	caughtUp(t, v)
	cs, err = v.Candidates(ctx, role)
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"b"}, members(cs))
}

func TestRestartResumesFromStateDir(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	w := newWriter(t, c, 2)
	dir := t.TempDir()
	tp := w.txnProducer("w")
	now := time.UnixMilli(1_700_000_000_000)

	w.register("r1", "a")
	w.register("r1", "b")
	w.register("r2", "c")
	w.register("r1", "c")
	w.deregister("r1", "b")
	l := tp.sign(mkLease("a", 1, now, time.Minute))
	w.lease(tp, "r1", l, true)

	v1, stop1 := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v1)
	want, err := v1.Snapshot(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, int64(6), v1.Stats().Applied)
	stop1()

	// Written while no view runs.
	w.register("r2", "d")
	w.register("r1", "a") // a re-registers: moves behind c
	w.deregister("r2", "c")

	v2, _ := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v2)
	ctx := testCtx(t)
	assert.Equal(t, int64(3), v2.Stats().Applied, "a restart reads only what it has not stored")
	r1, err := v2.Role(ctx, "r1")
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"c", "a"}, members(r1.Candidates))
	require.NotNil(t, r1.Lease)
	assert.Equal(t, l, *r1.Lease)
	assert.Equal(t, want[0].LeaseOffset, r1.LeaseOffset)
	assert.Equal(t, want[0].Candidates[1].Offset, r1.Candidates[0].Offset, "c keeps its rank offset across the restart")
	r2, err := v2.Role(ctx, "r2")
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"d"}, members(r2.Candidates))
}

func TestMemoryRestartRereadsTopic(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	w.register("r", "a")
	w.register("r", "b")
	for i := 0; i < 2; i++ {
		v, stop := runView(t, c.Config, Options{})
		caughtUp(t, v)
		assert.Equal(t, int64(2), v.Stats().Applied)
		cs, err := v.Candidates(testCtx(t), "r")
		require.NoError(t, err)
		assert.Equal(t, []codec.MemberID{"a", "b"}, members(cs))
		stop()
	}
}

func TestLookupsWaitForCatchUpAndStop(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	v, err := New(Options{Config: c.Config})
	require.NoError(t, err)
	assert.False(t, v.CaughtUp())

	// Not running: a lookup waits, bounded by its context, and says why.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = v.Roles(ctx)
	assert.ErrorIs(t, err, ErrNotCaughtUp)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	_, _, err = v.Holder(ctx, "r", time.Time{})
	assert.ErrorIs(t, err, ErrNotCaughtUp)

	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- v.Run(runCtx) }()
	caughtUp(t, v)
	assert.True(t, v.CaughtUp())
	roles, err := v.Roles(testCtx(t))
	require.NoError(t, err)
	assert.Empty(t, roles)
	assert.ErrorIs(t, v.Run(context.Background()), ErrAlreadyRun)

	watch := v.Watch(testCtx(t))
	stop()
	require.NoError(t, <-errc)
	_, ok := <-watch
	assert.False(t, ok, "watch channels close when the view stops")
	assert.False(t, v.CaughtUp())
	_, err = v.Candidates(testCtx(t), "r")
	assert.ErrorIs(t, err, ErrStopped)
	_, _, err = v.Holder(testCtx(t), "r", time.Time{})
	assert.ErrorIs(t, err, ErrStopped, "the lookups' fast path knows the view stopped")
	assert.ErrorIs(t, v.WaitCaughtUp(testCtx(t)), ErrStopped)
	_, ok = <-v.Watch(testCtx(t))
	assert.False(t, ok)
}

func TestRunFailsOnMissingTopic(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	cfg := c.Config
	cfg.Topic = "no-such-topic-" + cfg.TxnPrefix[:8]
	v, err := New(Options{Config: cfg})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = v.Run(ctx)
	require.Error(t, err)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "fails on its own: %v", err)
	_, err = v.Roles(ctx)
	assert.ErrorIs(t, err, ErrStopped)
}

func TestNewValidates(t *testing.T) {
	_, err := New(Options{})
	assert.ErrorContains(t, err, "no brokers")
	_, err = New(Options{Config: fencing.Config{Brokers: []string{"localhost:9092"}}, ReconnectBackoff: -time.Second})
	assert.ErrorContains(t, err, "ReconnectBackoff")
}
