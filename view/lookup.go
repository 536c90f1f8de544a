package view

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// Every lookup below reads the local table only, never the broker. It
// waits until the view has caught up with the role topic (see
// [View.WaitCaughtUp]; after the first time it does not wait at all); when
// ctx ends first it returns an error matching both [ErrNotCaughtUp] and
// ctx.Err(), and once Run has returned it returns [ErrStopped]. A lookup's
// cost is that of the role it names (its candidates), never of the other
// roles; Roles and Snapshot are the exceptions, by their nature. What a
// lookup returns is a copy the caller owns.

// Lookup returns role's state and whether the table knows the role (it has
// a lease or a candidate). An unknown role gives rolestate.State{Role: role,
// LeaseOffset: -1} and false.
func (v *View) Lookup(ctx context.Context, role codec.Role) (rolestate.State, bool, error) {
	if err := v.await(ctx); err != nil {
		return rolestate.State{Role: role, LeaseOffset: -1}, false, err
	}
	v.index.mu.RLock()
	defer v.index.mu.RUnlock()
	e := v.index.roles[role]
	return v.index.stateLocked(e, role), e != nil, nil
}

// Role returns role's state: its lease and ranked candidates. An unknown
// role gives rolestate.State{Role: role, LeaseOffset: -1}; use [View.Lookup] to
// tell it apart from a role without lease and candidates (which the table
// does not keep).
func (v *View) Role(ctx context.Context, role codec.Role) (rolestate.State, error) {
	s, _, err := v.Lookup(ctx, role)
	return s, err
}

// Holder returns role's latest lease and whether it holds at now, on the
// view's clock, as an observer judges it ([rolestate.State.Live]): the
// lease is not a release and now is before the view first saw its record
// (LeaseSeenAt) plus its span ([rolestate.LeaseSpan]), never judged by
// the holder's wall-clock deadline. A zero now means the view's clock
// ([Options].Clock); a now from another clock means nothing here. It is
// the table's belief, not the broker's fence: a holder that appears live
// here may already be fenced by a newer epoch whose lease the table has
// not read yet. Its cost does not depend on the number of candidates.
func (v *View) Holder(ctx context.Context, role codec.Role, now time.Time) (lease codec.Lease, held bool, err error) {
	if err := v.await(ctx); err != nil {
		return codec.Lease{}, false, err
	}
	if now.IsZero() {
		now = v.opts.Clock()
	}
	v.index.mu.RLock()
	e := v.index.roles[role]
	if e == nil || !e.hasLease() {
		v.index.mu.RUnlock()
		return codec.Lease{}, false, nil
	}
	l, live := e.lease, v.index.liveLocked(e, role, now)
	v.index.mu.RUnlock()
	return l, live, nil
}

// Candidates returns role's candidates in rank order (rank 0 joined first),
// or none for an unknown role.
func (v *View) Candidates(ctx context.Context, role codec.Role) ([]rolestate.Candidate, error) {
	if err := v.await(ctx); err != nil {
		return nil, err
	}
	v.index.mu.RLock()
	defer v.index.mu.RUnlock()
	return v.index.roles[role].candidates(), nil
}

// Roles returns every role the table knows (with a lease or a candidate),
// sorted.
func (v *View) Roles(ctx context.Context) ([]codec.Role, error) {
	if err := v.await(ctx); err != nil {
		return nil, err
	}
	v.index.mu.RLock()
	out := make([]codec.Role, 0, len(v.index.roles))
	for r := range v.index.roles {
		out = append(out, r)
	}
	v.index.mu.RUnlock()
	slices.Sort(out)
	return out, nil
}

// Snapshot returns every role the table knows, sorted by role name, as the
// table held them at one instant: no record is applied while it is taken,
// so it never mixes two states of the table. It costs a copy of the whole
// table, during which the view applies nothing.
func (v *View) Snapshot(ctx context.Context) ([]rolestate.State, error) {
	if err := v.await(ctx); err != nil {
		return nil, err
	}
	v.index.mu.RLock()
	out := make([]rolestate.State, 0, len(v.index.roles))
	for r, e := range v.index.roles {
		out = append(out, v.index.stateLocked(e, r))
	}
	v.index.mu.RUnlock()
	slices.SortFunc(out, func(a, b rolestate.State) int { return cmp.Compare(a.Role, b.Role) })
	return out, nil
}

// Leader is a role's live holder as the table believes it: its lease, the
// value it registered with and its holding's fencing number.
type Leader struct {
	// Lease is the holder's live lease: its member and token.
	Lease codec.Lease `json:"lease"`
	// Fence is the holding's fencing number ([rolestate.State.Fence]):
	// the offset of its first lease record, which its later leases carry.
	Fence int64 `json:"fence"`
	// Value is the value the holder's lease carries ([codec.Lease].Value),
	// written under the holder's token: a registration appended by anyone
	// cannot change it. "" when the holder has none (or wrote its lease
	// with a krole older than lease values).
	Value string `json:"value,omitempty"`
}

// Leader returns role's live holder and its value, and whether there is
// one: a lease exists and is live at now as [View.Holder] judges it (from
// when the view saw the lease record plus its span, on the view's clock;
// a release is never live). A zero now means the view's clock. Like
// [View.Holder], it is the table's belief, not the broker's fence. It
// waits for the catch-up as every lookup does.
func (v *View) Leader(ctx context.Context, role codec.Role, now time.Time) (Leader, bool, error) {
	if err := v.await(ctx); err != nil {
		return Leader{}, false, err
	}
	if now.IsZero() {
		now = v.opts.Clock()
	}
	v.index.mu.RLock()
	defer v.index.mu.RUnlock()
	e := v.index.roles[role]
	if e == nil || !v.index.liveLocked(e, role, now) {
		return Leader{}, false, nil
	}
	l := e.lease
	return Leader{Lease: l, Fence: rolestate.State{Lease: &l, LeaseOffset: e.leaseOffset}.Fence(), Value: l.Value}, true, nil
}
