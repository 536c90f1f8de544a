package fencing

import (
	"errors"
	"fmt"

	"github.com/krabka/krole/codec"
)

// The kinds of error a [Transport] returns. Every error a Transport returns
// is an [*Error] whose Kind is one of these; match with errors.Is:
//
//	if errors.Is(err, fencing.ErrFenced) { ... stop acting as holder ... }
var (
	// ErrFenced: the broker refused a write because a later token holds
	// the role, or the token's producer id is gone (fenceCode lists the
	// codes). The caller must stop acting as holder at once.
	ErrFenced = errors.New("fenced")
	// ErrNotHeld: the token is not the one this transport holds for the
	// role (never minted, superseded, fenced, or retired: [ErrRetired]).
	// No request is sent.
	ErrNotHeld = errors.New("not held")
	// ErrUnknownOutcome: a request of a transaction got no definite
	// answer. The token is retired and the holding over; what the
	// transaction wrote never commits, unless the request was the commit
	// itself: then it may have (package doc, "When a request gets no
	// answer").
	ErrUnknownOutcome = errors.New("unknown outcome")
	// ErrProducer: the cluster refused a produce or transaction request
	// for a reason other than a fence.
	ErrProducer = errors.New("producer")
	// ErrClient: the cluster could not be reached or a fetch failed.
	ErrClient = errors.New("client")
	// ErrAdmin: a coordinator lookup or an admin request failed.
	ErrAdmin = errors.New("admin")
	// ErrRecord: a record of the role does not decode.
	ErrRecord = errors.New("record")
)

// ErrRetired is a cause, not a kind: the [ErrNotHeld] of a call under a
// token retired after an unknown outcome wraps it, telling a retirement
// from a fence.
var ErrRetired = errors.New("retired after an unknown outcome")

// Error is the error every Transport operation returns. Kind is one of the
// sentinels above; Err is the cause and is returned by Unwrap. Match the
// kind with errors.Is, and reach the fields with errors.As.
type Error struct {
	Kind error      // ErrFenced, ErrNotHeld, ErrUnknownOutcome, ErrProducer, ErrClient, ErrAdmin, ErrRecord
	Role codec.Role // the role of the call; empty when the call names none
	Err  error      // the cause (a sarama or broker error), or nil
}

// Fenced returns the error a deposed holder's write gets: an [*Error] of
// kind [ErrFenced] for role, wrapping cause (which may be nil).
func Fenced(role codec.Role, cause error) *Error {
	return &Error{Kind: ErrFenced, Role: role, Err: cause}
}

// Error says what failed: "fenced: another member holds role R" for
// ErrFenced, else the kind, the role and the cause.
func (e *Error) Error() string {
	switch e.Kind {
	case ErrFenced:
		return fmt.Sprintf("fenced: another member holds role %s", e.Role)
	case ErrNotHeld:
		if e.Err != nil {
			return fmt.Sprintf("not held: role %s: %v", e.Role, e.Err)
		}
		return fmt.Sprintf("not held: this transport holds no such token for role %s", e.Role)
	}
	switch {
	case e.Role == "" && e.Err == nil:
		return e.Kind.Error()
	case e.Role == "":
		return fmt.Sprintf("%v: %v", e.Kind, e.Err)
	case e.Err == nil:
		return fmt.Sprintf("%v: role %s", e.Kind, e.Role)
	}
	return fmt.Sprintf("%v: role %s: %v", e.Kind, e.Role, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the error's Kind, so errors.Is(err, ErrFenced) works through
// any wrapping.
func (e *Error) Is(target error) bool { return target == e.Kind }

// IsFenced reports whether err says that a later member holds the role.
func IsFenced(err error) bool { return errors.Is(err, ErrFenced) }
