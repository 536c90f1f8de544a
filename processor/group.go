package processor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/rolestate"
)

// Group makes a member's roles one group that spreads over its members
// (see "Groups" in the package doc, and docs/GROUPS.md).
//
// The member's heartbeats name the group, its weight and whether it
// drains; they are its only registration, so a group costs one record per
// member per heartbeat, whatever its roles. Every HeartbeatInterval/2, and
// at once when a vacancy waits for it, the member computes [group.Assign]
// from its source: the live members (a heartbeat naming the group seen
// within half its span) and the roles' holders, its own holdings taken as
// it knows them. A holder above its share keeps the roles it has held
// longest ([group.AssignSince], by its leases' grant times). The balance
// rules, in [Decide] (rule 0's inputs):
//
//   - A vacancy's candidates are the live members, owner first, then by
//     [group.Score]; the member named in the lease that ended ranks last.
//     Turns, deference and confirmations are rule 7's and 8's. Nobody is
//     registered, so a challenge prunes nobody. When views differ and two
//     members challenge, the broker's fence keeps one holder, and the
//     loser waits as after any lost race (rule 6).
//   - While the plan still names the member that let the role go as its
//     owner (it died or left, and the plan is older than its going), the
//     others wait for the next plan, at most a HeartbeatInterval.
//   - A holder hands a role over (DoResign, [ReasonHandedOver]) once two
//     plans in a row give it to another live member and it has held the
//     role a LeaseDuration (a draining member at once).
//   - A member not yet among the live members, or draining
//     ([Member.Drain]), does not campaign; one that holds Limit of the
//     roles does not challenge for another.
//   - A member warms up: for half a LeaseDuration after its first plan
//     (none when that plan lists no other member) its heartbeats say it
//     drains and it campaigns for nothing. Its new view reads the last
//     heartbeat of a member that died before it started as just seen,
//     and counts it until half a span passes; meanwhile the others would
//     hand it roles its own plan gives to the dead member.
//
// Why the assignment does not oscillate, and why a vacancy is seldom won
// twice: docs/GROUPS.md, "What is guaranteed, and by what".
type Group struct {
	// Name names the group in the member's heartbeats; every member of
	// the group runs the same roles under the same name.
	Name string
	// Weight is the member's weight: its share of the roles is in
	// proportion to it. 0 counts as 1; at most codec.MaxWeight.
	Weight int
	// Limit, when positive, is the most roles of the group the member
	// holds at once: 1 for a semaphore's slots.
	Limit int
}

// GroupSource is a [Source] that lists a group's live members and who
// holds its roles (*view.View has these methods). A member of a [Group]
// needs one.
type GroupSource interface {
	GroupMembers(ctx context.Context, name string, now time.Time) ([]group.Member, error)
	HoldersSince(ctx context.Context, roles []codec.Role, now time.Time) (map[codec.Role]codec.MemberID, map[codec.Role]int64, error)
}

// checkGroup returns why g cannot run over src, or nil.
func checkGroup(g *Group, src Source) error {
	if g == nil {
		return nil
	}
	if err := codec.CheckGroup(g.Name); err != nil {
		return fmt.Errorf("processor: %w", err)
	}
	if g.Weight < 0 || g.Weight > codec.MaxWeight {
		return fmt.Errorf("processor: group weight %d: a weight is 0-%d", g.Weight, codec.MaxWeight)
	}
	if g.Limit < 0 {
		return fmt.Errorf("processor: group limit %d: it is 0 (none) or more", g.Limit)
	}
	if _, ok := src.(GroupSource); !ok {
		return errors.New("processor: a group member needs a source that lists the group's members (GroupSource)")
	}
	return nil
}

// plan is the group's assignment as this member last computed it from
// its source.
type plan struct {
	members []group.Member // live, sorted by id
	owner   map[codec.Role]codec.MemberID
	self    bool // this member is among members: it may hand roles over
	// prevOwner is the plan before's: a role is handed over only when
	// two plans in a row agree, so that a view lagging behind a move
	// does not move a role again.
	prevOwner map[codec.Role]codec.MemberID
	// handers counts, for each owner, the members that hold roles the
	// plan gives it: those that hand it roles.
	handers map[codec.MemberID]int
}

// order returns role's candidates in the group's order: its owner, then
// the other live members by [group.Score], highest first.
func (p *plan) order(role codec.Role) []codec.MemberID {
	if p == nil {
		return nil
	}
	out := make([]codec.MemberID, 0, len(p.members))
	owner := p.owner[role]
	for _, m := range p.members {
		if m.ID != owner {
			out = append(out, m.ID)
		}
	}
	slices.SortFunc(out, func(a, b codec.MemberID) int {
		return cmp.Or(-cmp.Compare(group.Score(role, a), group.Score(role, b)), cmp.Compare(a, b))
	})
	if owner != "" {
		out = slices.Insert(out, 0, owner)
	}
	return out
}

// balancer keeps a group member's plan: every HeartbeatInterval/2 it
// lists the live members and the holders from the source, computes the
// assignment ([group.Assign]) and wakes the roles whose owner changed.
type balancer struct {
	m   *Member
	g   Group
	src GroupSource

	plan     atomic.Pointer[plan]
	draining atomic.Bool
	// warming: the member's heartbeats say it drains, and it campaigns
	// for nothing, until its view can tell live members from dead ones
	// (see warmUp). warmFrom is when its first plan was made.
	warming  atomic.Bool
	warmFrom time.Time     // run's goroutine only
	pokeCh   chan struct{} // capacity 1: replan at once

	mu    sync.Mutex
	taken map[codec.Role]struct{} // roles held or being challenged, under a Limit
	// handing holds the roles this member hands over, until its view
	// shows another holder or a LeaseDuration passed: at most MaxInFlight
	// at once, and to one new owner at most its share of MaxInFlight
	// among the members handing it roles, so that the new owner takes
	// each role as it comes and a role's gap stays one handover however
	// many move to it at once (a member coming back takes a tenth of the
	// roles from nine). waiting holds the roles refused a grant meanwhile.
	handing map[codec.Role]handover
	waiting map[codec.Role]struct{}
	req     drainReq // a drain request's (see drainreq.go)
}

// handover is a role this member hands over: when it was granted, and to
// whom.
type handover struct {
	at time.Time
	to codec.MemberID
}

func newBalancer(m *Member, g Group) *balancer {
	b := &balancer{m: m, g: g, src: m.src.(GroupSource), taken: map[codec.Role]struct{}{}, pokeCh: make(chan struct{}, 1),
		handing: map[codec.Role]handover{}, waiting: map[codec.Role]struct{}{}}
	b.warming.Store(true)
	return b
}

// poke asks for a plan at once.
func (b *balancer) poke() {
	if b == nil {
		return
	}
	select {
	case b.pokeCh <- struct{}{}:
	default:
	}
}

// stamp adds the member's group to its heartbeat.
func (b *balancer) stamp(hb *codec.Heartbeat) {
	if b == nil {
		return
	}
	hb.Group, hb.Weight, hb.Drain = b.g.Name, b.g.Weight, b.idle()
}

// run replans every HeartbeatInterval/2 until ctx ends, and when poked,
// at most every HeartbeatInterval/16.
func (b *balancer) run(ctx context.Context) {
	every := max(b.m.s.HeartbeatInterval/2, time.Millisecond)
	for {
		b.replan(ctx)
		b.warmUp(ctx)
		t := b.m.clk.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-b.pokeCh:
			t.Stop()
			gap := b.m.clk.NewTimer(every / 8)
			select {
			case <-ctx.Done():
				gap.Stop()
				return
			case <-gap.C():
			}
		}
	}
}

// replan computes the plan afresh and wakes the roles it changes.
func (b *balancer) replan(ctx context.Context) {
	b.drainOnRequest(ctx)
	roles := b.m.Roles()
	members, err := b.src.GroupMembers(ctx, b.g.Name, time.Time{})
	if err != nil {
		return
	}
	holders, since, err := b.src.HoldersSince(ctx, roles, time.Time{})
	if err != nil {
		return
	}
	// Its own holdings as it knows them, not as its view shows them yet:
	// a role just won, or just let go, would otherwise move again.
	for _, role := range roles {
		mine, shown := b.m.sess.holds(role), holders[role] == b.m.me
		switch {
		case mine && !shown: // just won
			holders[role], since[role] = b.m.me, b.m.clk.Now().UnixMilli()
		case !mine && shown: // just let go
			delete(holders, role)
			delete(since, role)
		}
	}
	p := &plan{members: members}
	for i, m := range members {
		if m.ID == b.m.me {
			p.self = true
			if b.idle() {
				// Ahead of its heartbeat saying so: the others follow it.
				p.members = slices.Clone(members)
				p.members[i].Weight = 0
			}
		}
	}
	p.owner = group.AssignSince(roles, holders, since, p.members, b.g.Limit)
	p.handers = handers(p.owner, holders)
	old := b.plan.Load()
	if old != nil {
		p.prevOwner = old.owner
	}
	b.plan.Store(p)
	b.expireHandovers(b.m.clk.Now())
	for _, role := range roles {
		if old == nil || old.owner[role] != p.owner[role] || old.self != p.self || len(old.members) != len(p.members) {
			b.pokeRole(role)
		}
	}
}

// pokeRole wakes role's runner to decide again.
func (b *balancer) pokeRole(role codec.Role) {
	if r, err := b.m.runner(role); err == nil {
		r.poke()
	}
}

// idle reports whether the member takes no role: it drains or warms up.
func (b *balancer) idle() bool { return b.draining.Load() || b.warming.Load() }

// warmUp ends the warm-up half a LeaseDuration after the first plan, or
// at once when that plan lists no other member. A view that has just
// started counts the members whose last heartbeat it read on its first
// catch-up until they miss half a span (view.GroupMembers): a member
// dead since then would be an owner that never takes its roles, and
// the others would hand this member roles its own plan gives to the
// dead one, which then wait. Warming up, it is handed none.
func (b *balancer) warmUp(ctx context.Context) {
	p := b.plan.Load()
	if !b.warming.Load() || p == nil {
		return
	}
	now := b.m.clk.Now()
	if b.warmFrom.IsZero() {
		b.warmFrom = now
	}
	others := slices.ContainsFunc(p.members, func(m group.Member) bool { return m.ID != b.m.me })
	if others && now.Before(b.warmFrom.Add(b.m.s.LeaseDuration/2)) {
		return
	}
	b.warming.Store(false)
	b.m.sess.poke()
	b.replan(ctx)
	for _, role := range b.m.Roles() {
		b.pokeRole(role)
	}
}

// inputs records in l what the group's rules need for role (rule 0), as
// it stands in st at now.
func (b *balancer) inputs(role codec.Role, l *Local, st rolestate.State, now time.Time) {
	if b == nil {
		return
	}
	p := b.plan.Load()
	x := localExt{group: true, draining: b.idle()}
	if l.ext != nil {
		x.instance = l.ext.instance
	}
	if l.held == nil {
		if lease := st.Lease; lease != nil && lease.Member != b.m.me && !lease.Released() {
			b.handed(role)
		}
	}
	if p != nil && p.self {
		x.order = p.order(role)
		if o := p.owner[role]; o != "" && o != b.m.me && p.prevOwner[role] == o && l.held != nil && b.settled(l.held, now) && b.grant(role, o, p.handers[o], now) {
			x.handOver = o
		}
	}
	*l = l.withExt(x)
}

// settled reports whether held may be handed over at now: a holding
// younger than a LeaseDuration is kept unless the member drains. A member
// that died without leaving stays in the plans until half its heartbeat's
// span runs out, an owner that never takes the role: without the wait,
// the survivors would take the role in turn and hand it to it again and
// again.
func (b *balancer) settled(held *Held, now time.Time) bool {
	return b.draining.Load() || !now.Before(time.UnixMilli(held.Lease.GrantedAt).Add(b.m.s.LeaseDuration))
}

// grant reports whether role may be handed over to to now, counting it
// among the handovers in flight until handed; others members (this one
// among them) hand roles to to.
func (b *balancer) grant(role codec.Role, to codec.MemberID, others int, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.handing[role]; ok {
		return true
	}
	perOwner, toOwner := max(1, b.m.s.MaxInFlight/max(others, 1)), 0
	for _, h := range b.handing {
		if h.to == to {
			toOwner++
		}
	}
	if len(b.handing) >= b.m.s.MaxInFlight || toOwner >= perOwner {
		b.waiting[role] = struct{}{}
		return false
	}
	delete(b.waiting, role)
	b.handing[role] = handover{at: now, to: to}
	return true
}

// handers counts, for each owner in owner, the members holding roles it
// owns.
func handers(owner, holders map[codec.Role]codec.MemberID) map[codec.MemberID]int {
	seen := map[[2]codec.MemberID]struct{}{}
	n := map[codec.MemberID]int{}
	for role, o := range owner {
		h := holders[role]
		if h == "" || h == o {
			continue
		}
		if _, ok := seen[[2]codec.MemberID{o, h}]; !ok {
			seen[[2]codec.MemberID{o, h}] = struct{}{}
			n[o]++
		}
	}
	return n
}

// handed ends role's handover (another member holds it), and wakes a role
// waiting for a grant.
func (b *balancer) handed(role codec.Role) {
	b.mu.Lock()
	_, ok := b.handing[role]
	delete(b.handing, role)
	b.mu.Unlock()
	if ok {
		b.wakeWaiting(1)
	}
}

// expireHandovers ends the handovers granted a LeaseDuration before now
// or more (their release failed, or nobody took the role), and wakes as
// many waiting roles as there are free grants.
func (b *balancer) expireHandovers(now time.Time) {
	b.mu.Lock()
	for role, h := range b.handing {
		if !now.Before(h.at.Add(b.m.s.LeaseDuration)) {
			delete(b.handing, role)
		}
	}
	free := b.m.s.MaxInFlight - len(b.handing)
	b.mu.Unlock()
	b.wakeWaiting(free)
}

// wakeWaiting wakes up to n roles waiting for a grant.
func (b *balancer) wakeWaiting(n int) {
	var roles []codec.Role
	b.mu.Lock()
	for role := range b.waiting {
		if len(roles) >= n {
			break
		}
		roles = append(roles, role)
		delete(b.waiting, role)
	}
	b.mu.Unlock()
	for _, role := range roles {
		b.pokeRole(role)
	}
}

// reserve reports whether the member may challenge for role under the
// group's Limit, and counts it, campaigning or held, until release.
func (b *balancer) reserve(role codec.Role) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.taken[role]; ok {
		return true
	}
	if b.g.Limit > 0 && len(b.taken) >= b.g.Limit {
		return false
	}
	b.taken[role] = struct{}{}
	return true
}

// release ends role's count.
func (b *balancer) release(role codec.Role) {
	if b == nil {
		return
	}
	b.mu.Lock()
	delete(b.taken, role)
	b.mu.Unlock()
}

// busy reports whether a role of the member is campaigning or held.
func (b *balancer) busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.taken) > 0
}

// Drain hands every role of the member's group over to the other members
// and stops campaigning for them: its heartbeats say it drains, so every
// member's assignment gives its roles to the others, and it resigns each
// as its own plan does. It blocks until the member holds no role and
// none is being taken, or ctx ends (its error). Run goes on; end it after Drain to leave. It returns
// [ErrNotRunning] outside Run and an error for a member of no group.
func (m *Member) Drain(ctx context.Context) error {
	if m.grp == nil {
		return errors.New("processor: Drain: the member is in no group")
	}
	m.mu.Lock()
	running := m.running
	m.mu.Unlock()
	if !running {
		return ErrNotRunning
	}
	m.grp.draining.Store(true)
	m.sess.poke()
	m.grp.replan(ctx)
	return m.grp.awaitDrained(ctx)
}

// awaitDrained blocks until the member holds nothing and no challenge
// begun before is in flight (one could win a role after the last holding
// was handed over), or ctx ends (its error).
func (b *balancer) awaitDrained(ctx context.Context) error {
	for b.m.sess.holdings() > 0 || b.busy() {
		t := b.m.clk.NewTimer(b.m.s.HeartbeatInterval / 4)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
	return nil
}

// releaseCause is the cause a group member's release of a role revoked
// for why carries (codec.Cause), so that readers tell a drain from a
// rebalance by the release itself; none for a member of no group.
func (b *balancer) releaseCause(why Reason) codec.Cause {
	switch {
	case b == nil:
		return ""
	case why == ReasonHandedOver && b.draining.Load():
		return codec.CauseDrain
	case why == ReasonHandedOver:
		return codec.CauseRebalance
	}
	return codec.CauseLeave
}
