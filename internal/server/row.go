package server

import (
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/rolestate"
)

// Row is one role as `krole table -o json`, GET /v1/roles and the watch
// streams show it: the one JSON shape of a role, built by [NewRow] only.
//
//	{"role":R,
//	 "holder":{"member":M,"value":V,"token":{"producer_id":N,"epoch":N},"fence":N,"granted_at":MS,"deadline":MS,
//	           "vouched_at":MS,"expired":BOOL,"left_ms":N} or null,
//	 "candidates":[{"member":M,"offset":N,"registered_at":MS,"value":V,"rank":0,"gone":true},...],
//	 "dead":true}
//
// "value" is left out when the member registered none. "fence" is the
// holding's fencing number ([rolestate.State.Fence]). Times are Unix
// milliseconds; granted_at, deadline and vouched_at by the holder's clock.
// granted_at and deadline are the lease record's (written again only
// hourly); vouched_at is the holder's latest renewal: the lease's
// granted_at, or that of the latest heartbeat of its member session that
// vouches for the role, whichever is later. "expired" and "left_ms" are
// judged when the row is built by that latest renewal ([liveness.Judge]),
// so a live holder's left_ms starts again from its span at each
// heartbeat. A candidate has "gone":true when its member session is gone
// ([liveness.Session]: it ended, or its latest heartbeat ran out); a
// candidate whose session was never read is not. "dead" is true when the
// role has candidates, all of them gone, and no live holder: no member is
// there to take the role. Candidates are in rank order and
// never null.
type Row struct {
	Role       codec.Role            `json:"role"`
	Holder     *Holder               `json:"holder"`
	Candidates []rolestate.Candidate `json:"candidates"`
	Dead       bool                  `json:"dead,omitempty"`
}

// Holder is the latest lease of a role. Expired, LeftMS and VouchedAt are
// judged when the row is built, as this observer judges the lease
// ([liveness.Judge]): it runs out a span after this process saw the
// holder's latest renewal (its lease record or a heartbeat of its member
// session), never at the holder's wall-clock deadline alone, which is as
// far off as the holder's clock is. It is what the table believes, not
// the broker's fence. A released lease (the one a resigning holder
// writes, or one its member session dropped) is always expired.
type Holder struct {
	Member codec.MemberID `json:"member"`
	// Value is the value the holder registered with, "" when none or when
	// it is no longer a candidate.
	Value string      `json:"value,omitempty"`
	Token codec.Token `json:"token"`
	// Fence is the holding's fencing number ([rolestate.State.Fence]).
	Fence     int64 `json:"fence"`
	GrantedAt int64 `json:"granted_at"`
	Deadline  int64 `json:"deadline"`
	// VouchedAt is the GrantedAt of the holder's latest renewal (Unix ms,
	// the holder's clock); 0 for a release.
	VouchedAt int64 `json:"vouched_at,omitempty"`
	Expired   bool  `json:"expired"`
	// LeftMS is the time left on the lease when the row was built, in
	// milliseconds: Ends minus now, 0 once expired.
	LeftMS int64 `json:"left_ms"`
	// Ends is when the lease stops being live without a further renewal
	// ([LeaseEnd]), on the clock of the process that built the row; zero
	// in a row decoded from JSON.
	Ends time.Time `json:"-"`
	// Renewed is when the process that built the row saw the latest
	// renewal, on its clock; zero when unknown, and in a row decoded from
	// JSON.
	Renewed time.Time `json:"-"`
	// Dropped: the holder's member session gave the role up after this
	// lease (its session end, written when the member left, or a
	// heartbeat that excludes the role): released as by a release
	// record ([rolestate.Dropped]).
	Dropped bool `json:"dropped,omitempty"`
}

// Released reports whether the holder gave the role up: its lease is a
// release, written by a holder that resigned, or its member session
// dropped the role (Dropped).
func (h *Holder) Released() bool { return h != nil && (h.Dropped || h.lease().Released()) }

func (h *Holder) lease() codec.Lease {
	return codec.Lease{Member: h.Member, Token: h.Token, GrantedAt: h.GrantedAt, Deadline: h.Deadline}
}

// NewRow returns st as a [Row], judged at now by [liveness.Judge] (the
// holder) and [liveness.Session] (each candidate whose session st
// carries, rolestate.Candidate.Session). It copies what it keeps: the row
// shares nothing with st.
func NewRow(st rolestate.State, now time.Time) Row {
	r := Row{Role: st.Role, Candidates: make([]rolestate.Candidate, len(st.Candidates))}
	gone := 0
	for i, c := range st.Candidates {
		c.Gone, c.Session = liveness.Session(c.Session, now).Gone, nil
		if c.Gone {
			gone++
		}
		r.Candidates[i] = c
	}
	if l := st.Lease; l != nil {
		v := liveness.Judge(st, now)
		r.Holder = &Holder{
			Member:    l.Member,
			Token:     l.Token,
			Fence:     st.Fence(),
			Value:     l.Value, // written under the holder's token, never a registration's
			GrantedAt: l.GrantedAt,
			Deadline:  l.Deadline,
			VouchedAt: v.VouchedAt,
			Expired:   !v.Live,
			Ends:      v.End,
			Renewed:   v.RenewalSeen,
			Dropped:   st.SessionVouch() == rolestate.Dropped,
		}
		if v.Live {
			r.Holder.LeftMS = v.End.Sub(now).Milliseconds()
		}
	}
	r.Dead = len(r.Candidates) > 0 && gone == len(r.Candidates) && (r.Holder == nil || r.Holder.Expired)
	return r
}

// LeaseEnd returns when st's lease stops being live without a further
// renewal, as [NewRow] judges it ([liveness.End]): a span after this
// process saw the holder's latest renewal, on its clock (earlier when the
// holder's clock says the renewal ran out, see package liveness). The
// zero time when st has no lease that can be live.
func LeaseEnd(st rolestate.State) time.Time { return liveness.End(st) }

// Empty reports whether the row has neither a lease nor a candidate: the
// table does not know the role.
func (r Row) Empty() bool { return r.Holder == nil && len(r.Candidates) == 0 }
