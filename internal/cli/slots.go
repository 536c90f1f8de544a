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
