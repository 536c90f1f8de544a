package codec

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// CheckWriteValue reports whether v may be written as a value (by
// `krole run --value`, election.Config.Value, Election.Campaign):
// [CheckValue]'s rules, and no control character (C0, DEL, C1), since a
// value is printed by `krole leader` and read by scripts and terminals.
// The error is an [*InvalidError] with What "value" whose Rule names the
// first control character and its byte offset. Readers do not apply it:
// a stranger with Write on the role topic can append any bytes, so every
// printer escapes what it reads ([PrintableValue]).
func CheckWriteValue(v string) error {
	if err := CheckValue(v); err != nil {
		return err
	}
	for i, r := range v {
		if unicode.IsControl(r) {
			return &InvalidError{What: "value", Value: clipName(v),
				Rule: fmt.Sprintf("control character %U at byte %d; a value is printed as is, so it may hold no control characters", r, i)}
		}
	}
	return nil
}

// PrintableValue returns v as a printer of values shows it: v itself when
// it is valid UTF-8 of printable characters and spaces, else v quoted
// with Go's escapes (strconv.Quote: "\x1b", "\a", "\r\n", "\u202e", and
// "\\" for a backslash), so that no control byte, invalid byte or
// invisible formatting character read from the role topic reaches a
// terminal or a script, and an escaped value is told apart by its quotes.
func PrintableValue(v string) string {
	if !utf8.ValidString(v) {
		return strconv.Quote(v)
	}
	for _, r := range v {
		if r != ' ' && !strconv.IsPrint(r) {
			return strconv.Quote(v)
		}
	}
	if len(v) > 0 && v[0] == '"' {
		return strconv.Quote(v) // would read as an escaped value
	}
	return v
}
