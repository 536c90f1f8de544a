package view

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// Groups lists every group with a live member, each member as
// GroupMembers judges it: a draining member has weight 0, a member of no
// group, one whose session ended and one whose heartbeat ran out are in
// none; the groups agree with GroupMembers of each name.
func TestGroupsListsTheLiveMembersOfEachGroup(t *testing.T) {
	const nparts = 4
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	tr := c.Transport(t)
	clk := &manualClock{}
	t0 := time.Unix(10_000, 0)
	clk.set(t0)
	v, _ := runView(t, c.Config, Options{Clock: clk.now, Authors: rolestate.NewAuthors(), Describe: tr.Describe})
	ctx := testCtx(t)
	const span = 3 * time.Second

	sessions := map[codec.MemberID]codec.Session{}
	beat := func(member codec.MemberID, name string, weight int, drain bool) {
		t.Helper()
		s, ok := sessions[member]
		if !ok {
			var err error
			s, err = tr.StartSession(ctx, member, "inc1")
			require.NoError(t, err)
			sessions[member] = s
		}
		hb := sessionBeat(s, member, span)
		hb.Group, hb.Weight, hb.Drain = name, weight, drain
		require.NoError(t, tr.Heartbeat(ctx, hb))
	}
	beat("a", "shards", 2, false)
	beat("b", "shards", 0, false) // 0 counts as 1
	beat("c", "shards", 3, true)  // draining: 0
	beat("d", "other", 1, false)
	beat("e", "", 1, false) // in no group
	beat("f", "shards", 1, false)
	require.NoError(t, tr.Heartbeat(ctx, codec.Heartbeat{Member: "f", Session: sessions["f"], End: true}))
	require.NoError(t, v.WaitCaughtUp(ctx))

	shards := []group.Member{{ID: "a", Weight: 2}, {ID: "b", Weight: 1}, {ID: "c", Weight: 0}}
	other := []group.Member{{ID: "d", Weight: 1}}
	at := t0.Add(time.Second)
	gs, err := v.Groups(ctx, at)
	require.NoError(t, err)
	assert.Equal(t, map[string][]group.Member{"shards": shards, "other": other}, gs)
	for name, want := range map[string][]group.Member{"shards": shards, "other": other, "nosuch": nil} {
		got, err := v.GroupMembers(ctx, name, at)
		require.NoError(t, err)
		assert.Equal(t, want, got, "GroupMembers(%q)", name)
	}
	gs, err = v.Groups(ctx, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, map[string][]group.Member{"shards": shards, "other": other}, gs, "zero now: the view's clock, t0")

	// a beats again at t0+2s; the others' heartbeats, seen at t0, run
	// out half a span after, at t0+1.5s, and a group with no live member is
	// not listed.
	clk.set(t0.Add(2 * time.Second))
	beat("a", "shards", 2, false)
	require.NoError(t, v.WaitCaughtUp(ctx))
	gs, err = v.Groups(ctx, t0.Add(span))
	require.NoError(t, err)
	assert.Equal(t, map[string][]group.Member{"shards": {{ID: "a", Weight: 2}}}, gs)
	gs, err = v.Groups(ctx, t0.Add(2*time.Second+span))
	require.NoError(t, err)
	assert.Empty(t, gs, "every heartbeat ran out")
}

// A view that starts after a member died reads its last heartbeat on the
// first catch-up as if just seen; it counts that member only until half a
// span after it caught up, unless the member beats again. A member that
// beats on stays.
func TestGroupMembersDropsAMemberDeadBeforeTheViewStarted(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	tr := c.Transport(t)
	ctx := testCtx(t)
	const span = 3 * time.Second
	beat := func(member codec.MemberID, s codec.Session) {
		t.Helper()
		hb := sessionBeat(s, member, span)
		hb.Group = "shards"
		require.NoError(t, tr.Heartbeat(ctx, hb))
	}
	sessions := map[codec.MemberID]codec.Session{}
	for _, m := range []codec.MemberID{"dead", "live"} {
		s, err := tr.StartSession(ctx, m, "inc1")
		require.NoError(t, err)
		sessions[m] = s
		beat(m, s)
	}

	clk := &manualClock{}
	t0 := time.Unix(10_000, 0)
	clk.set(t0)
	v, _ := runView(t, c.Config, Options{Clock: clk.now, Authors: rolestate.NewAuthors(), Describe: tr.Describe})
	require.NoError(t, v.WaitCaughtUp(ctx))
	both := []group.Member{{ID: "dead", Weight: 1}, {ID: "live", Weight: 1}}
	got, err := v.GroupMembers(ctx, "shards", t0.Add(span/2-time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, both, got, "both count until half a span after the first catch-up")

	clk.set(t0.Add(time.Second))
	beat("live", sessions["live"])
	require.NoError(t, v.WaitCaughtUp(ctx))
	got, err = v.GroupMembers(ctx, "shards", t0.Add(span/2))
	require.NoError(t, err)
	assert.Equal(t, []group.Member{{ID: "live", Weight: 1}}, got, "the member that did not beat again is dropped")
}
