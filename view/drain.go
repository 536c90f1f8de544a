package view

import (
	"context"

	"github.com/krabka/krole/codec"
)

// Drain requests (codec.DrainRequest): the view keeps each member's
// latest, as compaction does, and a tombstone on its key deletes it. They
// are plain appends, as registrations are: anyone with Write on the role
// topic can ask a member of a group to hand its roles over, as it can
// step a holder down, but cannot make a member take, hold or keep a role.
// A request names one incarnation of the member's session, so a member
// that starts again (a new nonce) is not drained by an older request.

// drainEntry is a member's latest drain request and its offset.
type drainEntry struct {
	off int64
	req codec.DrainRequest
}

// applyDrainLocked keeps member's drain request rec at off, or deletes
// the member's on a tombstone, unless a later record is kept. ix.mu must
// be held.
func (ix *index) applyDrainLocked(member codec.MemberID, rec codec.Record, off int64) bool {
	ix.applied++
	d, ok := ix.drains[member]
	if ok && d.off >= off {
		return false
	}
	if rec.Drain == nil {
		delete(ix.drains, member)
		return ok
	}
	ix.drains[member] = drainEntry{off: off, req: *rec.Drain}
	return true
}

// dropDrainsLocked forgets the drain requests of partition p (its offsets
// went backwards: it is read again from its start). ix.mu must be held.
func (ix *index) dropDrainsLocked(p int32) {
	for m := range ix.drains {
		if codec.SessionPartition(m, ix.nparts) == p {
			delete(ix.drains, m)
		}
	}
}

// DrainRequested reports whether member's latest drain request names the
// session incarnation nonce: a member of a group asks it for its current
// incarnation, and drains when it does. It waits for the catch-up as
// every lookup does.
func (v *View) DrainRequested(ctx context.Context, member codec.MemberID, nonce string) (bool, error) {
	req, ok, err := v.DrainRequest(ctx, member)
	return ok && req.Nonce == nonce, err
}

// DrainRequest returns member's latest drain request, and whether there
// is one. It waits for the catch-up as every lookup does.
func (v *View) DrainRequest(ctx context.Context, member codec.MemberID) (codec.DrainRequest, bool, error) {
	if err := v.await(ctx); err != nil {
		return codec.DrainRequest{}, false, err
	}
	v.index.mu.RLock()
	defer v.index.mu.RUnlock()
	d, ok := v.index.drains[member]
	return d.req, ok, nil
}
