package cli

import (
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/internal/groupsum"
	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/server"
)

// tableMembersHelp is the part of `krole table --help` on --members.
const tableMembersHelp = "--members shows each group's live members instead of the roles (live as the\n" +
	"group's members judge it: a heartbeat of the member naming the group was read\n" +
	"within half its span, and its session has not ended). A row per member: WEIGHT as\n" +
	"the group counts it (0 while it drains), DRAINING, and ROLES, the roles whose\n" +
	"lease, live as the table judges it, names it. Then a line per group: MEMBERS,\n" +
	"the ROLES they hold, MAX (the most one holds), MEAN (ROLES over the members of\n" +
	"positive weight) and MAX/MEAN, 1.00 when the roles are spread evenly (with\n" +
	"unequal weights, expect the heaviest member's weight over the mean weight).\n" +
	"MEAN is \"-\" when no member has a positive weight, MAX/MEAN also when they hold\n" +
	"no role. Then the group's last --moves N moves (default 20, 0 for none), oldest\n" +
	"first, as the table read them from the role topic: the ROLE, FROM (\"-\": nobody\n" +
	"held it), TO, the CAUSE (join, leave, drain, rebalance or failover), AT (the new\n" +
	"lease's grant, on the new holder's clock) and UNHELD, how long nobody held the\n" +
	"role (\"-\": not known, as for every move read before the table caught up;\n" +
	"`krole serve` knows it for the moves it sees happen). --group NAME shows that\n" +
	"group alone. --members takes no ROLE, no --watch and no --changes.\n" +
	"JSON: an array in group order, [] when no group has a live member:\n" +
	"  {\"group\":G,\"members\":[{\"member\":M,\"weight\":N,\"draining\":BOOL,\"roles\":N},...],\n" +
	"   \"roles\":N,\"max\":N,\"mean\":F,\"max_mean\":F,\n" +
	"   \"moves\":[{\"role\":R,\"from\":M,\"to\":M,\"cause\":C,\"at\":MS,\"offset\":N,\"unheld_ms\":F},...]}\n" +
	"members in id order; \"mean\" and \"max_mean\" are null where the text shows \"-\",\n" +
	"\"from\" is \"\" and \"unheld_ms\" null where it does.\n" +
	"With --group, the array holds that group, with \"members\":[] when it has no\n" +
	"live member."

// tableMembersFlags are the flags of `krole table --members`.
func tableMembersFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.BoolFlag{Name: "members",
			Usage: "show each group's live members, their weights and the roles each holds, and the group's balance"},
		&ucli.StringFlag{Name: "group",
			Usage: "with --members: show the group `NAME` alone"},
		&ucli.IntFlag{Name: "moves", Value: server.DefaultMoves,
			Usage: "with --members: show each group's last `N` moves (0: none)"},
	}
}

// wantsMembers reports whether the command line asks for --members (or
// names a --group or --moves, which need it).
func wantsMembers(c *ucli.Context) bool {
	return c.Bool("members") || c.IsSet("group") || c.IsSet("moves")
}

func runTableMembers(c *ucli.Context) error {
	name := c.String("group")
	lv, err := readyView(c, func() error {
		switch {
		case !c.Bool("members") && c.IsSet("group"):
			return Usagef(c, "--group needs --members: it names the group whose members to show")
		case !c.Bool("members"):
			return Usagef(c, "--moves needs --members: it shows the moves of each group's roles")
		case c.Args().Len() > 0:
			return Usagef(c, "--members takes no ROLE: it counts every role the members hold")
		case c.Bool("watch"):
			return Usagef(c, "--members does not --watch: run it again for a fresh table")
		case c.Bool("changes"):
			return Usagef(c, "--changes needs --watch: it shows a live table's changes of holder")
		case c.Int("moves") < 0:
			return Usagef(c, "--moves %d: it is 0 (none) or more", c.Int("moves"))
		}
		if c.IsSet("group") {
			if err := codec.CheckGroup(name); err != nil {
				return InvalidName(err)
			}
		}
		return nil
	}, false)
	if err != nil {
		return err
	}
	defer lv.Stop()
	rows, err := server.SettledRows(c.Context, server.WithSessions(lv.View), time.Now)
	if err != nil {
		return err
	}
	groups, err := lv.Groups(c.Context, time.Time{})
	if err != nil {
		return err
	}
	if c.IsSet("group") {
		groups = map[string][]group.Member{name: groups[name]}
	}
	moves, err := server.ReadMoves(c.Context, lv.View, groups)
	if err != nil {
		return err
	}
	tables := groupsum.Build(groups, server.HeldRoles(rows), moves, c.Int("moves"))
	if outputFormat(c) == FormatJSON {
		err = writeJSON(stdout(c), tables)
	} else {
		err = render.GroupTables(stdout(c), tables, name, time.Now())
	}
	if err != nil {
		return err
	}
	return lv.Stop()
}
