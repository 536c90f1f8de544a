package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestValueWithFormatCharactersIsRefused: `krole register --value` and
// `krole run --value` refuse a value holding a bidi override or a
// zero-width character with exit 2 and one line naming the character and
// its byte offset, before anything is written (the brokers are never
// dialled), and the line holds the character only escaped.
func TestValueWithFormatCharactersIsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"register", "db", "--member", "m1", "--value", "10.0.0.1\u202e08:"}, "format character U+202E (RIGHT-TO-LEFT OVERRIDE) at byte 8"},
		{[]string{"run", "db", "--member", "m1", "--value", "a\u200bb", "--", "true"}, "format character U+200B (ZERO WIDTH SPACE) at byte 1"},
	} {
		r := run(t, append(c.args, "-b", "127.0.0.1:1")...)
		assertOneLineError(t, r, ExitUsage)
		first, _, _ := strings.Cut(r.Stderr, "\n")
		assert.Contains(t, first, "--value: invalid value")
		assert.Contains(t, first, c.want)
		assert.NotContains(t, r.Stderr, "\u202e")
		assert.NotContains(t, r.Stderr, "\u200b")
	}
}
