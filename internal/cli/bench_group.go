package cli

import (
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/bench"
	"github.com/krabka/krole/processor"
)

// benchGroupCommand is `krole bench group`: a group of roles spread over
// members in this process (bench.RunGroup).
func benchGroupCommand(common func(...ucli.Flag) []ucli.Flag, lease, renew ucli.Flag) *ucli.Command {
	return &ucli.Command{
		Name:      "group",
		Usage:     "M members of one group spread K roles: time to balance at start, on a join, a kill and a rolling restart",
		UsageText: "krole bench group [--members M] [--roles K] [--lease-duration D] [--heartbeat-interval D] [--pause D] [--wait D]",
		Description: "Runs M processor.Members in this process, each on its own view and transport, of\n" +
			"one group over the roles shard-0 .. shard-(K-1), and times from their Elected and\n" +
			"Revoked events:\n" +
			"  start: the members start one after another (--pause between); from the last\n" +
			"    start until balanced: every role held once and no member holding more than\n" +
			"    1.05 times the mean (or the mean rounded up); max/mean once settled (no\n" +
			"    more events for two heartbeat intervals);\n" +
			"  join: one more member joins; the roles moved (handovers) against its share\n" +
			"    ceil(K/(M+1)), the time until balanced again, and each handover's unheld\n" +
			"    gap (from its Revoked to the role's next Elected);\n" +
			"  kill: that member stops without releasing (KeepOnExit): the time until all\n" +
			"    its roles are held again, the survivors' roles that moved (should be 0),\n" +
			"    and the roles won twice after the kill (double wins, should be 0);\n" +
			"  rolling restart: each first member in turn drains, stops and starts again\n" +
			"    under its id, the group rebalancing before the next: the unheld gaps, and\n" +
			"    how many lasted a lease or more (a wait for a lease to run out);\n" +
			"  memory: this process's heap in use and goroutines per role after the start\n" +
			"    (after a GC): all M members, their views, the bench's view and the\n" +
			"    embedded cluster together, not one member's cost.\n" +
			"The samples (-o json samples_ms, and --chart) are the rolling restart's gaps.",
		Flags: common(
			&ucli.IntFlag{Name: "members", Value: 10, Usage: "`M` members of the group"},
			&ucli.IntFlag{Name: "roles", Value: 1000, Usage: "the group's `K` roles"},
			lease, renew,
			&ucli.DurationFlag{Name: "pause", Value: 100 * time.Millisecond, Usage: "wait `D` between two members' starts"},
			&ucli.DurationFlag{Name: "wait", DefaultText: "30s + 10ms a role",
				Usage: "wait up to one lease plus `D` for each phase to balance"},
		),
		Action: runBenchGroup,
	}
}

// runBenchGroup runs `krole bench group`.
func runBenchGroup(c *ucli.Context) error {
	var m, k int
	return runBench(c, func() (err error) {
		if m, err = positive(c, "members"); err != nil {
			return err
		}
		if k, err = positive(c, "roles"); err != nil {
			return err
		}
		if c.Duration("pause") < 0 || c.IsSet("wait") && c.Duration("wait") <= 0 {
			return Usagef(c, "--pause %v --wait %v: a pause of zero or more, a positive wait", c.Duration("pause"), c.Duration("wait"))
		}
		return nil
	}, func(e *bench.Env, s processor.Settings) (benchOut, error) {
		o := bench.GroupOptions{Members: m, Roles: k, Settings: s, Pause: c.Duration("pause"), Wait: c.Duration("wait")}
		if c.IsSet("brokers") {
			// Roles of this run's own on a cluster that may have others'.
			o.RolePrefix = fmt.Sprintf("bench-group-%s-shard-", e.Run())
		}
		res, err := bench.RunGroup(c.Context, e, o)
		if err != nil {
			return benchOut{}, err
		}
		return benchOut{r: &res.Result, full: res, more: res.WriteDetails, after: func() error {
			if res.Kill.DoubleWins > 0 || res.Kill.OthersMoved > 0 || res.Rolling.Unfilled > 0 {
				return ucli.Exit("", 1)
			}
			return nil
		}}, nil
	})
}
