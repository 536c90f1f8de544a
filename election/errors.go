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

// ErrMemberInUse matches the [*MemberInUseError] that [Session.Run] and
// [Election.Campaign] return when another live process runs under
// Config.Member: this session left without writing anything for it
// (the same error as [processor.ErrMemberInUse]).
var ErrMemberInUse = processor.ErrMemberInUse

// ErrNotHolder is what [Election.Resign] returns when this member did not
// hold the role (the same error as [processor.ErrNotHolder]).
var ErrNotHolder = processor.ErrNotHolder

// ViewError is what [Session.Run] returns when the view of the role topic
// stopped with an error rather than because ctx ended: the member left
// (resigning what it held) because it could no longer follow its roles.
// Err is the view's error, wrapped, so errors.Is and errors.As reach the
// cause (sarama.ErrUnknownTopicOrPartition when the role topic is
// missing, for one).
type ViewError struct {
	// CaughtUp is true when the view failed after it had caught up;
	// false when it never caught up, and the member never started.
	CaughtUp bool
	// Err is the view's error.
	Err error
}

func (e *ViewError) Error() string {
	if e.CaughtUp {
		return fmt.Sprintf("election: following the role topic: %v", e.Err)
	}
	return fmt.Sprintf("election: reading the role topic: %v", e.Err)
}

func (e *ViewError) Unwrap() error { return e.Err }

// ErrReadOnly is returned by [Election.Campaign], [Election.Resign] and
// [Session.Resign] in a session without a member (Config.Member ""),
// which only reads.
var ErrReadOnly = errors.New("election: the session has no member: it only reads")
