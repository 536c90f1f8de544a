package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
)

// valueFlag is --value of `krole run` and `krole register`.
func valueFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "value", EnvVars: []string{"KROLE_VALUE"}, DefaultText: "none",
		Usage: fmt.Sprintf("a value carried in the registration, `V` (the member's address, say): "+
			"`krole leader` prints the holder's; at most %d bytes", codec.MaxValueLen)}
}

// valueArg returns --value, checked: a value that does not fit is a usage
// error naming the limit.
func valueArg(c *ucli.Context) (string, error) {
	v := c.String("value")
	if err := codec.CheckWriteValue(v); err != nil {
		return "", &UsageError{Err: fmt.Errorf("--value: %w", err)}
	}
	return v, nil
}
