package cli

import (
	"errors"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/runner"
)

// slotsArg returns the --slots of `krole run` (0: not set), once the
// slots of role it names are valid roles: bad input is a usage error.
func slotsArg(c *ucli.Context, role codec.Role) (int, error) {
	if !c.IsSet("slots") {
		return 0, nil
	}
	n := c.Int("slots")
	if _, err := runner.SlotRoles(role, n); err != nil {
		if errors.Is(err, codec.ErrInvalid) {
			return 0, InvalidName(err)
		}
		return 0, Usagef(c, "%v", err)
	}
	return n, nil
}

// groupArgs are the flags of `krole run` for a group.
type groupArgs struct {
	slots    int          // --slots; 0: none
	roles    []codec.Role // --roles, expanded; nil: none
	patterns []string     // --roles as given
	weight   int          // --weight; 0: not set
	drain    bool         // --drain-on-term, or its default
}

// groupFlags reads --slots, --roles, --weight and --drain-on-term, and
// the combinations they allow; anything else is a usage error, in one
// line that names what is wrong.
func groupFlags(c *ucli.Context, name codec.Role) (groupArgs, error) {
	var g groupArgs
	roles := c.IsSet("roles")
	if roles && c.IsSet("slots") {
		return g, Usagef(c, "--roles and --slots exclude each other: --slots N is a semaphore of N roles, "+
			"--roles a group over the roles named")
	}
	slots, err := slotsArg(c, name)
	if err != nil {
		return g, err
	}
	g.slots = slots
	if c.IsSet("weight") {
		if !roles {
			return g, Usagef(c, "--weight applies to a member of a group over named roles: use it with --roles")
		}
		if w := c.Int("weight"); w < 1 || w > codec.MaxWeight {
			return g, Usagef(c, "--weight %d: must be 1 to %d", w, codec.MaxWeight)
		}
		g.weight = c.Int("weight")
	}
	switch {
	case c.IsSet("drain-on-term") && !roles && slots == 0:
		return g, Usagef(c, "--drain-on-term applies to a group (--roles or --slots): a single role is "+
			"resigned to its next candidate on SIGTERM already")
	case c.IsSet("drain-on-term"):
		g.drain = c.Bool("drain-on-term")
	default:
		g.drain = roles // a group over named roles drains by default, a semaphore does not
	}
	if !roles {
		return g, nil
	}
	// A member of a group may rightly hold no role (more members than
	// roles), and takes its share from the holders by handovers: neither
	// holding none in time nor finding the roles held is a reason to
	// give up.
	if c.Bool("try") {
		return g, Usagef(c, "--try does not apply to --roles: a member of a group takes its share "+
			"from the members that hold the roles, so roles held by others are no reason to give up")
	}
	if c.IsSet("timeout") {
		return g, Usagef(c, "--timeout does not apply to --roles: a member of a group may rightly hold "+
			"no role (more members than roles), so holding none in time is no reason to give up")
	}
	g.patterns = c.StringSlice("roles")
	if g.roles, err = runner.GroupRoles(g.patterns); err != nil {
		return g, Usagef(c, "%v", err)
	}
	return g, nil
}
