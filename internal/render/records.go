package render

import (
	"io"
	"strconv"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/rolestate"
)

// Record is one element of the JSON output of `krole records`. A
// tombstone has kind and offset, member for a registration's, and
// "tombstone":true; it has no times or token.
type Record struct {
	Offset       int64        `json:"offset"`
	Kind         string       `json:"kind"`
	Member       string       `json:"member,omitempty"`
	Tombstone    bool         `json:"tombstone,omitempty"`
	RegisteredAt *int64       `json:"registered_at,omitempty"`
	Value        string       `json:"value,omitempty"` // a registration's value, when it has one
	Token        *codec.Token `json:"token,omitempty"`
	Fence        *int64       `json:"fence,omitempty"` // a lease's holding's fencing number
	GrantedAt    *int64       `json:"granted_at,omitempty"`
	Deadline     *int64       `json:"deadline,omitempty"`
	// The newest lease's liveness (see liveness.Judge): left out on other
	// records and on a release.
	Live         *bool  `json:"live,omitempty"`
	VouchedAt    *int64 `json:"vouched_at,omitempty"`
	RenewedUntil *int64 `json:"renewed_until,omitempty"`
	LeftMS       *int64 `json:"left_ms,omitempty"`
}

// judged adds to j, the newest lease's record, its liveness v.
func (j *Record) judged(v liveness.Verdict, now time.Time) {
	left := int64(0)
	if v.Live {
		left = v.End.Sub(now).Milliseconds()
	}
	until := v.RanOut.UnixMilli()
	j.Live, j.VouchedAt, j.RenewedUntil, j.LeftMS = &v.Live, &v.VouchedAt, &until, &left
}

func record(r fencing.RoleRecord) Record {
	j := Record{Offset: r.Offset, Kind: r.Key.Kind.String(), Member: string(r.Key.Member)}
	switch {
	case r.Record.Registration != nil:
		g := r.Record.Registration
		j.Member, j.RegisteredAt, j.Value = string(g.Member), &g.RegisteredAt, g.Value
	case r.Record.Lease != nil:
		l := r.Record.Lease
		j.Member, j.Token, j.GrantedAt, j.Deadline = string(l.Member), &l.Token, &l.GrantedAt, &l.Deadline
		fence := r.Offset // a holding's first lease
		if l.Fence > 0 {
			fence = l.Fence
		}
		j.Fence = &fence
	default:
		j.Tombstone = true
	}
	return j
}

// newestLease reports whether r is the newest lease of st, the one the
// holder's renewals judge.
func newestLease(st rolestate.State, r fencing.RoleRecord) bool {
	return st.Lease != nil && !st.Lease.Released() && r.Offset == st.LeaseOffset && r.Record.Lease != nil
}

// Records returns recs, a role's records in offset order, as `krole
// records -o json` prints them: [] rather than null when empty, the
// newest lease judged by st, the role's state, at now.
func Records(recs []fencing.RoleRecord, st rolestate.State, now time.Time) []Record {
	verdict := liveness.Judge(st, now)
	out := make([]Record, 0, len(recs))
	for _, r := range recs {
		j := record(r)
		if newestLease(st, r) {
			j.judged(verdict, now)
		}
		out = append(out, j)
	}
	return out
}

// RecordsTable writes recs, a role's records in offset order, as the
// table of `krole records`: the newest lease judged by st at now, times
// relative to now.
func RecordsTable(w io.Writer, recs []fencing.RoleRecord, st rolestate.State, now time.Time) error {
	verdict := liveness.Judge(st, now)
	tw := NewTable(w, "OFFSET", "KIND", "MEMBER", "TOKEN", "TIME", "DEADLINE")
	for _, r := range recs {
		j := record(r)
		kind := j.Kind
		var tok, at, deadline string
		switch {
		case j.Tombstone:
			kind += " tombstone"
		case j.RegisteredAt != nil:
			at = HumanTime(*j.RegisteredAt, now)
		case j.Token != nil && r.Record.Lease.Released():
			kind += " (released)"
			tok = j.Token.String()
		case j.Token != nil && newestLease(st, r):
			tok = j.Token.String()
			at = HumanTime(*j.GrantedAt, now)
			kind += " (expired)"
			if verdict.Live {
				kind = "lease (live)"
			}
			deadline = HumanTime(verdict.RanOut.UnixMilli(), now)
			if verdict.VouchedAt > *j.GrantedAt {
				deadline += " by heartbeat"
			}
		case j.Token != nil:
			tok = j.Token.String()
			at = HumanTime(*j.GrantedAt, now)
			deadline = HumanTime(*j.Deadline, now)
		}
		tw.Row(strconv.FormatInt(j.Offset, 10), kind, j.Member, tok, at, deadline)
	}
	return tw.Flush()
}
