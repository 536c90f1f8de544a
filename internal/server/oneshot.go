package server

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/rolestate"
)

// JudgedRow is [NewRow], for an answer given once (GET /v1/roles,
// /v1/roles/{role}, `krole table`, `krole leader`): every row is judged by
// package liveness, which also counts what the holder's clock says of
// its latest renewal's age, so that a process that read the lease a
// moment ago does not credit a holder that died long ago with a whole new
// span.
func JudgedRow(st rolestate.State, now time.Time) Row { return NewRow(st, now) }

// SettledRows is [Rows] for an answer given once: while the holder's
// clock says a lease (or a candidate's member session) ran out, it waits
// for a renewal
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
