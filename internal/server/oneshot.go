package server

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/rolestate"
)

// JudgedRow is [NewRow] for an answer given once (GET /v1/roles,
// /v1/roles/{role}, `krole table`, `krole leader`): the lease is judged
// by package liveness, which also counts what the holder's clock says
// of the lease's age, so that a process that read the lease a moment ago
// does not credit a holder that died long ago with a whole new span.
// Expired, LeftMS and Ends follow that verdict.
func JudgedRow(st rolestate.State, now time.Time) Row {
	r := NewRow(st, now)
	if r.Holder == nil {
		return r
	}
	v := liveness.Judge(st, now)
	r.Holder.Expired = !v.Live
	r.Holder.Ends = v.End
	r.Holder.LeftMS = 0
	if v.Live {
		r.Holder.LeftMS = v.End.Sub(now).Milliseconds()
	}
	return r
}

// SettledRows is [Rows] for an answer given once: while the holder's
// clock says a lease ran out, it waits for a renewal
// ([liveness.Settle]: at most half the lease's span after the view read
// it, bounded by ctx), then judges each row with [JudgedRow] at now().
func SettledRows(ctx context.Context, t Lookuper, now func() time.Time, roles ...codec.Role) ([]Row, error) {
	sts, err := liveness.Settle(ctx, func(ctx context.Context) ([]rolestate.State, error) { return states(ctx, t, roles) }, now)
	if err != nil {
		return nil, err
	}
	at := now()
	out := make([]Row, 0, len(sts))
	for _, st := range sts {
		out = append(out, JudgedRow(st, at))
	}
	return out, nil
}
