package codec

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// CheckWriteValue reports whether v may be written as a value:
// [CheckValue]'s rules, and no control (C0, DEL, C1) or format character
// (Cf: bidi overrides, zero-width characters), which would reorder or
// hide what a printer shows around it. The error names the first such
// character. Readers do not apply it; printers escape ([PrintableValue]).
func CheckWriteValue(v string) error {
	if err := CheckValue(v); err != nil {
		return err
	}
	for i, r := range v {
		switch {
		case unicode.IsControl(r):
			return &InvalidError{What: "value", Value: clipName(v),
				Rule: fmt.Sprintf("control character %U at byte %d; a value is printed as is, so it may hold no control characters", r, i)}
		case unicode.Is(unicode.Cf, r):
			return &InvalidError{What: "value", Value: clipName(v),
				Rule: fmt.Sprintf("format character %U%s at byte %d; a value is shown as is, so it may hold no invisible formatting characters", r, formatName(r), i)}
		}
	}
	return nil
}

// formatNames names the format characters most likely to be met in a
// value; the others are named by code point alone.
var formatNames = map[rune]string{
	0x00AD: "SOFT HYPHEN",
	0x061C: "ARABIC LETTER MARK",
	0x200B: "ZERO WIDTH SPACE",
	0x200C: "ZERO WIDTH NON-JOINER",
	0x200D: "ZERO WIDTH JOINER",
	0x200E: "LEFT-TO-RIGHT MARK",
	0x200F: "RIGHT-TO-LEFT MARK",
	0x202A: "LEFT-TO-RIGHT EMBEDDING",
	0x202B: "RIGHT-TO-LEFT EMBEDDING",
	0x202C: "POP DIRECTIONAL FORMATTING",
	0x202D: "LEFT-TO-RIGHT OVERRIDE",
	0x202E: "RIGHT-TO-LEFT OVERRIDE",
	0x2060: "WORD JOINER",
	0x2066: "LEFT-TO-RIGHT ISOLATE",
	0x2067: "RIGHT-TO-LEFT ISOLATE",
	0x2068: "FIRST STRONG ISOLATE",
	0x2069: "POP DIRECTIONAL ISOLATE",
	0xFEFF: "ZERO WIDTH NO-BREAK SPACE",
}

// formatName is " (NAME)" for a format character in formatNames, else "".
func formatName(r rune) string {
	if n, ok := formatNames[r]; ok {
		return " (" + n + ")"
	}
	return ""
}

// PrintableValue returns v itself when it is valid UTF-8 of printable
// characters and spaces, else strconv.Quote(v), so no control, invalid or
// invisible byte read from the topic reaches a terminal or script.
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
