package processor

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// Source is where a [Member] reads the state of a role: the goka view
// (*view.View has these methods), or a fake in tests. Implementations are
// safe for concurrent use.
type Source interface {
	// Role returns the state of role, blocking until the source has caught
	// up with the role topic (or ctx ends, returning an error wrapping
	// ctx.Err()). A Member calls it when it starts and whenever it has no
	// updates to rely on.
	Role(ctx context.Context, role codec.Role) (rolestate.State, error)

	// Follow returns a channel of role's state, sent whenever it changes.
	// Updates may be coalesced (a reader that falls behind gets the latest
	// state) but the last one sent is current. The channel closes after
	// ctx ends; the goroutine that feeds it, if any, has stopped by then.
	// A nil channel means the source sends no updates, and the Member
	// polls Role every HeartbeatInterval instead.
	Follow(ctx context.Context, role codec.Role) <-chan rolestate.State

	// Confirm returns role's state once the source holds every record of
	// the role's partition that was committed when Confirm was called:
	// one round trip to the partition's leader for its last stable
	// offset, then a wait until the source has read up to it. It also
	// says whether an open transaction holds the partition's last stable
	// offset below its high watermark (rolestate.Confirmed's
	// OpenProducerID), which keeps readers from seeing anything written
	// after it began. It blocks until then or until ctx ends (returning an
	// error wrapping ctx.Err()). A Member calls it before every challenge
	// and challenges only if the rules still say so on the confirmed state;
	// it never challenges from a failed Confirm.
	Confirm(ctx context.Context, role codec.Role) (rolestate.Confirmed, error)
}

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
// (LeaseDuration - HeartbeatDeadline)/4. 75 ms with the defaults at a 3s
// lease. Why each bound is there is in the package documentation
// ("Confirmations from the source's own reads"). Call it on settings
// that [Settings.WithDefaults] filled in.
func (s Settings) ConfirmFreshness() time.Duration {
	return max(0, min(s.RetryBackoff, s.Stagger/4, (s.LeaseDuration-s.HeartbeatDeadline)/4))
}

// SessionSource is a [Source] that can look up a member's latest session
// record (*view.View has it). A Member looks up the session of a role's
// holder each time it decides, since heartbeats are not role changes and
// do not come through Follow. A Source without it leaves
// rolestate.State.Session as Role, Follow and Confirm gave it.
type SessionSource interface {
	Session(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error)
}

// sessionSettler is a [SessionSource] that can wait until every session
// record of a member it has read is verified (*view.View's
// SessionSettled): the member's vetting at its start asks it, so that a
// live process's heartbeat, not verified yet, is not taken for none.
type sessionSettler interface {
	SessionSettled(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error)
}

// FollowNotifier is a [Source] that can follow a role without a
// channel, a goroutine or a context per role (*view.View has it):
// FollowNotify is Follow until stop is called, calling offer with each
// state it would send, one call at a time, in order, then offer(_, false)
// once instead of closing the channel. offer must not block or call the
// source; it is called with the source's locks held. ctx may end the wait
// before following starts; its end later does not end it (stop does).
type FollowNotifier interface {
	FollowNotify(ctx context.Context, role codec.Role, offer func(st rolestate.State, ok bool)) (stop func())
}
