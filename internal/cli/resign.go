package cli

import (
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
)

func resignCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "resign",
		Usage:     "remove a member from a role's candidates (its deregistration)",
		UsageText: "krole resign ROLE --member M",
		Description: "Writes a tombstone on M's registration for ROLE, which removes M from the\n" +
			"candidates. Resigning a member that is not registered is harmless. resign does\n" +
			"not end a lease M holds: the CLI holds no token of the role. The role passes to\n" +
			"the next candidate when that lease ends, or at once when M's own process resigns.",
		ArgsUsage: "ROLE",
		Flags:     []ucli.Flag{memberFlag()},
		Action:    runResign,
	}
}

// resignResult is the JSON output of `krole resign`.
type resignResult struct {
	Role   string `json:"role"`
	Member string `json:"member"`
}

func runResign(c *ucli.Context) error {
	role, err := roleArg(c)
	if err != nil {
		return err
	}
	member, err := memberArg(c)
	if err != nil {
		return err
	}
	t, err := openTransport(c)
	if err != nil {
		return err
	}
	defer t.Close()

	// Read first, only to warn about a likely mistake; a read that fails
	// does not stop the resignation.
	var registered, holds bool
	var deadline int64
	recs, rerr := t.ReadRoleRecords(c.Context, role)
	if rerr == nil {
		for _, r := range recs {
			switch {
			case r.Key.Kind == codec.KindRegistration && r.Key.Member == member:
				registered = !r.Record.Tombstone()
			case r.Key.Kind == codec.KindLease && r.Record.Lease != nil:
				holds = r.Record.Lease.Member == member
				deadline = r.Record.Lease.Deadline
			case r.Key.Kind == codec.KindLease:
				holds = false
			}
		}
	}

	if err := t.Deregister(c.Context, role, member); err != nil {
		return err
	}
	now := time.Now()
	if rerr == nil && !registered {
		fmt.Fprintf(stderr(c), "krole: note: %s had no registration for role %s (check the name with 'krole records %s')\n", member, role, role)
	}
	if holds && deadline > now.UnixMilli() {
		fmt.Fprintf(stderr(c), "krole: note: %s still holds the lease of role %s until %s; the role passes on when it ends\n",
			member, role, humanTime(deadline, now))
	}
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), resignResult{Role: string(role), Member: string(member)})
	}
	_, err = fmt.Fprintf(stdout(c), "resigned %s from role %s\n", member, role)
	return err
}
