package codec

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (with errors.Is) by every [*InvalidError].
var ErrInvalid = errors.New("invalid")

// ErrMalformed is returned, wrapped, when bytes do not decode as a krole key
// or value: garbage, a key of another application, a value missing a field.
var ErrMalformed = errors.New("malformed record")

// InvalidError says which naming or value rule an input broke. It matches
// [ErrInvalid] with errors.Is.
type InvalidError struct {
	// What names the kind of input: "role", "member id", "token",
	// "lease", "key" or "record".
	What string
	// Value is the input as given (a long name is cut to its first 16
	// bytes and "...").
	Value string
	// Rule says what the input must be, and where it broke the rule.
	Rule string
}

// Error returns `invalid <What> "<Value>": <Rule>`.
func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.What, e.Value, e.Rule)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// UnknownVersionError is returned when a value was written in a format
// version newer than this reader knows. Readers skip such records and count
// them; they are not corrupt, only from the future.
type UnknownVersionError struct {
	// Version is the format version the record says it was written in,
	// newer than [SessionVersion].
	Version int
}

// Error names the record's version and the newest this reader knows.
func (e *UnknownVersionError) Error() string {
	return fmt.Sprintf("record format version %d is newer than this reader (knows up to %d)", e.Version, SessionVersion)
}
