package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/rolestate"
)

// grouped returns l as a group member's, with order as its plan's.
func grouped(l Local, order ...codec.MemberID) Local {
	l.ext = &localExt{group: true, order: order}
	return l
}

// The group's rules in Decide: no registration, the plan's order in a
// vacancy, a handover of a held role the plan gives to another, waits
// while draining, before the first plan, and while the plan still names
// the member that let the role go.
func TestDecideGroup(t *testing.T) {
	s := defaults()
	sec := time.Second
	vacant := state(role, nil, -1)
	released := func(m string) rolestate.State {
		r := codec.ReleaseLease(codec.MemberID(m), tok1)
		return state(role, &r, 4)
	}

	// No registration: the owner confirms at once.
	a := Decide(vacant, "me", grouped(NewLocal(), "me", "x"), t0, s)
	assert.Equal(t, DoConfirm, a.Kind, a.Reason)

	// Second in the order: waits one stagger, prunes nobody.
	l := vacantFrom(grouped(NewLocal(), "x", "me"), -1, t0)
	a = Decide(vacant, "me", l, t0, s)
	require.Equal(t, DoWait, a.Kind, a.Reason)
	assert.Equal(t, t0.Add(s.Stagger), a.Until)
	l.confAt = monoOf(t0.Add(s.Stagger))
	a = Decide(vacant, "me", l, t0.Add(s.Stagger), s)
	require.Equal(t, DoChallenge, a.Kind, a.Reason)
	assert.Empty(t, a.Prune, "a group prunes nobody")

	// The member that let the role go ranks last, even as the plan's
	// first, and the others wait for the next plan meanwhile.
	st := released("x")
	l = vacantFrom(grouped(NewLocal(), "x", "me"), 4, t0)
	a = Decide(st, "me", l, t0, s)
	require.Equal(t, DoWait, a.Kind, a.Reason)
	assert.True(t, a.replan)
	assert.Equal(t, t0.Add(s.HeartbeatInterval), a.Until)
	ahead, prune := l.turn(st, "x")
	assert.Equal(t, []codec.MemberID{"me"}, ahead)
	assert.Nil(t, prune)
	// Past a heartbeat interval it goes by the order as it stands.
	a = Decide(st, "me", l, t0.Add(s.HeartbeatInterval), s)
	assert.Equal(t, DoConfirm, a.Kind, a.Reason)

	// Not in the plan, draining: no campaign.
	assert.Equal(t, DoWait, Decide(vacant, "me", grouped(NewLocal()), t0, s).Kind)
	d := grouped(NewLocal(), "me")
	d.ext = &localExt{group: true, draining: true, order: d.ext.order}
	assert.Equal(t, DoWait, Decide(vacant, "me", d, t0, s).Kind)

	// A holder whose plan gives the role to another hands it over.
	h := grouped(holder(tok1, t0), "x", "me")
	h.registered = -1
	h.ext = &localExt{group: true, order: h.ext.order, handOver: "x"}
	a = Decide(state(role, leaseOf("me", tok1, t0, 10*sec), 4), "me", h, t0.Add(sec), s)
	assert.Equal(t, DoResign, a.Kind, a.Reason)
	assert.Equal(t, ReasonHandedOver, a.Revoke)
	h.ext = &localExt{group: true, order: h.ext.order}
	a = Decide(state(role, leaseOf("me", tok1, t0, 10*sec), 4), "me", h, t0.Add(sec), s)
	assert.Equal(t, DoWait, a.Kind, "a group holder is not a registered candidate, and keeps the role: %s", a.Reason)
}

// The plan's order: its owner, then the others by score; a role the plan
// has no owner for goes by score alone.
func TestPlanOrder(t *testing.T) {
	p := &plan{members: []group.Member{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}, {ID: "c", Weight: 1}},
		owner: map[codec.Role]codec.MemberID{role: "b"}}
	o := p.order(role)
	require.Len(t, o, 3)
	assert.Equal(t, codec.MemberID("b"), o[0])
	assert.GreaterOrEqual(t, group.Score(role, o[1]), group.Score(role, o[2]))
	other := codec.Role("other")
	o = p.order(other)
	require.Len(t, o, 3)
	assert.GreaterOrEqual(t, group.Score(other, o[0]), group.Score(other, o[1]))
	assert.Nil(t, (*plan)(nil).order(role))
}

// A member hands a new owner at most its share of MaxInFlight among the
// members handing that owner roles (at least one), and MaxInFlight in
// all; a handover that ends frees its grant.
func TestGrantPacesHandoversPerOwner(t *testing.T) {
	b := &balancer{m: &Member{s: Settings{MaxInFlight: 5}}, handing: map[codec.Role]handover{}, waiting: map[codec.Role]struct{}{}}
	now := time.Now()
	assert.True(t, b.grant("r1", "x", 2, now))
	assert.True(t, b.grant("r2", "x", 2, now))
	assert.False(t, b.grant("r3", "x", 2, now), "two of five for x, handed roles by two members")
	assert.True(t, b.grant("r1", "x", 2, now), "a role granted already stays granted")
	assert.True(t, b.grant("r4", "y", 9, now), "at least one for y, however many hand it roles")
	assert.False(t, b.grant("r5", "y", 9, now))
	assert.True(t, b.grant("r6", "z", 1, now))
	assert.True(t, b.grant("r7", "z", 1, now))
	assert.False(t, b.grant("r8", "z", 1, now), "five in flight in all")
	assert.Contains(t, b.waiting, codec.Role("r3"))
	b.mu.Lock()
	delete(b.handing, "r1") // as handed does, without waking a runner
	b.mu.Unlock()
	assert.True(t, b.grant("r3", "x", 2, now), "r1's handover ended: x may have another")
	assert.NotContains(t, b.waiting, codec.Role("r3"))
}

func TestHandersCountsTheMembersHandingEachOwnerRoles(t *testing.T) {
	owner := map[codec.Role]codec.MemberID{"a": "x", "b": "x", "c": "x", "d": "y", "e": "y"}
	holders := map[codec.Role]codec.MemberID{"a": "p", "b": "p", "c": "q", "d": "y"}
	assert.Equal(t, map[codec.MemberID]int{"x": 2}, handers(owner, holders), "y holds its own and e is vacant")
}
