package election

import (
	"errors"
	"fmt"
)

// ErrAlreadyRun is returned by a second call of [Session.Run], and by Run
// after [Session.Close]: a Session runs once.
var ErrAlreadyRun = errors.New("election: the session has already been run")

// ViewError is what [Session.Run] returns when the view of the role topic
// stopped with an error rather than because ctx ended: the member left
// (resigning what it held) because it could no longer follow its roles.
// Err is the view's error, wrapped, so errors.Is and errors.As reach the
// cause (sarama.ErrUnknownTopicOrPartition when the role topic is
// missing, for one).
type ViewError struct {
	// CaughtUp is true when the view failed after it had caught up and
	// the member had started; false when it never caught up, and the
	// member never started.
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
