package testcluster

import (
	"context"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// ReadRole reads role's records through t and folds them as a member
// sees them: with the latest session record of the live lease's member.
func ReadRole(ctx context.Context, t fencing.Transport, role codec.Role) (rolestate.State, error) {
	recs, err := t.ReadRoleRecords(ctx, role)
	if err != nil {
		return rolestate.State{}, err
	}
	st := rolestate.Fold(role, recs)
	if l := st.Lease; l != nil && l.Session != nil && !l.Released() {
		beats, err := t.ReadSession(ctx, l.Member)
		if err != nil {
			return rolestate.State{}, err
		}
		if n := len(beats); n > 0 {
			st.Session = &rolestate.SessionSeen{Offset: beats[n-1].Offset, Heartbeat: *beats[n-1].Record.Heartbeat}
		}
	}
	return st, nil
}
