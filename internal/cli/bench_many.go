package cli

import (
	"time"

	"github.com/krabka/krole/internal/bench"
	ucli "github.com/urfave/cli/v2"
)

// The bench subcommands of many roles and steady, and the hidden krole
// bench member (the member process of renew and failover-many).

func benchRenewCommand(common func(...ucli.Flag) []ucli.Flag, lease, renew ucli.Flag) *ucli.Command {
	return &ucli.Command{
		Name:      "renew",
		Usage:     "member processes hold K roles for T: transactions, renewals per second, renew latency, CPU, memory per role",
		UsageText: "krole bench renew [--roles K] [--members M] [--lease-duration D] [--heartbeat-interval D] [--duration T]",
		Description: "M 'krole bench member' processes (default 1) each hold their share of K roles,\n" +
			"which nobody else wants. Once each holds its share (or the count it holds stopped\n" +
			"growing for five leases and at least 30s), all measure one window of T at once. Prints the renew\n" +
			"latencies and transactions_per_s (every EndTxn the members sent, per second),\n" +
			"cpu_s_per_s of the members and of this process (the embedded cluster), held_at_start\n" +
			"and held_at_end (summed, and per member), and member_bytes_per_role and\n" +
			"view_bytes_per_role (live heap after a GC).",
		Flags: common(
			&ucli.IntFlag{Name: "roles", Value: 100, Usage: "the members hold `K` roles between them"},
			&ucli.IntFlag{Name: "members", Value: 1, Usage: "`M` member processes, each with K/M roles of its own"},
			lease, renew,
			&ucli.DurationFlag{Name: "duration", Value: 30 * time.Second, Usage: "measure for `T` once every member holds its roles"},
			&ucli.StringFlag{Name: "member-cpuprofile", TakesFile: true, Usage: "write a pprof CPU profile of the first member process over T into `FILE`, and its heap at T's end into FILE.heap"},
			&ucli.BoolFlag{Name: "no-view-memory", Usage: "skip the measure of a fresh view's memory (a read of the whole topic; long at 100,000 roles)"},
		),
		Action: runBenchRenew,
	}
}

func benchFailoverManyCommand(common func(...ucli.Flag) []ucli.Flag, lease, renew ucli.Flag) *ucli.Command {
	return &ucli.Command{
		Name:      "failover-many",
		Usage:     "M members hold K roles; SIGKILL one holding K/M (or --killed-roles); time until the others hold all of them again",
		UsageText: "krole bench failover-many [--roles K] [--members M] [--killed-roles N] [--lease-duration D] [--heartbeat-interval D] [--grace D] [--wait D]",
		Description: "Member processes start one after the other; each takes its K/M roles and is a\n" +
			"candidate of every role of the members started before it. With --killed-roles N,\n" +
			"the first member takes N of the K roles and the others share the other K-N (at\n" +
			"least one each): --roles 10300 --members 4 --killed-roles 10000 kills a member\n" +
			"holding 10,000 roles, with 3 survivors holding 100 of their own each. The first\n" +
			"member, which all the others are candidates of, is SIGKILLed. Prints, per role of\n" +
			"its, the time from the kill to the bench's view showing a survivor's lease;\n" +
			"failover_s (the last), acquisition_rate_per_s, bound_s (lease + roles / rate), and\n" +
			"from the members' events acquired_twice (roles elected more than once after the\n" +
			"kill), survivors_lost (roles a survivor held at the kill and lost) and\n" +
			"longest_overlap_ms (the longest time two members held one role at once, from their\n" +
			"Elected and Revoked events; the killed member's holdings end when it died).\n" +
			"Exits 1 when a role was not held again, was acquired twice, a survivor lost one\n" +
			"of its own, or two members held a role at once.",
		Flags: common(
			&ucli.IntFlag{Name: "roles", Value: 60, Usage: "the members hold `K` roles between them"},
			&ucli.IntFlag{Name: "members", Value: 3, Usage: "`M` member processes"},
			&ucli.IntFlag{Name: "killed-roles", DefaultText: "K/M",
				Usage: "the killed member holds `N` of the K roles; the other members share the rest"},
			lease, renew,
			&ucli.DurationFlag{Name: "grace", DefaultText: "the lease duration",
				Usage: "after the last role shows held again, watch for `D` more for a second election or a loss"},
			&ucli.DurationFlag{Name: "wait", Value: bench.Wait,
				Usage: "wait up to one lease plus `D` after the kill for the killed member's roles to show held again"},
			&ucli.StringFlag{Name: "member-cpuprofile", TakesFile: true,
				Usage: "write a pprof CPU profile of the first survivor (the second member) from the kill for one lease plus the wait into `FILE`"},
		),
		Action: runBenchFailoverMany,
	}
}

func benchSteadyCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "steady",
		Usage: "N member processes hold a role for T: count elections and handovers (any is needless); exit 1 if any",
		UsageText: "krole bench steady [--members N] [--lease-duration D] [--heartbeat-interval D] [--duration T]\n" +
			"   (to find the smallest safe lease on a loaded machine)",
		Description: "Starts N 'krole run ROLE -- sleep 3600' members, waits until one holds the role\n" +
			"and all N are candidates, then lets them be for T. Nobody resigns or dies, so\n" +
			"every change of holder or epoch in that window is needless: a lease that ran\n" +
			"out because a renewal, or a candidate's view of it, came too late. At the end\n" +
			"it reads the role's records and its holders' member sessions from the topic\n" +
			"(read_committed) and counts, over the window: renewals (the holder's\n" +
			"heartbeats that vouched for the role), elections (leases under a new token), handovers\n" +
			"(elections that moved the role to another member), releases, and epochs that\n" +
			"no lease carries (a challenge that fenced the holder and wrote nothing). The\n" +
			"samples are the gaps between consecutive renewals and elections (their\n" +
			"granted_at). It\n" +
			"exits 1 when any needless change happened (after the members' last lines on\n" +
			"stderr), or when a member exited.",
		Flags: []ucli.Flag{
			&ucli.IntFlag{Name: "members", Value: benchMembers, Usage: "`N` member processes campaign for the role"},
			&ucli.DurationFlag{Name: "lease-duration", Value: benchLease, Usage: "the members' lease, `D`"},
			&ucli.DurationFlag{Name: "heartbeat-interval", DefaultText: "lease duration / 5", Usage: "the members' heartbeat interval, `D`"},
			&ucli.DurationFlag{Name: "duration", Value: time.Minute, Usage: "watch the role for `T` once it is held"},
			&ucli.StringFlag{Name: "label", Hidden: true, Usage: "the run's label"},
		},
		Action: runBenchSteady,
	}
}

// benchMemberCommand is `krole bench member`, hidden: the member process
// of `krole bench renew` and `krole bench failover-many`
// (bench.RunMember).
func benchMemberCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "member",
		Hidden: true,
		Usage:  "the member process of 'krole bench renew' and 'failover-many' (JSON lines on stdout, commands on stdin)",
		Flags: []ucli.Flag{
			memberFlag(),
			&ucli.StringFlag{Name: "role-prefix", Value: "bench-renew-"},
			&ucli.IntFlag{Name: "from", Usage: "the first role's number"},
			&ucli.IntFlag{Name: "roles", Value: 1},
			&ucli.IntFlag{Name: "own", Usage: "the last N roles are its own (0: all)"},
			&ucli.DurationFlag{Name: "lease-duration", Value: benchLease},
			&ucli.DurationFlag{Name: "heartbeat-interval"},
			&ucli.BoolFlag{Name: "events"},
			&ucli.BoolFlag{Name: "view-memory"},
			&ucli.StringFlag{Name: "cpuprofile"},
		},
		Action: runBenchMember,
	}
}
