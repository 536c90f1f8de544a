package group

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

func roles(n int) []codec.Role {
	rs := make([]codec.Role, n)
	for i := range rs {
		rs[i] = codec.Role(fmt.Sprintf("shard-%d", i))
	}
	return rs
}

func members(n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: codec.MemberID(fmt.Sprintf("node-%d", i)), Weight: 1}
	}
	return ms
}

func counts(owner map[codec.Role]codec.MemberID) map[codec.MemberID]int {
	c := map[codec.MemberID]int{}
	for _, m := range owner {
		c[m]++
	}
	return c
}

func moved(before, after map[codec.Role]codec.MemberID) int {
	n := 0
	for r, m := range after {
		if before[r] != m {
			n++
		}
	}
	return n
}

func TestShares(t *testing.T) {
	ms := []Member{{"a", 1}, {"b", 2}, {"c", 1}, {"d", 0}}
	assert.Equal(t, map[codec.MemberID]int{"a": 3, "b": 5, "c": 3, "d": 0}, Shares(ms, 10, 0), "ceil of each weight's fraction")
	assert.Equal(t, map[codec.MemberID]int{"a": 1, "b": 1, "c": 1, "d": 0}, Shares(ms, 10, 1), "a semaphore: one slot each at most")
	assert.Equal(t, map[codec.MemberID]int{"a": 0, "b": 0, "c": 0, "d": 0}, Shares(ms, 0, 0))
}

func TestAssignFromScratchIsBalanced(t *testing.T) {
	rs, ms := roles(10_000), members(10)
	owner := Assign(rs, nil, ms, 0)
	require.Len(t, owner, len(rs), "every role has an owner")
	for m, n := range counts(owner) {
		assert.Equal(t, 1000, n, "%s: max/mean 1.0", m)
	}
}

// Members holding what Assign says are told to keep it: no oscillation.
func TestAssignIsAFixedPoint(t *testing.T) {
	rs := roles(1000)
	for _, n := range []int{1, 3, 7, 10} {
		ms := members(n)
		a := Assign(rs, nil, ms, 0)
		assert.Equal(t, a, Assign(rs, a, ms, 0), "%d members", n)
	}
}

// The first member to start holds everything; as the others join, it
// keeps its share and each move goes to a member below its share.
func TestAssignTakesFromTheOneThatHoldsEverything(t *testing.T) {
	rs := roles(1000)
	all := map[codec.Role]codec.MemberID{}
	for _, r := range rs {
		all[r] = "node-0"
	}
	owner := Assign(rs, all, members(4), 0)
	for m, n := range counts(owner) {
		assert.Equal(t, 250, n, m)
	}
	assert.Equal(t, 750, moved(all, owner), "only what node-0 holds above its share moves")
}

// A member that joins takes about its share, and nothing else moves.
func TestAssignJoinMovesAboutAShare(t *testing.T) {
	rs := roles(10_000)
	before := Assign(rs, nil, members(10), 0)
	after := Assign(rs, before, members(11), 0)
	n := moved(before, after)
	assert.LessOrEqual(t, n, (10_000+10)/11+100, "at most ceil(K/M) + 1%% move")
	for r, m := range after {
		if before[r] != m {
			assert.Equal(t, codec.MemberID("node-10"), m, "%s moved to a member that did not join", r)
		}
	}
	for m, c := range counts(after) {
		assert.LessOrEqual(t, c, (10_000+10)/11, m)
	}
}

// A member that leaves moves its own roles only, spread over the others.
func TestAssignLeaveMovesOnlyTheLeaversRoles(t *testing.T) {
	rs := roles(10_000)
	before := Assign(rs, nil, members(10), 0)
	after := Assign(rs, before, members(9), 0)
	for r, m := range after {
		if before[r] != "node-9" {
			assert.Equal(t, before[r], m, "%s moved, though its holder stayed", r)
		}
	}
	c := counts(after)
	assert.NotContains(t, c, codec.MemberID("node-9"))
	for m, n := range c {
		assert.LessOrEqual(t, n, (10_000+8)/9, m)
		assert.GreaterOrEqual(t, n, 1000, "%s lost a role it held", m)
	}
}

// Every member computes the same owners, whatever order it lists the
// roles, holders and members in.
func TestAssignIgnoresInputOrder(t *testing.T) {
	rs, ms := roles(500), members(6)
	base := Assign(rs[:300], nil, ms[:4], 0)
	want := Assign(rs, base, ms, 0)
	for i := range 20 {
		r2, m2 := append([]codec.Role(nil), rs...), append([]Member(nil), ms...)
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		rng.Shuffle(len(r2), func(a, b int) { r2[a], r2[b] = r2[b], r2[a] })
		rng.Shuffle(len(m2), func(a, b int) { m2[a], m2[b] = m2[b], m2[a] })
		assert.Equal(t, want, Assign(r2, base, m2, 0))
	}
}

func TestAssignWeights(t *testing.T) {
	rs := roles(1200)
	ms := []Member{{"a", 1}, {"b", 2}, {"c", 3}}
	c := counts(Assign(rs, nil, ms, 0))
	assert.Equal(t, map[codec.MemberID]int{"a": 200, "b": 400, "c": 600}, c)
}

// N slots of a semaphore are N roles with one slot per member at most.
func TestAssignSemaphore(t *testing.T) {
	slots := roles(3)
	owner := Assign(slots, nil, members(5), 1)
	require.Len(t, owner, 3)
	for m, n := range counts(owner) {
		assert.Equal(t, 1, n, m)
	}
	// Two members for three slots: one slot stays free.
	assert.Len(t, Assign(slots, nil, members(2), 1), 2)
	// A holder of two slots (after a view lagged) keeps one.
	held := map[codec.Role]codec.MemberID{slots[0]: "node-0", slots[1]: "node-0"}
	assert.Equal(t, 1, counts(Assign(slots, held, members(2), 1))["node-0"])
}

// Holders that are not live members hold nothing in the assignment.
func TestAssignIgnoresHoldersThatLeft(t *testing.T) {
	rs := roles(10)
	held := map[codec.Role]codec.MemberID{}
	for _, r := range rs {
		held[r] = "gone"
	}
	owner := Assign(rs, held, members(2), 0)
	assert.Equal(t, map[codec.MemberID]int{"node-0": 5, "node-1": 5}, counts(owner))
}

func TestExpand(t *testing.T) {
	rs, err := Expand("shard-{0..1023}")
	require.NoError(t, err)
	assert.Len(t, rs, 1024)
	assert.Equal(t, codec.Role("shard-0"), rs[0])
	assert.Equal(t, codec.Role("shard-1023"), rs[1023])
	rs, err = Expand("s{008..010}.db")
	require.NoError(t, err)
	assert.Equal(t, []codec.Role{"s008.db", "s009.db", "s010.db"}, rs)
	rs, err = Expand("controller")
	require.NoError(t, err)
	assert.Equal(t, []codec.Role{"controller"}, rs)
	for pattern, msg := range map[string]string{
		"shard-{0..":      "without '}'",
		"shard-{a..b}":    "whole numbers",
		"shard-{5..1}":    "backwards",
		"s{0..1}-{0..1}":  "at most one",
		"s{0..2000000}":   "more than",
		"bad name {0..1}": "role",
		"shard-{0...1}":   "whole numbers",
	} {
		_, err := Expand(pattern)
		assert.ErrorContains(t, err, msg, pattern)
	}
}

func BenchmarkAssign(b *testing.B) {
	rs, ms := roles(10_000), members(10)
	held := Assign(rs, nil, ms, 0)
	b.ReportAllocs()
	for b.Loop() {
		Assign(rs, held, ms, 0)
	}
}

// A rolling restart from a group grown one member at a time: each member
// drains (its roles go to the others), leaves and comes back under its
// id. Knowing since when each role is held, the others hand back the
// roles they took last, its own, so its caches stay warm. (Without
// since, it takes back about a quarter.)
func TestAssignSinceRestartTakesBackItsRoles(t *testing.T) {
	rs, ms := roles(1000), members(10)
	holders, since := map[codec.Role]codec.MemberID{}, map[codec.Role]int64{}
	clock := int64(0)
	apply := func(owner map[codec.Role]codec.MemberID) {
		clock++
		for r, m := range owner {
			if holders[r] != m {
				since[r] = clock
			}
		}
		holders = owner
	}
	for i := range ms {
		apply(AssignSince(rs, holders, since, ms[:i+1], 0))
	}
	back, held := 0, 0
	for i := range ms {
		before := holders
		drained := append([]Member(nil), ms...)
		drained[i].Weight = 0
		apply(AssignSince(rs, holders, since, drained, 0))
		apply(AssignSince(rs, holders, since, ms, 0))
		for r, m := range before {
			if m == ms[i].ID {
				held++
				if holders[r] == m {
					back++
				}
			}
		}
	}
	t.Logf("took back %d of %d", back, held)
	assert.GreaterOrEqual(t, back*10, held*9, "a restarted member takes back at least 90%% of its roles")
}
