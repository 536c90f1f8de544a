package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
)

func describeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "describe",
		Usage:     "show the fencing token that holds a role now, from the transaction coordinator",
		UsageText: "krole describe ROLE",
		Description: "Asks the transaction coordinator about the role's transactional id\n" +
			"(--txn-prefix + ROLE). The role is held when the coordinator has a producer id\n" +
			"and epoch for it, whoever minted them: that token is the only one the brokers\n" +
			"accept lease writes from. describe takes no epoch and joins no group, so it\n" +
			"disturbs no one.\n\n" +
			"JSON: {\"role\":R,\"held\":true,\"token\":{\"producer_id\":N,\"epoch\":N}}, or\n" +
			"\"held\":false,\"token\":null for a role never held.",
		ArgsUsage: "ROLE",
		Action:    runDescribe,
	}
}

// describeResult is the JSON output of `krole describe`. Token is null when
// the role is not held.
type describeResult struct {
	Role  string       `json:"role"`
	Held  bool         `json:"held"`
	Token *codec.Token `json:"token"`
}

func runDescribe(c *ucli.Context) error {
	role, err := roleArg(c)
	if err != nil {
		return err
	}
	t, err := openTransport(c)
	if err != nil {
		return err
	}
	defer t.Close()
	tok, ok, err := t.Describe(c.Context, role)
	if err != nil {
		return err
	}
	res := describeResult{Role: string(role), Held: ok}
	if ok {
		res.Token = &tok
	}
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), res)
	}
	tw := newTable(stdout(c), "ROLE", "HELD", "PRODUCER ID", "EPOCH", "TRANSACTIONAL ID")
	if ok {
		tw.row(string(role), "yes", fmt.Sprint(tok.ProducerID), fmt.Sprint(tok.Epoch), t.Config().TransactionalID(string(role)))
	} else {
		tw.row(string(role), "no", "", "", t.Config().TransactionalID(string(role)))
	}
	return tw.flush()
}
