package server

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// Lookuper is what [Rows] and [Follow] read: *view.View implements it.
type Lookuper interface {
	Lookup(ctx context.Context, role codec.Role) (rolestate.State, bool, error)
	Snapshot(ctx context.Context) ([]rolestate.State, error)
	Watch(ctx context.Context, roles ...codec.Role) <-chan view.Change
}

// Rows returns the rows of roles, sorted by role and without duplicates,
// their leases judged at now() read once the lookups are done; a role the table does not know gives an
// empty row (holder null, no candidates). With no roles it returns every
// role the table knows, from one [view.View.Snapshot]. It blocks as the
// view's lookups do: until the view has caught up, or ctx ends.
//
// It is the one source of GET /v1/roles and `krole table -o json`.
func Rows(ctx context.Context, t Lookuper, now func() time.Time, roles ...codec.Role) ([]Row, error) {
	states, err := states(ctx, t, roles)
	if err != nil {
		return nil, err
	}
	at := now()
	out := make([]Row, 0, len(states))
	for _, st := range states {
		out = append(out, NewRow(st, at))
	}
	return out, nil
}

// states reads the named roles (sorted, deduplicated) or, with none, the
// whole table.
func states(ctx context.Context, t Lookuper, roles []codec.Role) ([]rolestate.State, error) {
	if len(roles) == 0 {
		return t.Snapshot(ctx)
	}
	roles = slices.Clone(roles)
	slices.Sort(roles)
	roles = slices.Compact(roles)
	out := make([]rolestate.State, 0, len(roles))
	for _, r := range roles {
		st, _, err := t.Lookup(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Stream is a live feed of rows; see [Follow].
type Stream struct {
	// C carries batches of rows. The first batch holds the current row of
	// every followed role, sorted by role (it may be empty); each later
	// batch holds one row. C is closed when the stream ends.
	C <-chan []Row

	err error // written before C is closed
}

// Err returns why the stream ended, once C is closed: nil when its context
// ended, [view.ErrStopped] when the view stopped, or the error of the
// first lookup.
func (s *Stream) Err() error { return s.err }

// Follow starts following roles (every role when none is given) and
// returns at once. Its stream hands over:
//
//   - first, once the view has caught up, the current row of each role, as
//     [Rows] returns them;
//   - then a row each time the table changes a role (a new holder, a lease
//     renewed or released, a candidate joined or left), the row as the
//     table holds the role when it is handed over; a role that lost its
//     last record shows as an empty row;
//   - and a row when a lease that the stream showed as not expired
//     reaches its end as last shown ([LeaseEnd]): no record marks that
//     moment, so the stream keeps its own timer (wall-clock time; expiry
//     itself is judged with now). The role is looked up again then: a
//     lease its holder's member session renewed meanwhile (heartbeats are
//     not published as changes) shows with its new end, any other with
//     Expired now true.
//
// A slow reader blocks nobody: the view coalesces a role's changes while
// the reader is busy (see [view.View.Watch]), so intermediate states may
// be skipped but the latest row of a role never is. Cancelling ctx ends
// the stream; it ends too when the view stops. Follow starts one
// goroutine, which closes C when it ends; the caller should read C until
// it is closed.
func Follow(ctx context.Context, t Lookuper, now func() time.Time, roles ...codec.Role) *Stream {
	out := make(chan []Row)
	s := &Stream{C: out}
	go func() {
		defer close(out)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		changes := t.Watch(ctx, roles...) // first, so no change after the lookup is missed
		defer func() {
			cancel()
			for range changes { // the watcher's goroutine ends with ctx
			}
		}()
		s.err = follow(ctx, t, now, roles, changes, out)
	}()
	return s
}

func follow(ctx context.Context, t Lookuper, now func() time.Time, roles []codec.Role, changes <-chan view.Change, out chan<- []Row) error {
	initial, err := states(ctx, t, roles)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// live holds the roles whose row showed a lease not yet expired, to
	// show them again when the lease runs out.
	live := map[codec.Role]rolestate.State{}
	send := func(sts ...rolestate.State) bool {
		at := now()
		rows := make([]Row, 0, len(sts))
		for _, st := range sts {
			r := NewRow(st, at)
			if r.Holder != nil && !r.Holder.Expired {
				live[st.Role] = st
			} else {
				delete(live, st.Role)
			}
			rows = append(rows, r)
		}
		select {
		case out <- rows:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !send(initial...) {
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(untilNextExpiry(live, now()))
		select {
		case <-ctx.Done():
			return nil
		case c, ok := <-changes:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return view.ErrStopped
			}
			if !send(c.After) {
				return nil
			}
		case <-timer.C:
			at := now()
			var expired []rolestate.State
			for _, st := range live {
				if !at.Before(LeaseEnd(st)) {
					expired = append(expired, st)
				}
			}
			slices.SortFunc(expired, func(a, b rolestate.State) int { return cmp.Compare(a.Role, b.Role) })
			for _, st := range expired {
				// The holder's member session renews the lease with
				// heartbeats, which the view does not publish (one per
				// member and heartbeat interval, for every role it holds):
				// the role as the table holds it now has the latest.
				// Renewed, its row goes out with its new end; else it
				// goes out expired.
				if cur, _, err := t.Lookup(ctx, st.Role); err == nil {
					st = cur
				} else if ctx.Err() != nil {
					return nil
				}
				if !send(st) {
					return nil
				}
			}
		}
	}
}

// minRearm bounds how soon the expiry timer fires again, so that a clock
// running behind the timer cannot make it spin.
const minRearm = 10 * time.Millisecond

// untilNextExpiry is how long until the earliest lease end in live (an
// hour when there is none).
func untilNextExpiry(live map[codec.Role]rolestate.State, now time.Time) time.Duration {
	next := time.Hour
	for _, st := range live {
		if d := LeaseEnd(st).Sub(now); d < next {
			next = d
		}
	}
	return max(next, minRearm)
}
