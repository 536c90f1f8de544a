package view

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/rolestate"
)

// GroupMembers returns the live members of the group named name, sorted
// by id: those whose latest session record that counts is a heartbeat
// naming the group, seen less than half its span ago at now on the
// view's clock (zero: [Options].Clock). A draining member has weight 0. It waits
// for the verdicts on the session records read when it was called (a
// view that has just started counts every member then, not those it has
// verified so far). Its cost is that of every member session the view
// holds.
func (v *View) GroupMembers(ctx context.Context, name string, now time.Time) ([]group.Member, error) {
	gs, err := v.liveGroups(ctx, now, func(g string) bool { return g == name })
	if err != nil {
		return nil, err
	}
	return gs[name], nil
}

// Groups returns every group that has a live member, each with its live
// members as [View.GroupMembers] judges them, under one read of the
// member sessions: a member is in at most one group, the one its latest
// heartbeat names. A member of no group is in none of them.
func (v *View) Groups(ctx context.Context, now time.Time) (map[string][]group.Member, error) {
	return v.liveGroups(ctx, now, func(g string) bool { return g != "" })
}

// liveGroups returns the live members of each group that want accepts,
// each group's sorted by id; see [View.GroupMembers].
func (v *View) liveGroups(ctx context.Context, now time.Time, want func(string) bool) (map[string][]group.Member, error) {
	if err := v.await(ctx); err != nil {
		return nil, err
	}
	if err := v.awaitBeats(ctx); err != nil {
		return nil, err
	}
	if now.IsZero() {
		now = v.opts.Clock()
	}
	out := map[string][]group.Member{}
	v.index.mu.RLock()
	for id, se := range v.index.sessions {
		hb := se.hb
		// Half its span: a live member beats several times a span (five
		// by default); one that missed half of it is gone for planning's
		// sake, though its leases live on. This also drops, half a span
		// after a new view's first catch-up, a member that died before the
		// view started, whose last heartbeat the view reads as just seen.
		if hb.End || !want(hb.Group) || !now.Before(se.seen.Add(rolestate.HeartbeatSpan(hb)/2)) {
			continue
		}
		out[hb.Group] = append(out[hb.Group], group.Member{ID: id, Weight: group.WeightOf(hb)})
	}
	v.index.mu.RUnlock()
	for _, ms := range out {
		slices.SortFunc(ms, func(a, b group.Member) int { return cmp.Compare(a.ID, b.ID) })
	}
	return out, nil
}

// Holders returns who holds each of roles at now, as [View.Holder] judges
// it, under one read of the table; a role with no live lease is absent.
func (v *View) Holders(ctx context.Context, roles []codec.Role, now time.Time) (map[codec.Role]codec.MemberID, error) {
	out, _, err := v.HoldersSince(ctx, roles, now)
	return out, err
}

// HoldersSince is [View.Holders] with since when each holds its role: its
// lease's GrantedAt (Unix ms, the holder's clock).
func (v *View) HoldersSince(ctx context.Context, roles []codec.Role, now time.Time) (map[codec.Role]codec.MemberID, map[codec.Role]int64, error) {
	if err := v.await(ctx); err != nil {
		return nil, nil, err
	}
	if now.IsZero() {
		now = v.opts.Clock()
	}
	out := make(map[codec.Role]codec.MemberID, len(roles))
	since := make(map[codec.Role]int64, len(roles))
	v.index.mu.RLock()
	defer v.index.mu.RUnlock()
	for _, role := range roles {
		if e := v.index.roles[role]; e != nil && e.hasLease() && v.index.liveLocked(e, role, now) {
			out[role], since[role] = e.lease.Member, e.lease.GrantedAt
		}
	}
	return out, since, nil
}
