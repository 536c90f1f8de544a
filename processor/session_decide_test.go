package processor

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// TestDecideJudgesALeaseByItsHoldersSession: a lease that names its
// holder's member session is live for the lease's own span from when
// this member first saw it, or for one heartbeat span from when the
// session's latest heartbeat of the same incarnation, not excluding the
// role, was seen (the source's time for it when it gives a plausible
// one, else this member's first observation), whichever ends later; a
// record that excludes the role or ends the session makes the role vacant
// at once; a heartbeat of another incarnation or an older epoch does not
// keep the lease alive.
func TestDecideJudgesALeaseByItsHoldersSession(t *testing.T) {
	s := defaults()
	sec := time.Second
	sess := codec.Session{ProducerID: 7, Epoch: 2, Nonce: "inc1"}
	lease := leaseOf("x", tok1, t0, 10*sec)
	lease.Session = &sess
	beat := func(sn codec.Session, off int64, seen time.Time, excluded ...codec.Role) *rolestate.SessionSeen {
		return &rolestate.SessionSeen{Offset: off, SeenAt: seen, Heartbeat: codec.Heartbeat{Member: "x", Session: sn,
			GrantedAt: seen.UnixMilli(), Deadline: seen.Add(10 * sec).UnixMilli(), Excluded: excluded}}
	}
	base := state(role, lease, 4, "me", 0)
	decideAt := func(st rolestate.State, now time.Time) Action {
		l := local(0).Observe(base, "me", t0) // the lease first seen at t0
		l = l.Observe(st, "me", now)
		return Decide(st, "me", l, now, s)
	}

	st := base
	st.Session = beat(sess, 1, t0.Add(8*sec))
	a := decideAt(st, t0.Add(12*sec))
	assert.Equal(t, DoWait, a.Kind, a.Reason)
	assert.Equal(t, t0.Add(18*sec), a.Until, "one heartbeat span from when the heartbeat was seen")
	assert.Equal(t, DoConfirm, decideAt(st, t0.Add(18*sec)).Kind, "and no longer")

	st.Session = beat(sess, 1, time.Time{}) // the source does not say when it saw it
	l := local(0).Observe(base, "me", t0)
	l = l.Observe(st, "me", t0.Add(9*sec)) // first observed then
	a = Decide(st, "me", l, t0.Add(12*sec), s)
	assert.Equal(t, t0.Add(19*sec), a.Until, "counted from this member's first observation")

	st.Session = beat(sess, 1, t0.Add(time.Hour)) // a time after now is not this member's clock's
	a = decideAt(st, t0.Add(9*sec))
	assert.Equal(t, t0.Add(19*sec), a.Until)

	bumped := sess
	bumped.Epoch = 5
	st.Session = beat(bumped, 1, t0.Add(8*sec))
	assert.Equal(t, DoWait, decideAt(st, t0.Add(12*sec)).Kind, "the session's epoch may move within the incarnation")

	for name, se := range map[string]*rolestate.SessionSeen{
		"another incarnation": beat(codec.Session{ProducerID: 7, Epoch: 3, Nonce: "inc2"}, 1, t0.Add(8*sec)),
		"an older epoch":      beat(codec.Session{ProducerID: 7, Epoch: 1, Nonce: "inc1"}, 1, t0.Add(8*sec)),
	} {
		st.Session = se
		assert.Equal(t, DoConfirm, decideAt(st, t0.Add(12*sec)).Kind, name)
		assert.Equal(t, DoWait, decideAt(st, t0.Add(9*sec)).Kind, name+": the lease's own span still counts")
	}

	st.Session = beat(sess, 1, t0.Add(2*sec), "other", role)
	assert.Equal(t, DoConfirm, decideAt(st, t0.Add(3*sec)).Kind, "an exclusion makes the role vacant at once")
	st.Session = &rolestate.SessionSeen{Offset: 2, SeenAt: t0.Add(2 * sec), Heartbeat: codec.Heartbeat{Member: "x", Session: sess, End: true}}
	assert.Equal(t, DoConfirm, decideAt(st, t0.Add(3*sec)).Kind, "so does the session end")
	st.Session = beat(sess, 1, t0.Add(2*sec), "other")
	assert.Equal(t, DoWait, decideAt(st, t0.Add(3*sec)).Kind, "another role's exclusion")
}

// A vacancy's order: a holder that died (its lease ran out while its
// session still claimed the role) leaves the role to the candidates in
// SplitScore order, so that a dead member's roles are split among its
// survivors; a holder that let go (a release, or a session record that
// drops the role) leaves it to the next in join order. Here "y" joined
// after "me" and has the higher split score.
func TestTurnSplitsOnlyADeadHoldersRoles(t *testing.T) {
	require.Greater(t, SplitScore(role, "y"), SplitScore(role, "me"))
	sess := codec.Session{ProducerID: 7, Epoch: 2, Nonce: "inc1"}
	lease := leaseOf("x", tok1, t0, 10*time.Second)
	lease.Session = &sess
	st := state(role, lease, 4, "x", 1, "me", 2, "y", 3)
	st.Session = &rolestate.SessionSeen{Offset: 1, Heartbeat: codec.Heartbeat{Member: "x", Session: sess}}

	ahead, prune := NewLocal().turn(st, "me")
	assert.Equal(t, []codec.MemberID{"y"}, ahead, "died: split order")
	assert.ElementsMatch(t, []codec.MemberID{"x", "y"}, prune)
	ahead, _ = NewLocal().turn(st, "y")
	assert.Empty(t, ahead, "died: y first")

	st.Session.Heartbeat.End = true
	ahead, _ = NewLocal().turn(st, "me")
	assert.Empty(t, ahead, "its session ended: join order")
	ahead, _ = NewLocal().turn(st, "y")
	assert.Equal(t, []codec.MemberID{"me"}, ahead)

	r := codec.ReleaseLease("x", tok1)
	st = state(role, &r, 6, "x", 1, "me", 2, "y", 3)
	ahead, _ = NewLocal().turn(st, "me")
	assert.Empty(t, ahead, "released: join order")
}

// Every member computes the same split, and it spreads a member's roles
// over its survivors: no survivor's share of 3,000 roles is far from a
// third.
func TestSplitScoreSpreadsRoles(t *testing.T) {
	members := []codec.MemberID{"node-1", "node-2", "node-3"}
	won := map[codec.MemberID]int{}
	for i := range 3000 {
		r := codec.Role(fmt.Sprintf("shard-%d", i))
		best := members[0]
		for _, m := range members[1:] {
			if SplitScore(r, m) > SplitScore(r, best) {
				best = m
			}
		}
		won[best]++
	}
	for _, m := range members {
		assert.InDelta(t, 1000, won[m], 100, "%s's share: %v", m, won)
	}
}
