package cli

import (
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/roleread"
)

func describeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "describe",
		Usage:     "show the fencing token of a role from the transaction coordinator, and its lease",
		UsageText: "krole describe ROLE [--timeout D]",
		Description: "Asks the transaction coordinator about the role's transactional id\n" +
			"(--txn-prefix + ROLE): TOKEN is the producer id and epoch it has for it,\n" +
			"whoever minted them, the only token the brokers accept lease writes from\n" +
			"(\"none\" when the role was never taken). The coordinator keeps that token after\n" +
			"its holder released the role or died: it says who may write, not that anybody\n" +
			"holds the role. LEASE says that, from the role's newest lease in the role topic:\n" +
			"\"live\" (its member and the time left, judged as 'krole leader' does: see there\n" +
			"for the bound), \"released\" (its holder resigned; nobody holds the role),\n" +
			"\"expired\" (its holder stopped renewing), or \"none\". Its fence is the holding's\n" +
			"fencing number: the offset of the holding's first lease record, greater than\n" +
			"every earlier holding's. describe takes no epoch and joins no group, so it\n" +
			"disturbs no one.\n\n" +
			"JSON: {\"role\":R,\"held\":BOOL,\"token\":{\"producer_id\":N,\"epoch\":N} or null,\n" +
			"       \"lease\":{\"state\":\"live\"|\"released\"|\"expired\",\"member\":M,\n" +
			"                \"token\":{\"producer_id\":N,\"epoch\":N},\"fence\":N,\"left_ms\":N,\"vouched_at\":MS} or null}\n" +
			"\"vouched_at\" is when the holder's latest renewal began (its lease's or its\n" +
			"member session's heartbeat's, by its clock).\n" +
			"\"held\" is true when the coordinator has a token for the role (TOKEN), whether\n" +
			"or not a member holds the role: see \"lease\".",
		ArgsUsage: "ROLE",
		Flags:     []ucli.Flag{timeoutFlag()},
		Action:    withTimeout(runDescribe, false),
	}
}

// describeResult is the JSON output of `krole describe`. Held and Token
// are the coordinator's: Held is true when it has a token for the role's
// transactional id, which it keeps after a release; Lease is the role's
// newest lease, nil when it has none or when the principal may not read
// the role topic (LeaseUnknown then says why).
type describeResult struct {
	Role         string        `json:"role"`
	Held         bool          `json:"held"`
	Token        *codec.Token  `json:"token"`
	Lease        *render.Lease `json:"lease"`
	LeaseUnknown string        `json:"lease_unknown,omitempty"`
}

func runDescribe(c *ucli.Context) error {
	rc, err := openRole(c, roleNeeds{})
	if err != nil {
		return err
	}
	defer rc.close()
	role, t := rc.role, rc.t
	tok, ok, err := t.Describe(c.Context, role)
	if err != nil {
		return err
	}
	// The role's newest lease, judged as a one-shot answer is (see
	// roleread.Settled).
	_, st, err := roleread.Settled(c.Context, t, role)
	res := describeResult{Role: string(role), Held: ok}
	switch {
	case fencing.IsNotAuthorized(err):
		// The coordinator's token is describe's answer, and a third party
		// checking a writer's token needs only Describe on the
		// transactional id: without Read on the topic the lease is unknown.
		res.LeaseUnknown = fmt.Sprintf("not authorized to read topic %s", t.Config().Topic)
		fmt.Fprintf(stderr(c), "krole describe: the lease is unknown: %s (READ on the topic shows it)\n", res.LeaseUnknown)
	case err != nil:
		return err
	default:
		res.Lease = render.LeaseOf(st, time.Now())
	}
	if ok {
		res.Token = &tok
	}
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), res)
	}
	tw := render.NewTable(stdout(c), "ROLE", "TOKEN", "TRANSACTIONAL ID", "LEASE")
	token := "none"
	if ok {
		token = tok.String()
	}
	lease := render.LeaseText(res.Lease)
	if res.LeaseUnknown != "" {
		lease = "unknown: " + res.LeaseUnknown
	}
	tw.Row(string(role), token, t.Config().TransactionalID(string(role)), lease)
	return tw.Flush()
}
