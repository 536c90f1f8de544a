// Package roleread reads one role's records from the cluster for the
// one-shot commands (describe, records, resign, prune) and judges them as
// a one-shot answer is (package liveness): the holder's lease with its
// member session's latest heartbeat, each record stamped with when this
// process first read it.
package roleread

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/rolestate"
)

// Reader reads a role's records and a member's session records; the
// one-shot commands' client of the cluster is one.
type Reader interface {
	ReadRoleRecords(ctx context.Context, role codec.Role) ([]fencing.RoleRecord, error)
	ReadSession(ctx context.Context, member codec.MemberID) ([]fencing.RoleRecord, error)
}

// Settled reads role's records and, when its newest lease names
// its holder's member session, the session's latest record, judged as a
// one-shot answer is (liveness.Settle): each record is stamped with when
// this process first read it, and the reads go on while the holder's
// clock says the latest renewal ran out, for a renewal to show. It
// returns the last records read and their state.
func Settled(ctx context.Context, r Reader, role codec.Role) ([]fencing.RoleRecord, rolestate.State, error) {
	seen, seenBeat := map[int64]time.Time{}, map[int64]time.Time{}
	stamp := func(m map[int64]time.Time, off int64) time.Time {
		if _, ok := m[off]; !ok {
			m[off] = time.Now()
		}
		return m[off]
	}
	var recs []fencing.RoleRecord
	sts, err := liveness.Settle(ctx, func(ctx context.Context) ([]rolestate.State, error) {
		rs, err := r.ReadRoleRecords(ctx, role)
		if err != nil {
			return nil, err
		}
		st := rolestate.Fold(role, rs)
		if st.Lease != nil {
			st.LeaseSeenAt = stamp(seen, st.LeaseOffset)
		}
		if err := WithSession(ctx, r, &st, func(off int64) time.Time { return stamp(seenBeat, off) }); err != nil {
			return nil, err
		}
		recs = rs
		return []rolestate.State{st}, nil
	}, time.Now)
	if err != nil {
		return nil, rolestate.State{}, err
	}
	return recs, sts[0], nil
}

// WithSession sets st.Session to the latest session record of the member
// its lease names, read with r, when the lease names a session: a holder
// is renewed by its session's heartbeats, not by lease records. seenAt
// stamps the record by its offset.
func WithSession(ctx context.Context, r Reader, st *rolestate.State, seenAt func(off int64) time.Time) error {
	if st.Lease == nil || st.Lease.Session == nil {
		return nil
	}
	beats, err := r.ReadSession(ctx, st.Lease.Member)
	if err != nil {
		return err
	}
	for i := len(beats) - 1; i >= 0; i-- {
		if hb := beats[i].Record.Heartbeat; hb != nil {
			st.Session = &rolestate.SessionSeen{Offset: beats[i].Offset, Heartbeat: *hb, SeenAt: seenAt(beats[i].Offset)}
			return nil
		}
	}
	return nil
}

// LastBeatBefore returns the deadline (Unix ms, the member's clock) of
// the latest heartbeat of end's incarnation before end, a session end, as
// the member's session partition still holds it; 0 when compaction left
// none.
func LastBeatBefore(ctx context.Context, r Reader, end rolestate.SessionSeen) (int64, error) {
	recs, err := r.ReadSession(ctx, end.Heartbeat.Member)
	if err != nil {
		return 0, err
	}
	var last int64
	for _, rec := range recs {
		if h := rec.Record.Heartbeat; h != nil && !h.End && rec.Offset < end.Offset && end.Heartbeat.Session.Keeps(h.Session) {
			last = h.Deadline
		}
	}
	return last, nil
}

// Registration is a registration `krole prune` removes, or would: its
// member's session has been gone for longer than asked.
type Registration struct {
	Role      codec.Role     `json:"role"`
	Member    codec.MemberID `json:"member"`
	GoneSince int64          `json:"gone_since"` // the deadline of the member's latest heartbeat (Unix ms, its clock)
	Pruned    bool           `json:"pruned"`     // set once the tombstone is written
	Offset    int64          `json:"-"`          // of the session record judged
}

// Gone returns the registrations in states, judged at now, whose member's
// session has been gone for longer than olderThan, as its latest heartbeat
// says (read with r when a session end took its place). It leaves out
// the live holder and members whose last heartbeat is not known.
func Gone(ctx context.Context, r Reader, states []rolestate.State, now time.Time, olderThan time.Duration) ([]Registration, error) {
	var err error
	out := []Registration{}
	ended := map[codec.MemberID]int64{} // the last heartbeat's deadline before a session end; 0 unknown
	for _, st := range states {
		v := liveness.Judge(st, now)
		for _, cd := range st.Candidates {
			if v.Live && st.Lease.Member == cd.Member {
				continue // the live holder
			}
			se := cd.Session
			sv := liveness.Session(se, now)
			if !sv.Gone {
				continue
			}
			since := sv.RanOut.UnixMilli()
			if se.Heartbeat.End {
				d, ok := ended[cd.Member]
				if !ok {
					d, err = LastBeatBefore(ctx, r, *se)
					if err != nil {
						return nil, err
					}
					ended[cd.Member] = d
				}
				since = d
			}
			if since == 0 || now.Sub(time.UnixMilli(since)) <= olderThan {
				continue
			}
			out = append(out, Registration{Role: st.Role, Member: cd.Member, GoneSince: since, Offset: se.Offset})
		}
	}
	return out, nil
}

// Standing says where member stands in recs, a role's records in offset
// order (none when they could not be read): whether it is registered,
// whether it holds the newest lease (not released), and that lease (the
// zero Lease without one).
func Standing(recs []fencing.RoleRecord, member codec.MemberID) (registered, holds bool, lease codec.Lease) {
	for _, r := range recs {
		switch {
		case r.Key.Kind == codec.KindRegistration && r.Key.Member == member:
			registered = !r.Record.Tombstone()
		case r.Key.Kind == codec.KindLease && r.Record.Lease != nil:
			lease = *r.Record.Lease
			holds = lease.Member == member && !lease.Released()
		case r.Key.Kind == codec.KindLease:
			holds = false
		}
	}
	return registered, holds, lease
}

// AwaitRelease reads role's records until the lease held (by the member
// being resigned) is replaced, for up to wait: it returns the release that
// member wrote, if any, and the member holding a later lease, if any. It
// returns nil, "" when nothing replaced the lease within wait or ctx
// ended.
func AwaitRelease(ctx context.Context, t Reader, role codec.Role, held codec.Lease, wait time.Duration) (*codec.Lease, codec.MemberID) {
	if wait <= 0 {
		return nil, ""
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var released *codec.Lease
	for {
		if recs, err := t.ReadRoleRecords(ctx, role); err == nil {
			after := false // past the first record of the held token
			for _, r := range recs {
				l := r.Record.Lease
				if r.Key.Kind != codec.KindLease || l == nil {
					continue
				}
				if l.Token == held.Token {
					after = true
				}
				switch {
				case !after:
				case l.Member == held.Member && l.Token == held.Token && l.Released():
					rl := *l
					released = &rl
				case released != nil && l.Member != held.Member && !l.Released():
					return released, l.Member // the next holder
				case released == nil && l.Token != held.Token && !l.Released():
					return nil, l.Member // taken over without a release
				}
			}
		}
		select {
		case <-ctx.Done():
			return released, ""
		case <-tick.C:
		}
	}
}
