package server

import (
	"time"

	"github.com/krabka/krole/rolestate"

	"github.com/krabka/krole/codec"
)

// Row is one role as `krole table -o json`, GET /v1/roles and the watch
// streams show it: the one JSON shape of a role, built by [NewRow] only.
//
//	{"role":R,
//	 "holder":{"member":M,"value":V,"token":{"producer_id":N,"epoch":N},"granted_at":MS,"deadline":MS,"expired":BOOL,"left_ms":N} or null,
//	 "candidates":[{"member":M,"offset":N,"registered_at":MS,"value":V,"rank":0},...]}
//
// "value" is left out when the member registered none. Times are Unix milliseconds (granted_at and deadline by the holder's
// clock). Candidates are in rank order and never null.
type Row struct {
	Role       codec.Role            `json:"role"`
	Holder     *Holder               `json:"holder"`
	Candidates []rolestate.Candidate `json:"candidates"`
}

// Holder is the latest lease of a role. Expired and LeftMS are computed
// when the row is built, as this observer judges the lease: it runs out
// at [LeaseEnd], the lease's span counted from when the view applied its
// record, never at the holder's wall-clock deadline, which is as far off
// as the holder's clock is. It is what the table believes, not the
// broker's fence. A released lease (the one a resigning holder writes, or
// one its member session dropped) is always expired.
type Holder struct {
	Member codec.MemberID `json:"member"`
	// Value is the value the holder registered with, "" when none or when
	// it is no longer a candidate.
	Value     string      `json:"value,omitempty"`
	Token     codec.Token `json:"token"`
	GrantedAt int64       `json:"granted_at"`
	Deadline  int64       `json:"deadline"`
	Expired   bool        `json:"expired"`
	// LeftMS is the time left on the lease when the row was built, in
	// milliseconds: LeaseEnd minus now, 0 once expired.
	LeftMS int64 `json:"left_ms"`
	// Ends is [LeaseEnd] on the clock of the process that built the row;
	// zero in a row decoded from JSON.
	Ends time.Time `json:"-"`
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

// NewRow returns st as a [Row], its lease's expiry judged at now (see
// [LeaseEnd]). It copies what it keeps: the row shares nothing with st.
func NewRow(st rolestate.State, now time.Time) Row {
	r := Row{Role: st.Role, Candidates: make([]rolestate.Candidate, len(st.Candidates))}
	copy(r.Candidates, st.Candidates)
	if l := st.Lease; l != nil {
		end := LeaseEnd(st)
		r.Holder = &Holder{
			Member:    l.Member,
			Token:     l.Token,
			Value:     l.Value, // written under the holder's token, never a registration's
			GrantedAt: l.GrantedAt,
			Deadline:  l.Deadline,
			Expired:   !st.Live(now),
			Ends:      end,
			Dropped:   st.SessionVouch() == rolestate.Dropped,
		}
		if !r.Holder.Expired {
			r.Holder.LeftMS = end.Sub(now).Milliseconds()
		}
	}
	return r
}

// LeaseEnd returns when st's lease runs out as this observer judges it:
// [rolestate.State.LeaseEnd], st.LeaseSeenAt (when the view applied the
// lease record, on its clock) plus [rolestate.LeaseSpan] of the lease. A
// holder's clock that runs ahead or behind does not move it; a view that
// first saw the lease when it started counts the whole span from then.
// For a state without LeaseSeenAt (a source that does not stamp it) it is
// the lease's deadline, capped at rolestate.MaxLeaseSpan after its
// GrantedAt. st.Lease must not be nil.
func LeaseEnd(st rolestate.State) time.Time { return st.LeaseEnd() }

// Empty reports whether the row has neither a lease nor a candidate: the
// table does not know the role.
func (r Row) Empty() bool { return r.Holder == nil && len(r.Candidates) == 0 }
