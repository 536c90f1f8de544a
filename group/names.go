package group

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/krabka/krole/codec"
)

// MaxRoles bounds the roles one pattern may name.
const MaxRoles = 1_000_000

// Expand returns the roles a pattern names: "shard-{0..1023}" names
// shard-0 to shard-1023; "s{000..099}" pads to the bounds' width; a
// pattern without braces names itself. At most one range, ascending.
func Expand(pattern string) ([]codec.Role, error) {
	open := strings.IndexByte(pattern, '{')
	if open < 0 {
		r, err := codec.NewRole(pattern)
		if err != nil {
			return nil, err
		}
		return []codec.Role{r}, nil
	}
	end := strings.IndexByte(pattern[open:], '}')
	if end < 0 {
		return nil, fmt.Errorf("group pattern %q: '{' without '}'", pattern)
	}
	end += open
	prefix, body, suffix := pattern[:open], pattern[open+1:end], pattern[end+1:]
	if strings.ContainsAny(suffix, "{}") || strings.ContainsAny(prefix, "}") {
		return nil, fmt.Errorf("group pattern %q: at most one {FROM..TO} range", pattern)
	}
	lo, hi, ok := strings.Cut(body, "..")
	from, err1 := strconv.Atoi(lo)
	to, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || from < 0 || to < 0 {
		return nil, fmt.Errorf("group pattern %q: the range must be {FROM..TO} with whole numbers, such as {0..1023}", pattern)
	}
	if to < from {
		return nil, fmt.Errorf("group pattern %q: the range runs backwards (%d > %d)", pattern, from, to)
	}
	if to-from+1 > MaxRoles {
		return nil, fmt.Errorf("group pattern %q: %d roles, more than %d", pattern, to-from+1, MaxRoles)
	}
	width := 0
	if len(lo) > 1 && lo[0] == '0' {
		width = max(len(lo), len(hi))
	}
	roles := make([]codec.Role, 0, to-from+1)
	for i := from; i <= to; i++ {
		r, err := codec.NewRole(fmt.Sprintf("%s%0*d%s", prefix, width, i, suffix))
		if err != nil {
			return nil, fmt.Errorf("group pattern %q: %w", pattern, err)
		}
		roles = append(roles, r)
	}
	return roles, nil
}
