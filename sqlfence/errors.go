package sqlfence

import (
	"errors"
	"fmt"
)

var (
	// ErrStale matches the [*StaleError] that [Fence.Do] returns when a
	// newer holding of the role has written: nothing was written.
	ErrStale = errors.New("sqlfence: a newer holding of the role has written")

	// ErrNumberReused matches the [*ReusedError] that [Fence.Do] returns
	// when another holder wrote under the same number: nothing was written.
	ErrNumberReused = errors.New("sqlfence: the fencing number was written by another holder")

	// ErrConflict wraps the database's error when it aborted a transaction
	// of [Fence.Do] for a serialization failure or a deadlock (SQLSTATE
	// 40001 or 40P01) after fn ran, or before it ran on every try: nothing
	// was written, and calling Do again is safe if fn is.
	ErrConflict = errors.New("sqlfence: the database aborted the transaction for a conflict")

	// ErrInvalid matches the errors of [New] and [Fence.Do] for a bad
	// argument: a table name, a dialect, an isolation level, a holding.
	ErrInvalid = errors.New("sqlfence: invalid argument")
)

// StaleError is what [Fence.Do] returns for a holding older than the one
// the fence table holds for its role.
type StaleError struct {
	Held   Holding // the holding Do was called with
	Number int64   // the newer holding's, as the table holds it
	Holder string  // the newer holding's holder
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("sqlfence: role %q: holding %d of %q is stale: %q has written under %d",
		e.Held.Role, e.Held.Number, e.Held.Holder, e.Holder, e.Number)
}

// Is makes the error match [ErrStale].
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ReusedError is what [Fence.Do] returns when the fence table holds the
// holding's number under another holder: the role's numbers started over
// (its topic was recreated), and the row must be reset ([Fence.Reset]).
type ReusedError struct {
	Held   Holding // the holding Do was called with
	Holder string  // the other holder that wrote under Held.Number
}

func (e *ReusedError) Error() string {
	return fmt.Sprintf("sqlfence: role %q: number %d was written by %q, not %q: the role's numbers started over; reset its fence row",
		e.Held.Role, e.Held.Number, e.Holder, e.Held.Holder)
}

// Is makes the error match [ErrNumberReused].
func (e *ReusedError) Is(target error) bool { return target == ErrNumberReused }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
