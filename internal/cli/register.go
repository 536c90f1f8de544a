package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"
)

func registerCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "register",
		Usage:     "make a member a candidate for a role, at the back of the queue",
		UsageText: "krole register ROLE --member M [--value V] [--timeout D]",
		Description: "Appends M's registration for ROLE to the role topic. Its offset is M's join\n" +
			"sequence: candidates rank by it, lowest first. Registering again moves M to the\n" +
			"back. register only queues M: holding the role takes a running member (see\n" +
			"package processor), which challenges when its turn comes.",
		ArgsUsage: "ROLE",
		Flags:     []ucli.Flag{memberFlag(), valueFlag(), timeoutFlag()},
		Action:    withTimeout(runRegister, true),
	}
}

// registerResult is the JSON output of `krole register`.
type registerResult struct {
	Role   string `json:"role"`
	Member string `json:"member"`
	Offset int64  `json:"offset"`
	Value  string `json:"value,omitempty"`
}

func runRegister(c *ucli.Context) error {
	var value string
	rc, err := openRole(c, roleNeeds{member: true, validate: func() (err error) {
		value, err = valueArg(c)
		return err
	}})
	if err != nil {
		return err
	}
	defer rc.close()
	role, member, t := rc.role, rc.member, rc.t
	off, err := t.RegisterValue(c.Context, role, member, value)
	if err != nil {
		return err
	}
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), registerResult{Role: string(role), Member: string(member), Offset: off, Value: value})
	}
	_, err = fmt.Fprintf(stdout(c), "registered %s for role %s at offset %d\n", member, role, off)
	return err
}
