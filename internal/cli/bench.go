package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/bench"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/internal/runner"
	"github.com/krabka/krole/internal/suggest"
	"github.com/krabka/krole/processor"
)

// The bench's defaults.
const (
	benchMembers = 3
	benchRounds  = 20
	benchLease   = 3 * time.Second
)

func benchCommand() *ucli.Command {
	common := func(extra ...ucli.Flag) []ucli.Flag {
		return append([]ucli.Flag{
			&ucli.StringFlag{Name: "chart", TakesFile: true,
				Usage: "also draw the latency distribution as SVG into `FILE`"},
			&ucli.StringSliceFlag{Name: "peer", TakesFile: true,
				Usage: "results (`FILE`s of -o json, such as the etcd peer's) to draw next to this run in --chart"},
			&ucli.StringFlag{Name: "label", Hidden: true, Usage: "the run's label in the chart and in compare"},
			&ucli.StringFlag{Name: "cpuprofile", TakesFile: true,
				Usage: "write a pprof CPU profile of this process (the embedded cluster, the bench's view) into `FILE`"},
			&ucli.DurationFlag{Name: "delay",
				Usage: "hold every request `D` on its way to the embedded cluster: a network with a round trip D longer"},
		}, extra...)
	}
	members := &ucli.IntFlag{Name: "members", Value: benchMembers, Usage: "`N` member processes campaign for the role"}
	rounds := &ucli.IntFlag{Name: "rounds", Value: benchRounds, Usage: "`R` rounds, one sample each"}
	lease := &ucli.DurationFlag{Name: "lease-duration", Value: benchLease, Usage: "the members' lease, `D`"}
	renew := &ucli.DurationFlag{Name: "heartbeat-interval", DefaultText: "lease duration / 5", Usage: "the members' heartbeat interval, `D`"}
	lock := &ucli.BoolFlag{Name: "lock", Usage: "members run no command ('krole run ROLE', held until interrupted, " +
		"as etcd's candidates run none) instead of 'krole run ROLE -- sleep 3600'"}
	trace := &ucli.BoolFlag{Name: "trace", Usage: "members log verbosely; time each round's member steps by when " +
		"their lines reach the bench (phases \"trace A -> B\"; each line's trip adds a little)"}
	return &ucli.Command{
		Name:  "bench",
		Usage: "measure failover, handover, acquire and renewals on the embedded cluster (or --brokers)",
		UsageText: "krole bench failover|handover|acquire|renew|failover-many|group|steady [flags]\n" +
			"   krole bench compare RESULT.json... [--chart FILE.svg]",
		Description: "Each subcommand starts the embedded Kafka-protocol cluster in this process\n" +
			"(as 'krole dev' does), or uses the cluster --brokers names, on a role of its\n" +
			"own, and prints min, median, p90, p99 and max in milliseconds; -o json prints\n" +
			"one object with the samples. A progress line on stderr shows the rounds.\n" +
			"Members that must die are 'krole run' processes of this binary; times are\n" +
			"measured from the signal to the new holder's lease showing in this process's\n" +
			"own view of the role topic.",
		Action: benchNoSubcommand,
		Subcommands: []*ucli.Command{
			{
				Name:      "failover",
				Usage:     "SIGKILL the holder's process, time until a new holder's lease shows",
				UsageText: "krole bench failover [--members N] [--rounds R] [--lease-duration D] [--heartbeat-interval D] [--lock]",
				Flags:     common(members, rounds, lease, renew, lock),
				Action:    func(c *ucli.Context) error { return runBenchSuccession(c, "failover") },
			},
			{
				Name:      "handover",
				Usage:     "SIGTERM the holder's process (it resigns), time until a new holder's lease shows",
				UsageText: "krole bench handover [--members N] [--rounds R] [--lease-duration D] [--heartbeat-interval D] [--lock] [--trace]",
				Flags:     common(members, rounds, lease, renew, lock, trace),
				Action:    func(c *ucli.Context) error { return runBenchSuccession(c, "handover") },
			},
			{
				Name:      "acquire",
				Usage:     "an uncontended election of a fresh member, from the start of its campaign to its committed lease",
				UsageText: "krole bench acquire [--rounds R] [--lease-duration D] [--running]",
				Flags: common(rounds, lease, renew, &ucli.BoolFlag{Name: "running",
					Usage: "time a running member taking one more role (Member.Add) instead of a fresh member's start"}),
				Action: runBenchAcquire,
			},
			benchRenewCommand(common, lease, renew),
			benchFailoverManyCommand(common, lease, renew),
			benchGroupCommand(common, lease, renew),
			{
				Name:      "compare",
				Usage:     "print results (-o json of the benches and of the peers: etcd, ZooKeeper, a consumer group) side by side, with the ratios of krole to each",
				UsageText: "krole bench compare RESULT.json... [--chart FILE.svg]",
				Flags: []ucli.Flag{&ucli.StringFlag{Name: "chart", TakesFile: true,
					Usage: "draw the latency distributions as SVG into `FILE`"}},
				Action: runBenchCompare,
			},
			benchSteadyCommand(),
			benchMemberCommand(),
		},
	}
}

// benchNoSubcommand runs when `krole bench` names no subcommand, or an
// unknown one: a usage error (exit 2), as for a missing command, so that a
// script that forgot its subcommand fails; the short usage goes to stderr.
func benchNoSubcommand(c *ucli.Context) error {
	if name := c.Args().First(); name != "" {
		hint := "see 'krole bench --help' for the subcommands"
		if s := suggest.Closest(name, benchSubcommands(c)); s != "" {
			hint = fmt.Sprintf("did you mean 'krole bench %s'? %s", s, hint)
		}
		return &UsageError{Err: fmt.Errorf("unknown bench subcommand %q", name), Hint: hint}
	}
	fmt.Fprintf(c.App.ErrWriter, "usage: %s\n\nsubcommands: %s\n\nsee 'krole bench --help' for what each does, and 'krole bench SUBCOMMAND --help' for its flags\n",
		strings.ReplaceAll(c.Command.UsageText, "\n   ", "\n       "), strings.Join(benchSubcommands(c), ", "))
	return ucli.Exit("", ExitUsage)
}

// benchSubcommands names bench's subcommands, without urfave/cli's help.
func benchSubcommands(c *ucli.Context) []string {
	var names []string
	for _, n := range commandNames(c.Command.Subcommands) {
		if n != "help" && n != "h" {
			names = append(names, n)
		}
	}
	return names
}

// benchSettings reads and checks the timing flags the subcommand has.
func benchSettings(c *ucli.Context) (processor.Settings, error) {
	s := processor.Settings{LeaseDuration: benchLease}
	if c.IsSet("lease-duration") || c.Duration("lease-duration") != 0 {
		s.LeaseDuration = c.Duration("lease-duration")
	}
	if s.LeaseDuration <= 0 {
		return s, Usagef(c, "--lease-duration %v: must be positive", s.LeaseDuration)
	}
	if c.IsSet("heartbeat-interval") {
		s.HeartbeatInterval = c.Duration("heartbeat-interval")
		if s.HeartbeatInterval <= 0 {
			return s, Usagef(c, "--heartbeat-interval %v: must be positive", s.HeartbeatInterval)
		}
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return s, Usagef(c, "%v", err)
	}
	return s, nil
}

// positive reads a positive int flag.
func positive(c *ucli.Context, name string) (int, error) {
	n := c.Int(name)
	if n <= 0 {
		return 0, Usagef(c, "--%s %d: must be at least 1", name, n)
	}
	return n, nil
}

// benchOut is what a bench gives for printing: its latencies (r), the
// whole result for -o json, the lines its text adds after the latencies
// (nil: none), and what decides the exit once printed (nil: success).
type benchOut struct {
	r     *chart.Result
	full  any
	more  func(io.Writer)
	after func() error
}

// runBench runs a bench subcommand: it fails given arguments, runs validate
// (when not nil) on its own flags, reads the members' settings
// (benchSettings), starts the environment (bench.StartEnv), runs measure
// on it, and prints and draws its result.
func runBench(c *ucli.Context, validate func() error, measure func(e *bench.Env, s processor.Settings) (benchOut, error)) error {
	if err := noArgs(c); err != nil {
		return err
	}
	if validate != nil {
		if err := validate(); err != nil {
			return err
		}
	}
	s, err := benchSettings(c)
	if err != nil {
		return err
	}
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	delay := c.Duration("delay")
	if delay < 0 || delay > 0 && c.IsSet("brokers") {
		return Usagef(c, "--delay %v: a delay of zero or more, on the embedded cluster only (not with --brokers)", delay)
	}
	e, err := bench.StartEnv(c.Context, bench.EnvOptions{Config: cfg, External: c.IsSet("brokers"), PipelineSet: c.IsSet("pipeline"),
		Delay: delay, CPUProfile: c.String("cpuprofile"), Env: runner.ClearedEnv(), Log: stderr(c)})
	if err != nil {
		return err
	}
	defer e.Close()
	out, err := measure(e, s)
	if err != nil {
		return err
	}
	out.r.Label = c.String("label")
	out.r.Settings["cluster"] = e.Name()
	if outputFormat(c) == FormatJSON {
		if err := json.NewEncoder(stdout(c)).Encode(out.full); err != nil {
			return err
		}
	} else {
		chart.WriteText(stdout(c), *out.r)
		if out.more != nil {
			out.more(stdout(c))
		}
	}
	if path := c.String("chart"); path != "" {
		if err := bench.DrawChart(path, *out.r, c.StringSlice("peer")); err != nil {
			return err
		}
	}
	if out.after != nil {
		return out.after()
	}
	return nil
}

// runBenchCompare runs `krole bench compare`.
func runBenchCompare(c *ucli.Context) error {
	if !c.Args().Present() {
		return Usagef(c, "compare needs RESULT.json files")
	}
	return bench.Compare(stdout(c), c.Args().Slice(), c.String("chart"))
}
