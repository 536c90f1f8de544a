package server

import (
	"github.com/krabka/krole/rolestate"
	"time"

	"github.com/krabka/krole/codec"
)

// Row is one role as `krole table -o json`, GET /v1/roles and the watch
// streams show it: the one JSON shape of a role, built by [NewRow] only.
//
//	{"role":R,
//	 "holder":{"member":M,"token":{"producer_id":N,"epoch":N},"granted_at":MS,"deadline":MS,"expired":BOOL} or null,
//	 "candidates":[{"member":M,"offset":N,"registered_at":MS,"rank":0},...]}
//
// Times are Unix milliseconds. Candidates are in rank order and never null.
type Row struct {
	Role       codec.Role            `json:"role"`
	Holder     *Holder               `json:"holder"`
	Candidates []rolestate.Candidate `json:"candidates"`
}

// Holder is the latest lease of a role. Expired is computed when the row
// is built, from the lease's deadline and the local clock: it is what the
// table believes, not the broker's fence. A released lease (the one a
// resigning holder writes) is always expired.
type Holder struct {
	Member    codec.MemberID `json:"member"`
	Token     codec.Token    `json:"token"`
	GrantedAt int64          `json:"granted_at"`
	Deadline  int64          `json:"deadline"`
	Expired   bool           `json:"expired"`
}

// Released reports whether the holder's lease is a release, written by a
// holder that resigned.
func (h *Holder) Released() bool { return h != nil && h.lease().Released() }

func (h *Holder) lease() codec.Lease {
	return codec.Lease{Member: h.Member, Token: h.Token, GrantedAt: h.GrantedAt, Deadline: h.Deadline}
}

// NewRow returns st as a [Row], its lease's expiry judged at now. It copies
// what it keeps: the row shares nothing with st.
func NewRow(st rolestate.State, now time.Time) Row {
	r := Row{Role: st.Role, Candidates: make([]rolestate.Candidate, len(st.Candidates))}
	copy(r.Candidates, st.Candidates)
	if l := st.Lease; l != nil {
		r.Holder = &Holder{
			Member:    l.Member,
			Token:     l.Token,
			GrantedAt: l.GrantedAt,
			Deadline:  l.Deadline,
			Expired:   l.Expired(now.UnixMilli()) || l.Released(),
		}
	}
	return r
}

// Empty reports whether the row has neither a lease nor a candidate: the
// table does not know the role.
func (r Row) Empty() bool { return r.Holder == nil && len(r.Candidates) == 0 }
