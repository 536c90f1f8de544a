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

// ErrUnknownKind is returned, wrapped with [ErrMalformed], by [DecodeKey]
// for a key of krole's shape, krole/<kind>/..., whose kind this reader
// does not know: a newer writer's, which readers skip and count as they
// do a value of a newer format version.
var ErrUnknownKind = errors.New("of a kind newer than this reader")

// InvalidError says which naming or value rule an input broke. It matches
// [ErrInvalid] with errors.Is.
type InvalidError struct {
	What  string // the kind of input: "role", "member id", "value", ...
	Value string // the input, a long one cut to 16 bytes and "..."
	Rule  string // what the input must be, and where it broke the rule
}

// Error returns `invalid <What> "<Value>": <Rule>`.
func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.What, e.Value, e.Rule)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// UnknownVersionError: a value's format version is newer than this reader
// knows. Readers skip such records and count them.
type UnknownVersionError struct {
	Version int // newer than [DrainVersion]
}

// Error names the record's version and the newest this reader knows.
func (e *UnknownVersionError) Error() string {
	return fmt.Sprintf("record format version %d is newer than this reader (knows up to %d)", e.Version, DrainVersion)
}
