package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/bench"
)

// The benches of one role: krole bench failover and handover (krole run
// member processes), acquire (a member in this process) and steady. The
// work is package internal/bench's.

// runBenchSuccession runs `krole bench failover` and `krole bench
// handover` (bench.Succession).
func runBenchSuccession(c *ucli.Context, kind string) error {
	var n, rounds int
	s, e, err := startBench(c, func() (err error) {
		if n, err = positive(c, "members"); err != nil {
			return err
		}
		if n < 2 {
			return Usagef(c, "--members %d: a %s needs at least 2", n, kind)
		}
		rounds, err = positive(c, "rounds")
		return err
	})
	if err != nil {
		return err
	}
	defer e.close()
	res, err := bench.Succession(c.Context, e.benchCluster(), bench.SuccessionOptions{Kind: kind, Members: n, Rounds: rounds,
		Settings: s, Lock: c.Bool("lock"), Trace: c.Bool("trace"), Run: e.run})
	if err != nil {
		return err
	}
	res.Label = c.String("label")
	res.Settings["cluster"] = e.clusterName()
	return writeBench(c, *res)
}

// runBenchAcquire runs `krole bench acquire` (bench.Acquire).
func runBenchAcquire(c *ucli.Context) error {
	var rounds int
	s, e, err := startBench(c, func() (err error) {
		rounds, err = positive(c, "rounds")
		return err
	})
	if err != nil {
		return err
	}
	defer e.close()
	res, err := bench.Acquire(c.Context, e.benchCluster(), bench.AcquireOptions{Rounds: rounds, Settings: s, Run: e.run})
	if err != nil {
		return err
	}
	res.Label = c.String("label")
	res.Settings["cluster"] = e.clusterName()
	return writeBench(c, *res)
}

func benchSteadyCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "steady",
		Usage: "N member processes hold a role for T: count elections and handovers (any is needless); exit 1 if any",
		UsageText: "krole bench steady [--members N] [--lease-duration D] [--renew-interval D] [--duration T]\n" +
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
			&ucli.DurationFlag{Name: "renew-interval", DefaultText: "lease duration / 5", Usage: "the members' renew interval, `D`"},
			&ucli.DurationFlag{Name: "duration", Value: time.Minute, Usage: "watch the role for `T` once it is held"},
			&ucli.StringFlag{Name: "label", Hidden: true, Usage: "the run's label"},
		},
		Action: runBenchSteady,
	}
}

// runBenchSteady runs `krole bench steady` (bench.Steady); it exits 1
// when a change was needless, after the members' last lines on stderr.
func runBenchSteady(c *ucli.Context) error {
	var n int
	d := c.Duration("duration")
	s, e, err := startBench(c, func() (err error) {
		if n, err = positive(c, "members"); err != nil {
			return err
		}
		if d <= 0 {
			return Usagef(c, "--duration %v: must be positive", d)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer e.close()
	res, err := bench.Steady(c.Context, e.benchCluster(), bench.SteadyOptions{Members: n, Settings: s, Duration: d, Run: e.run})
	if err != nil {
		return err
	}
	res.Label = c.String("label")
	res.Settings["cluster"] = e.clusterName()
	err = writeBenchAs(c, res.Result, res, func(w io.Writer) {
		fmt.Fprintf(w, "%-16s renewals %d  elections %d  handovers %d  releases %d  epochs without lease %d  needless %d  "+
			"max renew gap %.0f ms of a %v lease\n", "", res.Renewals, res.Elections, res.Handovers, res.Releases,
			res.EpochsWithoutLease, res.Needless, res.MaxRenewGapMS, s.LeaseDuration)
		for _, ev := range res.Rounds {
			fmt.Fprintf(w, "%-16s election at offset %.0f, %.0f ms after the renewal before it, epoch +%.0f, handover %v\n",
				"", ev["offset"], ev["gap_ms"], ev["epoch_step"], ev["handover"] == 1)
		}
	})
	if err != nil {
		return err
	}
	if res.Needless > 0 {
		// What the members said (transitions only: they run without
		// --verbose, so their last lines are the changes).
		for name, said := range res.Said {
			fmt.Fprintf(e.errOut, "%s said: %s\n", name, strings.ReplaceAll(strings.TrimSpace(said), "\n", " | "))
		}
		return ucli.Exit(fmt.Sprintf("bench steady: %d needless change(s) of holder or epoch in %v at lease %v",
			res.Needless, d, s.LeaseDuration), 1)
	}
	return nil
}
