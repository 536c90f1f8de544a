package processor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// counts returns how many of roles each member holds by the recorded
// events, and false when a role has other than one holder.
func (r *recorder) counts(roles []codec.Role) (map[codec.MemberID]int, bool) {
	out := map[codec.MemberID]int{}
	ok := true
	for _, role := range roles {
		hs := r.holders(role)
		if len(hs) != 1 {
			ok = false
		}
		for m := range hs {
			out[m]++
		}
	}
	return out, ok
}

// A group spreads over its members: the first takes every role; members
// that join take their shares, each role moved once by a handover; a
// member that leaves has its roles split between the others, and no
// other role moves; a drained member hands every role over before it
// leaves. The broker's fence never sees two holders of one token.
func TestIntegrationGroupBalances(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	roles := groupRoles(24)
	s := itSettings()
	g := processor.Group{Name: "shards"}

	a := e.start("node-a", roles, s, nil, inGroup(g))
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": 24}, 20*time.Second)

	joined := time.Now()
	b := e.start("node-b", roles, s, nil, inGroup(g))
	c := e.start("node-c", roles, s, nil, inGroup(g))
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": 8, "node-b": 8, "node-c": 8}, 20*time.Second)
	handed := e.rec.since(processor.Revoked, joined, func(ev stamped) bool { return ev.Reason == processor.ReasonHandedOver })
	assert.Equal(t, map[codec.MemberID]int{"node-a": 16}, handed, "node-a hands over the joiners' shares, each once")
	elected := e.rec.since(processor.Elected, joined, nil)
	assert.Equal(t, map[codec.MemberID]int{"node-b": 8, "node-c": 8}, elected, "each moved role is won once")

	left := time.Now()
	c.stop(t)()
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": 12, "node-b": 12}, 20*time.Second)
	moved := e.rec.since(processor.Revoked, left, func(ev stamped) bool { return ev.Member != "node-c" })
	assert.Empty(t, moved, "no role of the survivors moves when a member leaves")
	assert.Equal(t, map[codec.MemberID]int{"node-a": 4, "node-b": 4}, e.rec.since(processor.Elected, left, nil),
		"the leaver's roles are split, each won once")

	require.NoError(t, b.m.Drain(e.ctx(20*time.Second)))
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": 24}, 20*time.Second)
	_ = a
	e.rec.checkFence(t)
}

// A semaphore: a group of N roles whose members hold one each. Five
// members over three slots: three hold one slot each, and the slots of a
// member that leaves go to those waiting, never two to one member.
func TestIntegrationGroupSemaphore(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	roles := groupRoles(3)
	s := itSettings()
	g := processor.Group{Name: "slots", Limit: 1}
	nodes := map[codec.MemberID]*node{}
	for _, id := range []codec.MemberID{"node-a", "node-b", "node-c", "node-d", "node-e"} {
		nodes[id] = e.start(id, roles, s, nil, inGroup(g))
	}
	atMostOne := func() map[codec.MemberID]int {
		got, _ := e.rec.counts(roles)
		for m, n := range got {
			assert.LessOrEqual(t, n, 1, "%s holds more than one slot", m)
		}
		return got
	}
	await(t, 20*time.Second, "three slots held", func() bool {
		got, ok := e.rec.counts(roles)
		return ok && len(got) == 3
	})
	first := atMostOne()
	for m := range first {
		nodes[m].stop(t)()
		break
	}
	await(t, 20*time.Second, "three slots held again", func() bool {
		got, ok := e.rec.counts(roles)
		return ok && len(got) == 3
	})
	atMostOne()
	assert.Equal(t, 1, e.rec.mostHeldAtOnce(), "no member ever held two slots at once")
	e.rec.checkFence(t)
}

// logRole logs the events recorded for role, for a failure's evidence.
func (r *recorder) logRole(t *testing.T, role codec.Role) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Role == role {
			t.Logf("%s %s %s %s token %s %s", e.Got.Format("15:04:05.000"), role, e.Member, e.Kind, e.Token, e.Reason)
		}
	}
}

// mostHeldAtOnce returns the most roles any one member held at once, by
// the events in the order the members reported them.
func (r *recorder) mostHeldAtOnce() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	held, most := map[codec.MemberID]int{}, 0
	for _, e := range r.events {
		switch e.Kind {
		case processor.Elected:
			held[e.Member]++
			most = max(most, held[e.Member])
		case processor.Revoked:
			held[e.Member]--
		}
	}
	return most
}

// A member that dies holding its share (no release: its leases run out)
// has its roles split between the survivors, each role won once, and no
// other role moves.
func TestIntegrationGroupMemberDies(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	roles := groupRoles(24)
	s := itSettings()
	dies := s
	dies.KeepOnExit = true
	_, _, c := e.groupOfThree(roles, s, dies)

	died := time.Now()
	c.stop(t)()
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": 12, "node-b": 12}, s.LeaseDuration+20*time.Second)
	moved := e.rec.since(processor.Revoked, died, func(ev stamped) bool { return ev.Member != "node-c" })
	assert.Empty(t, moved, "no role of the survivors moves when a member dies")
	assert.Equal(t, map[codec.MemberID]int{"node-a": 4, "node-b": 4}, e.rec.since(processor.Elected, died, nil),
		"the dead member's roles are split, each won once")
	e.rec.checkFence(t)
}

// A member that dies without leaving stays in the plans for half its
// heartbeat's span. The roles a drained member hands it meanwhile, and
// its own, are taken by the survivor, each once: the survivor does not
// hand them to the dead owner again and again. (A role the survivor held
// from before may go to the dead owner once, and comes back.)
func TestIntegrationGroupDeadOwner(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	roles := groupRoles(24)
	s := itSettings()
	dies := s
	dies.KeepOnExit = true
	a, _, c := e.groupOfThree(roles, s, dies)
	moving := map[codec.Role]bool{} // node-a's and node-c's
	for _, role := range roles {
		hs := e.rec.holders(role)
		_, byA := hs["node-a"]
		_, byC := hs["node-c"]
		moving[role] = byA || byC
	}

	died := time.Now()
	c.stop(t)()
	require.NoError(t, a.m.Drain(e.ctx(20*time.Second)))
	e.awaitCounts(roles, map[codec.MemberID]int{"node-b": 24}, s.LeaseDuration+20*time.Second)
	won := map[codec.Role]int{}
	e.rec.mu.Lock()
	for _, ev := range e.rec.events {
		if ev.Kind == processor.Elected && ev.Got.After(died) {
			won[ev.Role]++
		}
	}
	e.rec.mu.Unlock()
	for _, role := range roles {
		switch {
		case moving[role]:
			assert.Equal(t, 1, won[role], "%s, node-a's or node-c's, won %d times", role, won[role])
		default:
			assert.LessOrEqual(t, won[role], 1, "%s, node-b's, won %d times", role, won[role])
		}
	}
	e.rec.checkFence(t)
}

// A member cut off the cluster, both ways, while it runs on: its roles
// go to the survivors once their leases run out, each won once, and no
// other role moves; when the partition heals, the group rebalances with
// it again. The broker's fence holds throughout.
func TestIntegrationGroupPartitionedMember(t *testing.T) {
	e := newEnv(t, itTxnTimeout, withFaults(), withBrokers(3))
	roles := groupRoles(24)
	s := itSettings()
	e.groupOfThree(roles, s, s, ownClientID())

	cutAt := time.Now()
	heal := cut(t, e.fn, "node-c")
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": 12, "node-b": 12}, s.LeaseDuration+20*time.Second)
	assert.Empty(t, e.rec.since(processor.Revoked, cutAt, func(ev stamped) bool { return ev.Member != "node-c" }),
		"no role of the survivors moves")
	assert.Equal(t, map[codec.MemberID]int{"node-a": 4, "node-b": 4}, e.rec.since(processor.Elected, cutAt, nil),
		"the cut-off member's roles are split, each won once")

	heal()
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": 8, "node-b": 8, "node-c": 8}, 30*time.Second)
	e.rec.checkFence(t)
}

// A rolling restart: each member in turn drains, stops and starts again,
// and the group rebalances before the next. Read back through another
// client, every role passed from holder to holder by a release or its
// session dropping it: no role waited for a lease to run out.
func TestIntegrationGroupRollingRestart(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	roles := groupRoles(24)
	s := itSettings()
	g := processor.Group{Name: "shards"}
	ids := []codec.MemberID{"node-a", "node-b", "node-c"}
	nodes := map[codec.MemberID]*node{}
	for _, id := range ids {
		nodes[id] = e.start(id, roles, s, nil, inGroup(g))
	}
	balanced := map[codec.MemberID]int{"node-a": 8, "node-b": 8, "node-c": 8}
	e.awaitCounts(roles, balanced, 20*time.Second)
	for _, id := range ids {
		require.NoError(t, nodes[id].m.Drain(e.ctx(20*time.Second)), "draining %s", id)
		nodes[id].stop(t)()
		nodes[id] = e.start(id, roles, s, nil, inGroup(g))
		e.awaitCounts(roles, balanced, 20*time.Second)
	}

	// A lease under a new token follows the end of the holding before:
	// its release, or a heartbeat of its session that excludes the role
	// (the session drops a role it hands over, and a successor may fence
	// the release in flight), or (two members raced for one vacancy, the
	// broker fencing the first) one granted less than a lease before it.
	// Taking a role from a holder that let it run out takes at least a
	// lease after that holder's lease was granted (one clock here: one
	// machine).
	type leaseAt struct {
		off int64
		l   codec.Lease
	}
	leases := map[codec.Role][]leaseAt{}
	beats := map[codec.MemberID][]codec.Heartbeat{}
	eachRecord(t, e, func(k codec.Key, off int64, r codec.Record) {
		switch {
		case k.Kind == codec.KindLease && r.Lease != nil:
			leases[k.Role] = append(leases[k.Role], leaseAt{off, *r.Lease})
		case r.Heartbeat != nil:
			beats[r.Heartbeat.Member] = append(beats[r.Heartbeat.Member], *r.Heartbeat)
		}
	})
	dropped := func(role codec.Role, p, l codec.Lease) bool {
		for _, hb := range beats[p.Member] {
			if p.Session != nil && hb.Session.Keeps(*p.Session) && hb.GrantedAt <= l.GrantedAt &&
				(hb.End && hb.GrantedAt >= p.GrantedAt || rolestate.ExcludesLease(hb, role, p)) {
				return true
			}
		}
		return false
	}
	handovers, raced := 0, 0
	for role, ls := range leases {
		for i := 1; i < len(ls); i++ {
			p, l := ls[i-1].l, ls[i].l
			if l.Token == p.Token {
				continue
			}
			handovers++
			if p.Released() || dropped(role, p, l) {
				continue
			}
			raced++
			if !assert.Less(t, l.GrantedAt-p.GrantedAt, s.LeaseDuration.Milliseconds(),
				"%s: the lease at offset %d (token %s) follows token %s with no release, a lease or more later: it waited for an expiry",
				role, ls[i].off, l.Token, p.Token) {
				e.rec.logRole(t, role)
			}
		}
	}
	t.Logf("%d holdings passed on, %d of them after a race for one vacancy", handovers, raced)
	assert.Len(t, leases, len(roles))
	assert.Positive(t, handovers)
	e.rec.checkFence(t)
}
