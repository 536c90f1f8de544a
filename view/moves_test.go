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

// A move's cause, from how the previous holding ended and when the new
// holder joined.
func TestClassifyMove(t *testing.T) {
	joined := joinMark{since: 10_000, span: 3 * time.Second}
	for _, c := range []struct {
		name string
		f    moveFacts
		want group.MoveCause
	}{
		{"no previous holder", moveFacts{}, group.MoveJoin},
		{"released to drain", moveFacts{hadPrev: true, released: true, cause: codec.CauseDrain, at: 11_000, join: joined}, group.MoveDrain},
		{"released to leave", moveFacts{hadPrev: true, released: true, cause: codec.CauseLeave, at: 11_000, join: joined}, group.MoveLeave},
		{"rebalanced to a member that joined a lease before", moveFacts{hadPrev: true, released: true, cause: codec.CauseRebalance, at: 13_000, join: joined}, group.MoveJoin},
		{"rebalanced to a member that joined longer ago", moveFacts{hadPrev: true, released: true, cause: codec.CauseRebalance, at: 13_001, join: joined}, group.MoveRebalance},
		{"rebalanced to a member whose join is not known", moveFacts{hadPrev: true, released: true, cause: codec.CauseRebalance, at: 11_000}, group.MoveRebalance},
		{"rebalanced by a clock behind the join", moveFacts{hadPrev: true, released: true, cause: codec.CauseRebalance, at: 9_999, join: joined}, group.MoveRebalance},
		{"rebalanced while the heartbeat says drain", moveFacts{hadPrev: true, released: true, cause: codec.CauseRebalance, fromDraining: true, at: 20_000}, group.MoveRebalance},
		{"no cause, the holder drains", moveFacts{hadPrev: true, released: true, fromDraining: true, at: 11_000, join: joined}, group.MoveDrain},
		{"no cause, to a joiner", moveFacts{hadPrev: true, released: true, at: 11_000, join: joined}, group.MoveJoin},
		{"no cause", moveFacts{hadPrev: true, released: true, at: 20_000, join: joined}, group.MoveRebalance},
		{"a newer writer's cause, the holder drains", moveFacts{hadPrev: true, released: true, cause: "newer_cause", fromDraining: true}, group.MoveDrain},
		{"session ended", moveFacts{hadPrev: true, sessionEnded: true, at: 11_000, join: joined}, group.MoveLeave},
		{"lease ran out", moveFacts{hadPrev: true, at: 11_000, join: joined}, group.MoveFailover},
	} {
		assert.Equal(t, c.want, classifyMove(c.f), c.name)
	}
}

// A member's join is the first heartbeat of its incarnation that does
// not drain after one that does; a member first read not draining joined
// before the view read it.
func TestJoinMarks(t *testing.T) {
	ix := newIndex(time.Now)
	s1 := codec.Session{ProducerID: 1, Nonce: "n1"}
	beat := func(m codec.MemberID, s codec.Session, at int64, drain bool) {
		ix.markBeatLocked(m, codec.Heartbeat{Member: m, Session: s, GrantedAt: at, Deadline: at + 3000, Group: "shards", Drain: drain})
	}
	beat("a", s1, 100, true)
	beat("a", s1, 200, true)
	assert.Zero(t, ix.moves.joins["a"].since, "warming up")
	beat("a", s1, 300, false)
	beat("a", s1, 400, false)
	beat("a", s1, 500, true) // drains: still joined at 300
	assert.Equal(t, joinMark{nonce: "n1", group: "shards", since: 300, span: 3 * time.Second}, ix.moves.joins["a"])

	beat("b", s1, 100, false)
	beat("b", s1, 200, false)
	assert.Zero(t, ix.moves.joins["b"].since, "joined before the view read it")

	s2 := codec.Session{ProducerID: 1, Nonce: "n2"}
	beat("a", s2, 900, true)
	beat("a", s2, 1000, false)
	assert.EqualValues(t, 1000, ix.moves.joins["a"].since, "a new incarnation joins again")
	ix.markBeatLocked("a", codec.Heartbeat{Member: "a", Session: s2, End: true})
	assert.NotContains(t, ix.moves.joins, codec.MemberID("a"), "its session ended")
}

// The log keeps the last MaxMoves, oldest first.
func TestMoveLogBound(t *testing.T) {
	var ml moveLog
	for i := range MaxMoves + 5 {
		ml.add(moveRec{Move: group.Move{Offset: int64(i)}})
	}
	require.Len(t, ml.moves, MaxMoves)
	assert.EqualValues(t, 5, ml.at(0).Offset)
	assert.EqualValues(t, MaxMoves+4, ml.at(MaxMoves-1).Offset)
}

// On the embedded cluster: the view records each change of holder of a
// group's roles with its cause (join, rebalance, drain by the release's
// cause or by the holder's heartbeat, leave by the release or by a
// session end read before or after the move, failover), how long the
// role was unheld on the view's clock where it saw both ends, and not
// the moves of a role of no group.
func TestGroupMovesIntegration(t *testing.T) {
	const nparts = 4
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	tr := c.Transport(t)
	clk := &manualClock{}
	t0 := time.Unix(10_000, 0)
	clk.set(t0)
	v, _ := runView(t, c.Config, Options{Clock: clk.now, Authors: rolestate.NewAuthors(), Describe: tr.Describe})
	ctx := testCtx(t)
	require.NoError(t, v.WaitCaughtUp(ctx))
	const span = 3 * time.Second

	sessions := map[codec.MemberID]codec.Session{}
	joinedAt := map[codec.MemberID]int64{}
	beat := func(m codec.MemberID, name string, drain bool) {
		t.Helper()
		s, ok := sessions[m]
		if !ok {
			var err error
			s, err = tr.StartSession(ctx, m, "inc1")
			require.NoError(t, err)
			sessions[m] = s
		}
		hb := sessionBeat(s, m, span)
		hb.Group, hb.Drain = name, drain
		require.NoError(t, tr.Heartbeat(ctx, hb))
		if _, ok := joinedAt[m]; !ok && !drain {
			joinedAt[m] = hb.GrantedAt
		}
	}
	join := func(m codec.MemberID, name string) {
		t.Helper()
		beat(m, name, true) // warming up
		// Read before the next: of a member's heartbeats waiting for their
		// author's verdict, only the latest is kept.
		require.NoError(t, v.WaitCaughtUp(ctx))
		beat(m, name, false)
	}
	toks := map[codec.Role]codec.Token{}
	// take writes m's lease of role, granted at at (0: now).
	take := func(role codec.Role, m codec.MemberID, at int64) {
		t.Helper()
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		toks[role] = tok
		l := sessionLease(tok, sessions[m], m, span)
		if at != 0 {
			l.GrantedAt, l.Deadline = at, at+span.Milliseconds()
		}
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l)))
	}
	release := func(role codec.Role, m codec.MemberID, cause codec.Cause) {
		t.Helper()
		rel := codec.ReleaseLease(m, toks[role])
		rel.Cause = cause
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, toks[role], rel)))
	}
	settle := func(at time.Duration) {
		t.Helper()
		require.NoError(t, v.WaitCaughtUp(ctx))
		clk.set(t0.Add(at))
	}

	join("a", "shards")
	join("b", "shards")
	join("d", "shards")
	beat("x", "", false)
	beat("y", "", false)
	// Read before any lease: a lease read before its holder's heartbeat
	// is of a group not known yet, and is kept until it is.
	require.NoError(t, v.WaitCaughtUp(ctx))
	for _, r := range []codec.Role{"r1", "r2", "r3", "r4", "r5"} {
		take(r, "a", 0) // joins, nobody held them
	}
	take("r6", "d", 0)
	take("n1", "x", 0) // a role of no group
	settle(time.Second)

	release("r1", "a", codec.CauseRebalance)
	settle(1250 * time.Millisecond)
	take("r1", "b", joinedAt["b"]+span.Milliseconds()) // b joined a lease before: a join
	release("r2", "a", codec.CauseRebalance)
	settle(1500 * time.Millisecond)
	take("r2", "b", joinedAt["b"]+2*span.Milliseconds()) // a rebalance
	release("r3", "a", codec.CauseDrain)
	settle(1600 * time.Millisecond)
	take("r3", "b", 0)
	beat("d", "shards", true)
	release("r6", "d", "") // an older writer's release: its heartbeat says it drains
	settle(1700 * time.Millisecond)
	take("r6", "b", 0)
	take("n1", "y", 0)
	// a's lease of r4, seen at t0 with a's heartbeat, ran out at t0+span.
	settle(5 * time.Second)
	take("r4", "b", 0)
	settle(5 * time.Second) // a failover, until the session end below is read
	moves, err := v.GroupMoves(ctx, "shards")
	require.NoError(t, err)
	failover := 0
	for _, m := range moves {
		if m.Role == "r4" && m.From == "a" {
			failover++
			assert.Equal(t, group.MoveFailover, m.Cause)
		}
	}
	assert.Equal(t, 1, failover)
	require.NoError(t, tr.Heartbeat(ctx, codec.Heartbeat{Member: "a", Session: sessions["a"], End: true}))
	settle(5100 * time.Millisecond)
	take("r5", "b", 0) // after a's session end: a leave

	require.NoError(t, v.WaitCaughtUp(ctx))
	moves, err = v.GroupMoves(ctx, "shards")
	require.NoError(t, err)
	type got struct {
		Role     codec.Role
		From, To codec.MemberID
		Cause    group.MoveCause
		Unheld   time.Duration
	}
	var gots []got
	for _, m := range moves {
		assert.Equal(t, "shards", m.Group)
		assert.Positive(t, m.At, "%s: the new lease's GrantedAt", m.Role)
		assert.GreaterOrEqual(t, m.Offset, int64(0), m.Role)
		gots = append(gots, got{m.Role, m.From, m.To, m.Cause, m.Unheld})
	}
	assert.ElementsMatch(t, []got{
		{"r1", "", "a", group.MoveJoin, -1},
		{"r2", "", "a", group.MoveJoin, -1},
		{"r3", "", "a", group.MoveJoin, -1},
		{"r4", "", "a", group.MoveJoin, -1},
		{"r5", "", "a", group.MoveJoin, -1},
		{"r6", "", "d", group.MoveJoin, -1},
		{"r1", "a", "b", group.MoveJoin, 250 * time.Millisecond},
		{"r2", "a", "b", group.MoveRebalance, 250 * time.Millisecond},
		{"r3", "a", "b", group.MoveDrain, 100 * time.Millisecond},
		{"r6", "d", "b", group.MoveDrain, 100 * time.Millisecond},
		{"r4", "a", "b", group.MoveLeave, 2 * time.Second},
		{"r5", "a", "b", group.MoveLeave, 100 * time.Millisecond},
	}, gots)
	for i := 1; i < len(moves); i++ {
		assert.LessOrEqual(t, moves[i-1].At, moves[i].At, "in the order of their grants")
	}

	other, err := v.GroupMoves(ctx, "nosuch")
	require.NoError(t, err)
	assert.Empty(t, other)
	v.index.mu.RLock()
	for i := range v.index.moves.moves {
		assert.NotEqual(t, codec.Role("n1"), v.index.moves.at(i).Role, "a role of no group is not recorded")
	}
	v.index.mu.RUnlock()
}

// A view that reads the same records on its first catch-up finds the
// same moves, each in its group, however its partitions' records
// interleave; it saw neither end of any, so none has an Unheld.
func TestGroupMovesOnCatchUp(t *testing.T) {
	const nparts = 4
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	tr := c.Transport(t)
	ctx := testCtx(t)
	const span = 3 * time.Second
	sessions := map[codec.MemberID]codec.Session{}
	for _, m := range []codec.MemberID{"a", "b"} {
		s, err := tr.StartSession(ctx, m, "inc1")
		require.NoError(t, err)
		sessions[m] = s
		hb := sessionBeat(s, m, span)
		hb.Group = "shards"
		require.NoError(t, tr.Heartbeat(ctx, hb))
	}
	type move struct {
		Role     codec.Role
		From, To codec.MemberID
	}
	var want []move
	for _, r := range []codec.Role{"r1", "r2", "r3", "r4"} {
		tok, err := tr.AcquireEpoch(ctx, r)
		require.NoError(t, err)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, r, tok, sessionLease(tok, sessions["a"], "a", span))))
		rel := codec.ReleaseLease("a", tok)
		rel.Cause = codec.CauseDrain
		require.NoError(t, leaseErr(tr.WriteLease(ctx, r, tok, rel)))
		tok, err = tr.AcquireEpoch(ctx, r)
		require.NoError(t, err)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, r, tok, sessionLease(tok, sessions["b"], "b", span))))
		want = append(want, move{r, "", "a"}, move{r, "a", "b"})
	}

	v, _ := runView(t, c.Config, Options{Authors: rolestate.NewAuthors(), Describe: tr.Describe})
	require.NoError(t, v.WaitCaughtUp(ctx))
	moves, err := v.GroupMoves(ctx, "shards")
	require.NoError(t, err)
	var got []move
	for _, m := range moves {
		got = append(got, move{m.Role, m.From, m.To})
		assert.Negative(t, m.Unheld, "%s: read before the view caught up", m.Role)
		if m.From == "a" {
			assert.Equal(t, group.MoveDrain, m.Cause, "%s: the release says drain", m.Role)
		}
	}
	assert.ElementsMatch(t, want, got)
}
