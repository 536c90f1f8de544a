package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/bench"
	"github.com/krabka/krole/processor"
	ucli "github.com/urfave/cli/v2"
)

// The benches' actions: each checks its own flags and hands the
// measurement to package internal/bench (see runBench).

// runBenchSuccession runs `krole bench failover` and `krole bench
// handover` (bench.Succession).
func runBenchSuccession(c *ucli.Context, kind string) error {
	var n, rounds int
	return runBench(c, func() (err error) {
		if n, err = positive(c, "members"); err != nil {
			return err
		}
		if n < 2 {
			return Usagef(c, "--members %d: a %s needs at least 2", n, kind)
		}
		rounds, err = positive(c, "rounds")
		return err
	}, func(e *bench.Env, s processor.Settings) (benchOut, error) {
		res, err := bench.Succession(c.Context, e.Cluster(), bench.SuccessionOptions{Kind: kind, Members: n, Rounds: rounds,
			Settings: s, Lock: c.Bool("lock"), Trace: c.Bool("trace"), Run: e.Run()})
		return benchOut{r: res, full: res}, err
	})
}

// runBenchAcquire runs `krole bench acquire` (bench.Acquire).
func runBenchAcquire(c *ucli.Context) error {
	var rounds int
	return runBench(c, func() (err error) {
		rounds, err = positive(c, "rounds")
		return err
	}, func(e *bench.Env, s processor.Settings) (benchOut, error) {
		res, err := bench.Acquire(c.Context, e.Cluster(), bench.AcquireOptions{Rounds: rounds, Settings: s, Run: e.Run(), Running: c.Bool("running")})
		return benchOut{r: res, full: res}, err
	})
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
	return runBench(c, func() (err error) {
		if k, m, err = rolesOverMembers(c); err != nil {
			return err
		}
		if dur <= 0 {
			return Usagef(c, "--duration %v: must be positive", dur)
		}
		return nil
	}, func(e *bench.Env, s processor.Settings) (benchOut, error) {
		res, err := bench.Renew(c.Context, e.Cluster(), bench.RenewOptions{Roles: k, Members: m, Settings: s, Duration: dur,
			Run: e.Run(), MemberCPUProfile: c.String("member-cpuprofile"), NoViewMemory: c.Bool("no-view-memory")})
		fmt.Fprintln(e.Log())
		if err != nil {
			return benchOut{}, err
		}
		return benchOut{r: &res.Result, full: res, more: func(w io.Writer) { res.WriteDetails(w, k) }}, nil
	})
}

// runBenchFailoverMany runs `krole bench failover-many`.
func runBenchFailoverMany(c *ucli.Context) error {
	var k, m int
	killed := c.Int("killed-roles")
	return runBench(c, func() (err error) {
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
	}, func(e *bench.Env, s processor.Settings) (benchOut, error) {
		res, err := bench.FailoverMany(c.Context, e.Cluster(), bench.FailoverManyOptions{Roles: k, Members: m, KilledRoles: killed, Settings: s,
			Grace: c.Duration("grace"), Wait: c.Duration("wait"), Run: e.Run(),
			SurvivorCPUProfile: c.String("member-cpuprofile")})
		fmt.Fprintln(e.Log())
		if err != nil {
			return benchOut{}, err
		}
		return benchOut{r: &res.Result, full: res, more: res.WriteDetails, after: func() error {
			if res.Violations > 0 {
				return ucli.Exit("", 1)
			}
			return nil
		}}, nil
	})
}

// runBenchSteady runs `krole bench steady` (bench.Steady); it exits 1
// when a change was needless, after the members' last lines on stderr.
func runBenchSteady(c *ucli.Context) error {
	var n int
	d := c.Duration("duration")
	return runBench(c, func() (err error) {
		if n, err = positive(c, "members"); err != nil {
			return err
		}
		if d <= 0 {
			return Usagef(c, "--duration %v: must be positive", d)
		}
		return nil
	}, func(e *bench.Env, s processor.Settings) (benchOut, error) {
		res, err := bench.Steady(c.Context, e.Cluster(), bench.SteadyOptions{Members: n, Settings: s, Duration: d, Run: e.Run()})
		if err != nil {
			return benchOut{}, err
		}
		return benchOut{r: &res.Result, full: res, more: func(w io.Writer) { res.WriteDetails(w, s.LeaseDuration) }, after: func() error {
			if res.Needless == 0 {
				return nil
			}
			// What the members said (transitions only: they run without
			// --verbose, so their last lines are the changes).
			res.WriteSaid(e.Log())
			return ucli.Exit(fmt.Sprintf("bench steady: %d needless change(s) of holder or epoch in %v at lease %v",
				res.Needless, d, s.LeaseDuration), 1)
		}}, nil
	})
}

func runBenchMember(c *ucli.Context) error {
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	me, err := memberArg(c)
	if err != nil {
		return err
	}
	k := c.Int("roles")
	if k <= 0 {
		return Usagef(c, "--roles %d: must be at least 1", k)
	}
	if c.Int("from") < 0 || c.Int("own") < 0 || c.Int("own") > k {
		return Usagef(c, "--from %d --own %d: must be at least 0, and --own at most --roles", c.Int("from"), c.Int("own"))
	}
	s, err := benchSettings(c)
	if err != nil {
		return err
	}
	roles := make([]codec.Role, k)
	for i := range roles {
		roles[i] = codec.Role(fmt.Sprintf("%s%d", c.String("role-prefix"), c.Int("from")+i))
	}
	return bench.RunMember(c.Context, bench.MemberOptions{Config: cfg, Member: me, Roles: roles, Own: c.Int("own"), Settings: s,
		Events: c.Bool("events"), ViewMemory: c.Bool("view-memory"), CPUProfile: c.String("cpuprofile"),
		In: os.Stdin, Out: stdout(c), Profile: bench.StartCPUProfile})
}
