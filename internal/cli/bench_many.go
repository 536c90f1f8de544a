package cli

import (
	"fmt"
	"io"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/bench"
)

// The many-roles measurements: krole bench renew (one member or --members
// M) and krole bench failover-many, whose member processes are the hidden
// krole bench member (runBenchMember). The work is package internal/bench's.

func benchRenewCommand(common func(...ucli.Flag) []ucli.Flag, lease, renew ucli.Flag) *ucli.Command {
	return &ucli.Command{
		Name:      "renew",
		Usage:     "member processes hold K roles for T: transactions, renewals per second, renew latency, CPU, memory per role",
		UsageText: "krole bench renew [--roles K] [--members M] [--lease-duration D] [--renew-interval D] [--duration T]",
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
			&ucli.StringFlag{Name: "member-cpuprofile", TakesFile: true, Usage: "write a pprof CPU profile of the first member process over T into `FILE`"},
			&ucli.BoolFlag{Name: "no-view-memory", Usage: "skip the measure of a fresh view's memory (a read of the whole topic; long at 100,000 roles)"},
		),
		Action: runBenchRenew,
	}
}

func benchFailoverManyCommand(common func(...ucli.Flag) []ucli.Flag, lease, renew ucli.Flag) *ucli.Command {
	return &ucli.Command{
		Name:      "failover-many",
		Usage:     "M members hold K roles; SIGKILL one holding K/M (or --killed-roles); time until the others hold all of them again",
		UsageText: "krole bench failover-many [--roles K] [--members M] [--killed-roles N] [--lease-duration D] [--renew-interval D] [--grace D] [--wait D]",
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

// rolesOverMembers returns --roles and --members, each at least 1, with
// no more members than roles.
func rolesOverMembers(c *ucli.Context) (k, m int, err error) {
	if k, err = positive(c, "roles"); err != nil {
		return 0, 0, err
	}
	if m, err = positive(c, "members"); err != nil {
		return 0, 0, err
	}
	if m > k {
		return 0, 0, Usagef(c, "--members %d: more members than --roles %d", m, k)
	}
	return k, m, nil
}

// runBenchRenew runs `krole bench renew`.
func runBenchRenew(c *ucli.Context) error {
	var k, m int
	dur := c.Duration("duration")
	s, e, err := startBench(c, func() (err error) {
		if k, m, err = rolesOverMembers(c); err != nil {
			return err
		}
		if dur <= 0 {
			return Usagef(c, "--duration %v: must be positive", dur)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer e.close()
	res, err := bench.Renew(c.Context, e.benchCluster(), bench.RenewOptions{Roles: k, Members: m, Settings: s, Duration: dur,
		Run: e.run, MemberCPUProfile: c.String("member-cpuprofile"), NoViewMemory: c.Bool("no-view-memory")})
	fmt.Fprintln(e.errOut)
	if err != nil {
		return err
	}
	res.Label = c.String("label")
	res.Settings["cluster"] = e.clusterName()
	return writeBenchAs(c, res.Result, res, func(w io.Writer) {
		fmt.Fprintf(w, "%-16s transactions/s %.1f (%d commits, %d aborts)  held %d -> %d of %d  member CPU %.3f s/s",
			"", res.TransactionsPerS, res.Commits, res.Aborts, res.HeldAtStart, res.HeldAtEnd, k, res.CPUSPerS)
		if res.ClusterCPUSPerS != nil {
			fmt.Fprintf(w, "  cluster+bench process %.3f s/s", *res.ClusterCPUSPerS)
		}
		fmt.Fprintf(w, "\n%-16s memory per held role: member %.0f B heap + %.0f B stacks (%.0f B heap per role campaigned for), view %.0f B (%d roles in the view)\n", "",
			res.MemberBytesPerRole, res.MemberStackBytesPerRole, res.MemberBytesPerCampaignedRole, res.ViewBytesPerRole, res.ViewRoles)
		if len(res.Members) > 1 {
			for _, f := range res.Members {
				fmt.Fprintf(w, "%-16s %s: held %d -> %d of %d  transactions/s %.1f  CPU %.3f s/s\n", "",
					f.Member, f.HeldAtStart, f.HeldAtEnd, f.Roles, f.TransactionsPerS, f.CPUSPerS)
			}
		}
	})
}

// runBenchFailoverMany runs `krole bench failover-many`.
func runBenchFailoverMany(c *ucli.Context) error {
	var k, m int
	killed := c.Int("killed-roles")
	s, e, err := startBench(c, func() (err error) {
		if k, m, err = rolesOverMembers(c); err != nil {
			return err
		}
		if m < 2 {
			return Usagef(c, "--members %d: a failover needs at least 2", m)
		}
		if c.IsSet("grace") && c.Duration("grace") <= 0 {
			return Usagef(c, "--grace %v: must be positive", c.Duration("grace"))
		}
		if c.Duration("wait") <= 0 {
			return Usagef(c, "--wait %v: must be positive", c.Duration("wait"))
		}
		if c.IsSet("killed-roles") && (killed <= 0 || k-killed < m-1) {
			return Usagef(c, "--killed-roles %d: must be at least 1, and leave one of --roles %d for each of the %d other members", killed, k, m-1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer e.close()
	res, err := bench.FailoverMany(c.Context, e.benchCluster(), bench.FailoverManyOptions{Roles: k, Members: m, KilledRoles: killed, Settings: s,
		Grace: c.Duration("grace"), Wait: c.Duration("wait"), Run: e.run,
		SurvivorCPUProfile: c.String("member-cpuprofile")})
	fmt.Fprintln(e.errOut)
	if err != nil {
		return err
	}
	res.Label = c.String("label")
	res.Settings["cluster"] = e.clusterName()
	err = writeBenchAs(c, res.Result, res, func(w io.Writer) {
		fmt.Fprintf(w, "%-16s killed %s holding %d roles: %d held again, the last after %.2f s (first %.2f s)\n", "",
			res.Settings["killed"], res.KilledRoles, res.HeldAgain, res.FailoverS, res.FirstS)
		fmt.Fprintf(w, "%-16s acquisition rate %.1f roles/s (its leases fell due over %.2f s; bound: lease + roles/rate = %.2f s)  acquired twice %d  survivors lost %d\n", "",
			res.AcquisitionRate, res.DueSpreadS, res.BoundS, res.AcquiredTwice, res.SurvivorsLost)
		fmt.Fprintf(w, "%-16s longest overlap %.1f ms (roles two members held at once: %d)", "", res.LongestOverlapMS, res.OverlapRoles)
		if o := res.LongestOverlap; o != nil {
			fmt.Fprintf(w, ": %s by %s and %s", o.Role, o.Members[0], o.Members[1])
		}
		fmt.Fprintln(w)
		for _, f := range res.Members[1:] {
			fmt.Fprintf(w, "%-16s %s: acquired %d (%.2f to %.2f s after the kill), lost %d, longest heartbeat gap %.0f ms\n", "",
				f.Member, f.Acquired, f.AcquiredFirstS, f.AcquiredLastS, f.Lost, f.HeartbeatGapMaxMS)
		}
	})
	if err != nil {
		return err
	}
	if res.Violations > 0 {
		return ucli.Exit("", 1)
	}
	return nil
}
