package view

import (
	"context"
	"fmt"
	"github.com/krabka/krole/rolestate"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

func recv(t *testing.T, ch <-chan Change) Change {
	t.Helper()
	select {
	case c, ok := <-ch:
		require.True(t, ok, "watch channel closed")
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no change delivered")
		return Change{}
	}
}

func TestWatchDeliversEachKindOfChange(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	w := newWriter(t, c, 2)
	tp := w.txnProducer("w")
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	ctx := testCtx(t)
	role := codec.Role("leader")
	only := v.Watch(ctx, role)
	all := v.Watch(ctx)

	w.register("unrelated", "z")
	ch := recv(t, all)
	assert.Equal(t, codec.Role("unrelated"), ch.Role)

	off := w.register(role, "a")
	ch = recv(t, only)
	assert.Equal(t, role, ch.Role)
	assert.True(t, ch.CandidatesChanged)
	assert.Equal(t, []codec.MemberID{"a"}, ch.Joined)
	assert.Empty(t, ch.Before.Candidates)
	assert.Equal(t, off, ch.Offset)
	assert.False(t, ch.HolderChanged)

	now := time.UnixMilli(1_700_000_000_000)
	l := tp.sign(mkLease("a", 1, now, 10*time.Second))
	w.lease(tp, role, l, true)
	ch = recv(t, only)
	assert.True(t, ch.HolderChanged)
	assert.False(t, ch.CandidatesChanged)
	require.NotNil(t, ch.After.Lease)
	assert.Equal(t, l, *ch.After.Lease)

	renewed := l
	renewed.Deadline += 10_000
	w.lease(tp, role, renewed, true)
	ch = recv(t, only)
	assert.True(t, ch.LeaseRenewed)
	assert.False(t, ch.HolderChanged)
	assert.Equal(t, l, *ch.Before.Lease)

	released := renewed
	released.GrantedAt = now.Add(time.Second).UnixMilli()
	released.Deadline = released.GrantedAt + 1
	w.lease(tp, role, released, true)
	ch = recv(t, only)
	assert.True(t, ch.LeaseReleased)
	assert.False(t, ch.LeaseRenewed)
	assert.False(t, ch.HolderChanged)

	w.deregister(role, "a")
	ch = recv(t, only)
	assert.Equal(t, []codec.MemberID{"a"}, ch.Left)
	assert.True(t, ch.CandidatesChanged)

	// The unfiltered watch saw the same changes of role, possibly
	// coalesced; its latest After is the role's state now.
	var last Change
	for last.Offset < ch.Offset {
		last = recv(t, all)
		assert.Equal(t, role, last.Role)
	}
	assert.Equal(t, ch.After, last.After)
}

// offlineView is a View whose table is fed by the test, without a cluster.
func offlineView(t *testing.T, nparts int32) *View {
	t.Helper()
	v, err := New(Options{Config: fencing.Config{Brokers: []string{"127.0.0.1:1"}}})
	require.NoError(t, err)
	v.setOffline(nparts)
	close(v.started)
	t.Cleanup(v.stop)
	return v
}

type feeder struct {
	t    *testing.T
	v    *View
	next map[int32]int64
}

func (f *feeder) put(role codec.Role, key codec.Key, r codec.Record) int64 {
	f.t.Helper()
	if f.next == nil {
		f.next = map[int32]int64{}
	}
	p := codec.Partition(role, f.v.nparts)
	b, err := codec.EncodeRecord(r)
	require.NoError(f.t, err)
	k, rec, reason, err := f.v.decode(p, key.Encode(), b, new(codec.RecordBuf))
	require.NoError(f.t, err)
	off := f.next[p]
	f.next[p]++
	f.v.apply(p, off, k, rec, reason)
	return off
}

func (f *feeder) reg(role codec.Role, m codec.MemberID) int64 {
	return f.put(role, codec.RegistrationKey(role, m), codec.Record{Registration: &codec.Registration{Member: m, RegisteredAt: 1}})
}

func (f *feeder) unreg(role codec.Role, m codec.MemberID) int64 {
	return f.put(role, codec.RegistrationKey(role, m), codec.Record{})
}

func (f *feeder) lease(role codec.Role, l codec.Lease) int64 {
	return f.put(role, codec.LeaseKey(role), codec.Record{Lease: &l})
}

func TestWatchCoalescesForASlowSubscriber(t *testing.T) {
	v := offlineView(t, 1)
	f := &feeder{t: t, v: v}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := v.Watch(ctx, "r")

	// Changes while the view has not caught up are held back; the view
	// never blocks on the subscriber.
	now := time.UnixMilli(1_700_000_000_000)
	f.reg("r", "a")
	f.reg("r", "b")
	f.lease("r", mkLease("a", 1, now, time.Second))
	for i := 0; i < 1000; i++ {
		f.lease("r", mkLease("a", 1, now, time.Duration(i+2)*time.Second))
	}
	f.reg("r", "c")
	off := f.unreg("r", "b")
	f.reg("other", "x")
	v.markReady()

	c := recv(t, ch)
	assert.Equal(t, rolestate.State{Role: "r", LeaseOffset: -1}, c.Before, "the first Before")
	assert.Equal(t, []codec.MemberID{"a", "c"}, members(c.After.Candidates), "the latest After")
	require.NotNil(t, c.After.Lease)
	assert.Equal(t, mkLease("a", 1, now, 1001*time.Second), *c.After.Lease)
	assert.Equal(t, off, c.Offset)
	assert.True(t, c.HolderChanged)
	assert.True(t, c.CandidatesChanged)
	assert.Equal(t, []codec.MemberID{"a", "c"}, c.Joined)
	assert.Empty(t, c.Left)

	// Nothing else was queued: the next change starts from that After.
	f.reg("r", "d")
	c2 := recv(t, ch)
	assert.Equal(t, c.After, c2.Before)
	assert.Equal(t, []codec.MemberID{"d"}, c2.Joined)
	assert.False(t, c2.HolderChanged)
}

func TestWatchNeverBlocksTheView(t *testing.T) {
	v := offlineView(t, 4)
	v.markReady()
	f := &feeder{t: t, v: v}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := v.Watch(ctx) // never read until all is applied

	const roles, rounds = 50, 40
	for i := 0; i < rounds; i++ {
		for r := 0; r < roles; r++ {
			f.reg(codec.Role(fmt.Sprintf("r%d", r)), codec.MemberID(fmt.Sprintf("m%d", i)))
		}
	}
	// Whatever the subscriber took before falling behind, it ends with
	// every role's final state, and no more than that per role's backlog.
	final := map[codec.Role]rolestate.State{}
	deadline := time.After(10 * time.Second)
	for len(final) < roles || !allFinal(final, rounds) {
		select {
		case c := <-ch:
			final[c.Role] = c.After
		case <-deadline:
			t.Fatalf("watch did not converge: %d roles seen", len(final))
		}
	}
	for r, st := range final {
		assert.Len(t, st.Candidates, rounds, "role %s", r)
	}
}

func allFinal(m map[codec.Role]rolestate.State, n int) bool {
	for _, st := range m {
		if len(st.Candidates) != n {
			return false
		}
	}
	return true
}

func TestWatchClosesWhenContextEnds(t *testing.T) {
	v := offlineView(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	ch := v.Watch(ctx)
	cancel()
	select {
	case _, ok := <-ch:
		assert.False(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("watch channel not closed after its context ended")
	}
}

func TestChangeFlags(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	a1 := mkLease("a", 1, now, 10*time.Second)
	a1renewed := mkLease("a", 1, now.Add(time.Second), 10*time.Second)
	a1released := mkLease("a", 1, now.Add(2*time.Second), time.Millisecond)
	a2 := mkLease("a", 2, now, 10*time.Second)
	b1 := mkLease("b", 1, now, 10*time.Second)
	st := func(l *codec.Lease, cs ...rolestate.Candidate) rolestate.State {
		s := rolestate.State{Role: "r", LeaseOffset: -1, Lease: l, Candidates: cs}
		if l != nil {
			s.LeaseOffset = 1
		}
		return s
	}
	ca, cb, ca2 := rolestate.Candidate{Member: "a", Offset: 1}, rolestate.Candidate{Member: "b", Offset: 2}, rolestate.Candidate{Member: "a", Offset: 5}
	for _, tc := range []struct {
		name                                      string
		before, after                             rolestate.State
		holder, renewed, released, cands, changed bool
		joined, left                              []codec.MemberID
	}{
		{name: "first lease", before: st(nil), after: st(&a1), holder: true, changed: true},
		{name: "renewal", before: st(&a1), after: st(&a1renewed), renewed: true, changed: true},
		{name: "release", before: st(&a1renewed), after: st(&a1released), released: true, changed: true},
		{name: "release rewritten", before: st(&a1released), after: st(&a1released)},
		{name: "new epoch of the same member", before: st(&a1), after: st(&a2), holder: true, changed: true},
		{name: "other member", before: st(&a1released), after: st(&b1), holder: true, changed: true},
		{name: "lease deleted", before: st(&b1), after: st(nil), holder: true, released: true, changed: true},
		{name: "join", before: st(nil, ca), after: st(nil, ca, cb), cands: true, changed: true, joined: []codec.MemberID{"b"}},
		{name: "leave", before: st(nil, ca, cb), after: st(nil, cb), cands: true, changed: true, left: []codec.MemberID{"a"}},
		{name: "re-register", before: st(nil, ca, cb), after: st(nil, cb, ca2), cands: true, changed: true, joined: []codec.MemberID{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Change{Role: "r", Before: tc.before, After: tc.after}
			assert.Equal(t, tc.changed, c.diff())
			assert.Equal(t, tc.holder, c.HolderChanged, "HolderChanged")
			assert.Equal(t, tc.renewed, c.LeaseRenewed, "LeaseRenewed")
			assert.Equal(t, tc.released, c.LeaseReleased, "LeaseReleased")
			assert.Equal(t, tc.cands, c.CandidatesChanged, "CandidatesChanged")
			assert.Equal(t, tc.joined, c.Joined)
			assert.Equal(t, tc.left, c.Left)
		})
	}
}

func TestFollowSendsCurrentStateThenChanges(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	w.register("r", "a")
	v, stop := runView(t, c.Config, Options{})
	ctx := testCtx(t)
	states := v.Follow(ctx, "r")

	recvState := func() rolestate.State {
		t.Helper()
		select {
		case st, ok := <-states:
			require.True(t, ok, "follow channel closed")
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("no state sent")
			return rolestate.State{}
		}
	}
	assert.Equal(t, []codec.MemberID{"a"}, members(recvState().Candidates), "the state as of the catch-up comes first")
	w.register("r", "b")
	assert.Equal(t, []codec.MemberID{"a", "b"}, members(recvState().Candidates))

	stop()
	select {
	case _, ok := <-states:
		assert.False(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("follow channel not closed after the view stopped")
	}
}

// Several followers of one role each get every change, in the order they
// followed; one that stops gets no more, the others go on; Run's end
// ends those left.
func TestFollowNotifyManyFollowersOfARole(t *testing.T) {
	v := offlineView(t, 1)
	v.index.mu.Lock()
	v.index.readyLocked()
	v.index.mu.Unlock()
	f := &feeder{t: t, v: v}
	var order []int
	got := make([][]int, 3)
	ended := make([]bool, 3)
	stops := make([]func(), 3)
	for i := range stops {
		stops[i] = v.FollowNotify(t.Context(), "r", func(st rolestate.State, ok bool) {
			if !ok {
				ended[i] = true
				return
			}
			order = append(order, i)
			got[i] = append(got[i], len(st.Candidates))
		})
	}
	assert.Equal(t, []int{0, 1, 2}, order, "the state as of the call, in the order they followed")
	order = nil
	f.reg("r", "a")
	assert.Equal(t, []int{0, 1, 2}, order)
	stops[1]()
	stops[1]()
	assert.True(t, ended[1])
	order = nil
	f.reg("r", "b")
	assert.Equal(t, []int{0, 2}, order, "the one stopped gets no more")
	stops[0]()
	order = nil
	f.reg("r", "c")
	assert.Equal(t, []int{2}, order)
	assert.Equal(t, [][]int{{0, 1, 2}, {0, 1}, {0, 1, 2, 3}}, got)
	stops[2]()
	assert.Empty(t, v.index.follows, "no follower left")

	stop := v.FollowNotify(t.Context(), "r", func(rolestate.State, bool) {})
	v.index.mu.Lock()
	v.index.closeFollowersLocked()
	v.index.mu.Unlock()
	assert.Empty(t, v.index.follows)
	stop()
}
