package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/view"
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
	renew := &ucli.DurationFlag{Name: "renew-interval", DefaultText: "lease duration / 5", Usage: "the members' renew interval, `D`"}
	lock := &ucli.BoolFlag{Name: "lock", Usage: "members run no command ('krole run ROLE', held until interrupted, " +
		"as etcd's candidates run none) instead of 'krole run ROLE -- sleep 3600'"}
	trace := &ucli.BoolFlag{Name: "trace", Usage: "members log verbosely; time each round's member steps by when " +
		"their lines reach the bench (phases \"trace A -> B\"; each line's trip adds a little)"}
	return &ucli.Command{
		Name:  "bench",
		Usage: "measure failover, handover, acquire and renewals on the embedded cluster (or --brokers)",
		UsageText: "krole bench failover|handover|acquire|renew|failover-many|steady [flags]\n" +
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
				UsageText: "krole bench failover [--members N] [--rounds R] [--lease-duration D] [--renew-interval D] [--lock]",
				Flags:     common(members, rounds, lease, renew, lock),
				Action:    func(c *ucli.Context) error { return runBenchSuccession(c, "failover") },
			},
			{
				Name:      "handover",
				Usage:     "SIGTERM the holder's process (it resigns), time until a new holder's lease shows",
				UsageText: "krole bench handover [--members N] [--rounds R] [--lease-duration D] [--renew-interval D] [--lock] [--trace]",
				Flags:     common(members, rounds, lease, renew, lock, trace),
				Action:    func(c *ucli.Context) error { return runBenchSuccession(c, "handover") },
			},
			{
				Name:      "acquire",
				Usage:     "an uncontended election of a fresh member, from the start of its campaign to its committed lease",
				UsageText: "krole bench acquire [--rounds R] [--lease-duration D]",
				Flags:     common(rounds, lease, renew),
				Action:    runBenchAcquire,
			},
			benchRenewCommand(common, lease, renew),
			benchFailoverManyCommand(common, lease, renew),
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
		if s := closest(name, benchSubcommands(c)); s != "" {
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
	if c.IsSet("renew-interval") {
		s.RenewInterval = c.Duration("renew-interval")
		if s.RenewInterval <= 0 {
			return s, Usagef(c, "--renew-interval %v: must be positive", s.RenewInterval)
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

// startBench fails a bench command given arguments, runs check (when not
// nil) on its own flags, reads the members' settings (benchSettings) and
// starts the cluster and processes it measures (startBenchEnv). The caller
// closes the environment.
func startBench(c *ucli.Context, check func() error) (processor.Settings, *benchEnv, error) {
	if err := noArgs(c); err != nil {
		return processor.Settings{}, nil, err
	}
	if check != nil {
		if err := check(); err != nil {
			return processor.Settings{}, nil, err
		}
	}
	s, err := benchSettings(c)
	if err != nil {
		return processor.Settings{}, nil, err
	}
	e, err := startBenchEnv(c)
	if err != nil {
		return processor.Settings{}, nil, err
	}
	return s, e, nil
}

// benchEnv is where a bench runs: the cluster, the role topic and the
// bench's own view of it.
type benchEnv struct {
	cfg      fencing.Config
	brokers  string
	exe      string
	view     *view.View
	stops    []func()
	errOut   io.Writer
	run      string // a tag unique to this run, for role and member names
	embedded bool   // the cluster runs in this process
}

// startBenchEnv starts the embedded cluster (unless --brokers was given)
// and the bench's view, caught up.
func startBenchEnv(c *ucli.Context) (*benchEnv, error) {
	cfg, err := configFrom(c)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find the krole executable to start the members: %w", err)
	}
	e := &benchEnv{exe: exe, errOut: stderr(c), run: fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)}
	if path := c.String("cpuprofile"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			return nil, err
		}
		e.stops = append(e.stops, stop)
	}
	delay := c.Duration("delay")
	if delay < 0 || delay > 0 && c.IsSet("brokers") {
		return nil, Usagef(c, "--delay %v: a delay of zero or more, on the embedded cluster only (not with --brokers)", delay)
	}
	if !c.IsSet("brokers") {
		opts := devcluster.Options{Topic: cfg.Topic, Partitions: 3}
		if delay > 0 {
			fn := faultnet.New()
			fn.SetDelay(delay)
			opts.WrapListener = fn.Wrap
			e.stops = append(e.stops, func() { fn.Close() })
		}
		cluster, err := devcluster.Start(c.Context, opts)
		if err != nil {
			return nil, fmt.Errorf("starting the embedded cluster: %w", err)
		}
		e.stops = append(e.stops, func() { cluster.Close() })
		e.embedded = true
		cfg.Brokers = cluster.ListenAddrs()
		if !c.IsSet("pipeline") {
			// The bench's own kfake answers each connection's requests
			// one at a time, in order, as Apache Kafka does (and would
			// report transaction.partition.verification.enable, which
			// kfake does not know).
			cfg.Pipeline = fencing.PipelineOn
		}
	}
	e.cfg = cfg
	e.brokers = strings.Join(cfg.Brokers, ",")
	v, err := view.New(view.Options{Config: cfg})
	if err != nil {
		e.close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Context))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = v.Run(ctx)
	}()
	e.stops = append(e.stops, func() { cancel(); <-done })
	if err := v.WaitCaughtUp(c.Context); err != nil {
		e.close()
		if c.Context.Err() != nil {
			return nil, c.Context.Err()
		}
		return nil, explainRunError(cfg, err)
	}
	e.view = v
	return e, nil
}

// close stops what startBenchEnv started, in reverse order.
func (e *benchEnv) close() {
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	e.stops = nil
}

// progress rewrites the progress line on stderr.
func (e *benchEnv) progress(format string, args ...any) {
	fmt.Fprintf(e.errOut, "\r%-70s", fmt.Sprintf(format, args...))
}
