package election

import (
	"errors"
	"fmt"

	"github.com/krabka/krole/processor"
)

// ErrAlreadyRun is returned by a second call of [Session.Run], and by Run
// after [Session.Close]: a Session runs once.
var ErrAlreadyRun = errors.New("election: the session has already been run")

// ErrUnknownRole is returned by [Session.Election] of a session with a
// member for a role that is not one of Config.Roles.
var ErrUnknownRole = errors.New("election: not a role of this session")

// ErrNoLeader is returned by [Election.Leader] when the role has no live
// holder (etcd's ErrElectionNoLeader).
var ErrNoLeader = errors.New("election: the role has no live holder")

// ErrNotRunning is returned by [Election.Campaign] once [Session.Run] has
// returned (or the session was closed): nobody campaigns any more.
var ErrNotRunning = errors.New("election: the session is not running")

// ErrMemberInUse matches the [*MemberInUseError] returned when another
// live process runs under Config.Member; this session left without
// writing anything for it ([processor.ErrMemberInUse]).
var ErrMemberInUse = processor.ErrMemberInUse

// ErrNotHolder: this member did not hold the role ([processor.ErrNotHolder]).
var ErrNotHolder = processor.ErrNotHolder

// ViewError is what [Session.Run] returns when the view stopped with an
// error (the role topic missing, say): the member left, resigning what it
// held. It unwraps to the view's error.
type ViewError struct {
	CaughtUp bool  // false: the view never caught up, the member never started
	Err      error // the view's error
}

func (e *ViewError) Error() string {
	if e.CaughtUp {
		return fmt.Sprintf("election: following the role topic: %v", e.Err)
	}
	return fmt.Sprintf("election: reading the role topic: %v", e.Err)
}

func (e *ViewError) Unwrap() error { return e.Err }

// ErrReadOnly is returned by the calls that write in a session without a
// member, which only reads.
var ErrReadOnly = errors.New("election: the session has no member: it only reads")
