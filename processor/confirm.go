package processor

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// RecentConfirmer is a [Source] whose confirmation may come from its own
// recent reads instead of a round trip (the view: view.View.ConfirmRecent).
// ConfirmRecent is Confirm, except that the state it returns holds every
// record of the role's partition committed before some moment at most
// maxAge before the call (Confirm's: before the call). A Member whose
// source implements it confirms before a challenge with maxAge
// [Settings.ConfirmFreshness] (see the package documentation,
// "Confirmations from the source's own reads").
type RecentConfirmer interface {
	ConfirmRecent(ctx context.Context, role codec.Role, maxAge time.Duration) (rolestate.Confirmed, error)
}

// ConfirmFreshness is the most a confirmation before a challenge may lag
// the moment it is asked for, when the source can confirm from its own
// reads ([RecentConfirmer]): the least of RetryBackoff, Stagger/4 and
// (LeaseDuration - RenewDeadline)/4. 75 ms with the defaults at a 3s
// lease. Why each bound is there is in the package documentation
// ("Confirmations from the source's own reads"). Call it on settings
// that [Settings.WithDefaults] filled in.
func (s Settings) ConfirmFreshness() time.Duration {
	return max(0, min(s.RetryBackoff, s.Stagger/4, (s.LeaseDuration-s.RenewDeadline)/4))
}

// confirmState confirms the role's state through the source: from its own
// recent reads when it can (RecentConfirmer, within ConfirmFreshness),
// else with Confirm's round trip.
func (r *runner) confirmState(ctx context.Context) (rolestate.Confirmed, error) {
	if rc, ok := r.m.src.(RecentConfirmer); ok {
		if w := r.m.s.ConfirmFreshness(); w > 0 {
			return rc.ConfirmRecent(ctx, r.role, w)
		}
	}
	return r.m.src.Confirm(ctx, r.role)
}
