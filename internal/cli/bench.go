package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/bench"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// The bench's defaults.
const (
	benchMembers = 3
	benchRounds  = 20
	benchLease   = 3 * time.Second
	// benchWait bounds every wait of a round beyond its lease.
	benchWait = 30 * time.Second
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

// benchEnv is where a bench runs: the cluster, the role topic and the
// bench's own view of it.
type benchEnv struct {
	ctx      context.Context
	cfg      fencing.Config
	brokers  string
	exe      string
	view     *view.View
	stops    []func()
	errOut   io.Writer
	run      string // a tag unique to this run, for role and member names
	embedded bool   // the cluster runs in this process
	trace    bool   // --trace: members log verbosely, their lines are timed
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
	e := &benchEnv{ctx: c.Context, exe: exe, errOut: stderr(c), run: fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)}
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
	if err := waitForView(c.Context, v, done); err != nil {
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

// benchMember is one `krole run` process of a bench.
type benchMember struct {
	name  codec.MemberID
	child *supervise.Child
	out   *tailBuffer
}

// tailBuffer keeps the last bytes a member wrote, for the error that says
// why it exited.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	// stamp (--trace) keeps every line, with when it reached this
	// process, in lines.
	stamp   bool
	partial []byte
	lines   []stampedLine
}

// stampedLine is a line a member wrote and when it reached the bench.
type stampedLine struct {
	at   time.Time
	line string
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	at := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	if t.stamp {
		t.partial = append(t.partial, p...)
		for {
			i := strings.IndexByte(string(t.partial), '\n')
			if i < 0 {
				break
			}
			t.lines = append(t.lines, stampedLine{at: at, line: string(t.partial[:i])})
			t.partial = t.partial[i+1:]
		}
	}
	return len(p), nil
}

// lineAfter returns when the first line at or after since that contains
// substr reached the bench; zero when none has.
func (t *tailBuffer) lineAfter(since time.Time, substr string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.lines {
		if !l.at.Before(since) && strings.Contains(l.line, substr) {
			return l.at
		}
	}
	return time.Time{}
}

// awaitLineAfter waits up to d for a line at or after since that contains
// substr, and returns when it reached the bench; zero when none came.
func (t *tailBuffer) awaitLineAfter(since time.Time, substr string, d time.Duration) time.Time {
	deadline := time.Now().Add(d)
	for {
		if at := t.lineAfter(since, substr); !at.IsZero() || !time.Now().Before(deadline) {
			return at
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tail is the last n lines.
func (t *tailBuffer) tail(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (t *tailBuffer) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return lines[len(lines)-1]
}

// startMember starts `krole run role --member name -- sleep 3600` with s;
// lock: `krole run role --member name`, which holds the role without a
// command until interrupted (as etcd's candidates do).
func (e *benchEnv) startMember(role codec.Role, name codec.MemberID, s processor.Settings, lock bool) (*benchMember, error) {
	out := &tailBuffer{stamp: e.trace}
	args := []string{"run", string(role), "--member", string(name),
		"--brokers", e.brokers, "--topic", e.cfg.Topic, "--txn-prefix", e.cfg.TxnPrefix, "--pipeline", pipelineFlag(e.cfg),
		"--lease-duration", s.LeaseDuration.String(), "--renew-interval", s.RenewInterval.String()}
	if e.trace {
		args = append(args, "--verbose")
	}
	if !lock {
		args = append(args, "--", "sleep", "3600")
	}
	child, err := supervise.Start(supervise.Spec{Path: e.exe, Args: args, Env: demoEnv(), Stdout: out, Stderr: out})
	if err != nil {
		return nil, fmt.Errorf("starting member %s: %w", name, err)
	}
	return &benchMember{name: name, child: child, out: out}, nil
}

// follower tracks a role's state as the bench's view follows it.
type follower struct {
	e      *benchEnv
	states <-chan rolestate.State
	state  rolestate.State
	// members are the live member processes, to fail fast when one exits
	// unasked.
	members map[codec.MemberID]*benchMember
	asked   map[codec.MemberID]bool
}

func (e *benchEnv) follow(ctx context.Context, role codec.Role) *follower {
	return &follower{e: e, states: e.view.Follow(ctx, role), state: rolestate.State{Role: role, LeaseOffset: -1},
		members: map[codec.MemberID]*benchMember{}, asked: map[codec.MemberID]bool{}}
}

var errBenchMemberExit = errors.New("a bench member exited unasked")

// await waits until ok holds for the role's state, and returns the time
// the view showed it. seen, when set, sees every state on the way.
// awaitSettled waits until one of the bench's members holds the role with
// n candidates queued (what names that wait in a timeout's error), and
// then for a renewal written after that. A member that has just joined
// judges the lease it first sees from that moment, not from its write (it
// never saw it written): a failover right after a join would measure that
// wait, up to a renew interval. So wait until every member has seen a
// lease written after it joined: a renewal that shows after the joins.
func (f *follower) awaitSettled(what string, n int, s processor.Settings) error {
	if _, err := f.await(what, s.LeaseDuration+benchWait, func(st rolestate.State) bool {
		return unreleased(st) && f.members[st.Lease.Member] != nil && len(st.Candidates) >= n
	}, nil); err != nil {
		return err
	}
	if l := f.state.Lease; l.Session != nil {
		// Renewed by its member session's heartbeats, which the view
		// does not publish: ask it for the holder's latest.
		return f.awaitHeartbeat(l.Member, s.LeaseDuration+benchWait)
	}
	joined := f.state.LeaseOffset
	_, err := f.await("a renewal after the joins", s.LeaseDuration+benchWait, func(st rolestate.State) bool {
		return unreleased(st) && st.LeaseOffset > joined
	}, nil)
	return err
}

// awaitHeartbeat waits, at most timeout, for a heartbeat of member's
// session written after the call.
func (f *follower) awaitHeartbeat(member codec.MemberID, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(f.e.ctx, timeout)
	defer cancel()
	first, _, err := f.e.view.Session(ctx, member)
	if err != nil {
		return fmt.Errorf("waiting for a renewal after the joins: %w", err)
	}
	for {
		se, ok, err := f.e.view.Session(ctx, member)
		switch {
		case err != nil:
			return fmt.Errorf("waiting for a renewal after the joins: %w", err)
		case ok && !se.Heartbeat.End && se.Offset > first.Offset:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %v for a renewal after the joins in vain", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (f *follower) await(what string, timeout time.Duration, ok func(rolestate.State) bool, seen func(rolestate.State)) (time.Time, error) {
	if ok(f.state) {
		return time.Now(), nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case st, open := <-f.states:
			if !open {
				if err := f.e.ctx.Err(); err != nil {
					return time.Time{}, err
				}
				return time.Time{}, fmt.Errorf("waiting for %s: the view of the role topic stopped", what)
			}
			at := time.Now()
			f.state = st
			if seen != nil {
				seen(st)
			}
			if ok(st) {
				return at, nil
			}
		case <-tick.C:
			for name, m := range f.members {
				if !f.asked[name] && exitedChild(m.child) {
					return time.Time{}, fmt.Errorf("%w: %s exited %s while waiting for %s: %s",
						errBenchMemberExit, name, exitText(m.child.ExitCode()), what, m.out.last())
				}
			}
		case <-f.e.ctx.Done():
			return time.Time{}, f.e.ctx.Err()
		case <-t.C:
			return time.Time{}, fmt.Errorf("waited %v for %s in vain", timeout, what)
		}
	}
}

// unreleased says whether st has a lease that is not a release.
func unreleased(st rolestate.State) bool { return st.Lease != nil && !st.Lease.Released() }

// runBenchSuccession runs `krole bench failover` and `krole bench handover`.
func runBenchSuccession(c *ucli.Context, kind string) error {
	if err := noArgs(c); err != nil {
		return err
	}
	n, err := positive(c, "members")
	if err != nil {
		return err
	}
	if n < 2 {
		return Usagef(c, "--members %d: a %s needs at least 2", n, kind)
	}
	rounds, err := positive(c, "rounds")
	if err != nil {
		return err
	}
	s, err := benchSettings(c)
	if err != nil {
		return err
	}
	lock := c.Bool("lock")
	e, err := startBenchEnv(c)
	if err != nil {
		return err
	}
	defer e.close()
	e.trace = c.Bool("trace")
	traced := map[string][]float64{}
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Context))
	defer cancel()
	role := codec.Role("bench-" + kind + "-" + e.run)
	f := e.follow(ctx, role)
	defer func() { // every member leaves before the cluster stops
		for _, m := range f.members {
			f.asked[m.name] = true
			if !exitedChild(m.child) {
				_, _ = m.child.Stop(context.Background(), 5*time.Second)
			}
		}
	}()
	join := func(name codec.MemberID) error {
		m, err := e.startMember(role, name, s, lock)
		if err != nil {
			return err
		}
		f.members[name] = m
		f.asked[name] = false
		_, err = f.await(fmt.Sprintf("%s to join the queue", name), benchWait, func(st rolestate.State) bool {
			return st.Rank(name) >= 0
		}, nil)
		return err
	}
	for i := range n {
		if err := join(codec.MemberID(fmt.Sprintf("bench-%s-%d", e.run, i+1))); err != nil {
			return err
		}
	}
	var samples, past, release, successor, lastLag, newLag []float64
	var detail []map[string]float64
	for r := range rounds {
		if err := f.awaitSettled("a holder", n, s); err != nil {
			return err
		}
		// A random phase of the renew interval, as a crash or a shutdown
		// would have. (Right after a renewal shows, the holder may still
		// wait for its EndTxn's answer: a SIGTERM then cancels the
		// renewal, which retires the token, and there is no release.)
		if err := sleepCtx(c.Context, rand.N(s.RenewInterval)); err != nil {
			return err
		}
		old := *f.state.Lease
		holder := f.members[old.Member]
		sig := syscall.SIGTERM
		if kind == "failover" {
			sig = syscall.SIGKILL
		}
		f.asked[holder.name] = true
		last := old // the dead holder's last lease the view showed
		var released time.Time
		lastSeen := f.state.LeaseSeenAt
		sent := time.Now()
		if err := syscall.Kill(holder.child.Pid(), sig); err != nil {
			return fmt.Errorf("signalling %s (pid %d): %w", holder.name, holder.child.Pid(), err)
		}
		at, err := f.await("a new holder", s.LeaseDuration+benchWait, func(st rolestate.State) bool {
			return unreleased(st) && st.Lease.Member != holder.name && st.Lease.Token.Newer(old.Token)
		}, func(st rolestate.State) {
			if st.Lease != nil && st.Lease.Member == holder.name && !st.Lease.Released() {
				last, lastSeen = *st.Lease, st.LeaseSeenAt
			}
			if st.Lease != nil && st.Lease.Member == holder.name && released.IsZero() &&
				(st.Lease.Released() || st.SessionVouch() == rolestate.Dropped) {
				released = time.Now() // a release, or the end of the session the lease names
			}
		})
		if err != nil {
			return err
		}
		samples = append(samples, float64(at.Sub(sent).Microseconds())/1000)
		if kind == "failover" {
			// Past the dead lease's due time: its deadline, or its
			// session's last heartbeat's, which kept it alive.
			past = append(past, float64(f.state.Lease.GrantedAt-bench.LeaseDue(last, bench.LastBeat(c.Context, e.view, holder.name))))
			if !lastSeen.IsZero() {
				lastLag = append(lastLag, float64(lastSeen.UnixMilli()-last.GrantedAt))
			}
			newLag = append(newLag, float64(at.UnixMilli()-f.state.Lease.GrantedAt))
		}
		if !released.IsZero() {
			release = append(release, float64(released.Sub(sent).Microseconds())/1000)
			successor = append(successor, float64(at.Sub(released).Microseconds())/1000)
		}
		round := map[string]float64{"ms": samples[len(samples)-1]}
		if kind == "failover" {
			round["past_deadline_ms"] = past[len(past)-1]
			round["new_lease_write_to_view_ms"] = newLag[len(newLag)-1]
			if !lastSeen.IsZero() {
				round["last_lease_write_to_view_ms"] = lastLag[len(lastLag)-1]
			}
		}
		if !released.IsZero() {
			round["signal_to_release_shows_ms"] = release[len(release)-1]
		}
		succ := f.members[f.state.Lease.Member]
		detail = append(detail, round)
		e.progress("%s round %d/%d: %.2f ms", kind, r+1, rounds, samples[len(samples)-1])
		select {
		case <-holder.child.Done():
		case <-time.After(benchWait):
			return fmt.Errorf("%s (pid %d) did not exit within %v of the signal", holder.name, holder.child.Pid(), benchWait)
		}
		if e.trace && succ != nil {
			// Now that the holder has exited, its lines of the round have
			// come; the successor's "elected" line may still be in its
			// pipe when the bench's view shows its lease, so wait for it
			// (bounded: a round without it is traced without that step).
			succ.out.awaitLineAfter(sent, "info: elected", benchWait)
			e.traceRound(round, traced, holder, succ, sent, released, at)
		}
		if kind == "handover" && released.IsZero() {
			fmt.Fprintf(e.errOut, "\nhandover round %d: %s wrote no release the view showed; it said: %s\n",
				r+1, holder.name, strings.ReplaceAll(strings.TrimSpace(holder.out.tail(6)), "\n", " | "))
		}
		delete(f.members, holder.name)
		// Back, at the back of the queue, under the same name.
		if _, err := f.await(fmt.Sprintf("%s to leave the queue", holder.name), s.LeaseDuration+benchWait, func(st rolestate.State) bool {
			return st.Rank(holder.name) < 0
		}, nil); err != nil {
			return err
		}
		if err := join(holder.name); err != nil {
			return err
		}
	}
	fmt.Fprintln(e.errOut)
	res := chart.Result{Kind: kind, System: "krole", Label: c.String("label"), SamplesMS: samples, Settings: map[string]any{
		"members": n, "rounds": rounds, "lease_duration": s.LeaseDuration.String(),
		"renew_interval": s.RenewInterval.String(), "stagger": s.Stagger.String(),
		"cluster": e.clusterName(), "signal": map[bool]string{true: "SIGKILL", false: "SIGTERM"}[kind == "failover"],
		"members_run": map[bool]string{true: "no command (krole run ROLE)", false: "a command (krole run ROLE -- sleep 3600)"}[lock],
	}}
	res.Stats = chart.Summarize(res.SamplesMS)
	res.Rounds = detail
	if kind == "failover" {
		res.PastDeadline = chart.NewDist(past)
	}
	if kind == "failover" {
		// Whole milliseconds (leases carry Unix ms): the bench's view saw
		// the dead holder's last lease this long after its write began, and
		// the new holder's likewise.
		res.Phases = map[string]*chart.Dist{"last_lease_write_to_view": chart.NewDist(lastLag),
			"new_lease_write_to_view": chart.NewDist(newLag)}
	}
	if len(release) > 0 {
		// signal -> the release shows in the bench's view (the holder stops
		// its command and writes the release), then -> the successor's
		// lease shows (it sees the release, confirms, takes the epoch and
		// writes its lease, and the bench's view reads it).
		res.Phases = map[string]*chart.Dist{"signal_to_release_shows": chart.NewDist(release),
			"release_to_new_lease_shows": chart.NewDist(successor)}
	}
	if len(traced) > 0 && res.Phases == nil {
		res.Phases = map[string]*chart.Dist{}
	}
	for k, v := range traced {
		res.Phases[k] = chart.NewDist(v)
	}
	return writeBench(c, res)
}

// traceSteps are the member lines --trace times, in the order they come in
// a handover: the holder's (h) and the successor's (s). Each phase runs
// from the step before it that was found.
var traceSteps = []struct{ name, who, substr string }{
	{"h_interrupted", "h", "interrupted; leaving"},         // krole run got the signal
	{"h_cmd_stopped", "h", ") stopped with code"},          // CMD exited (command mode)
	{"h_revoked", "h", "info: revoked"},                    // the holding cancelled, work stopped: the release begins
	{"h_released", "h", "info: ended the member session"},  // the session end's EndTxn answered (a leaving member releases its roles with it)
	{"release_shows", "", ""},                              // the bench's view shows the release
	{"s_saw_vacancy", "s", "info: holder changed: vacant"}, // the successor's runner saw it
	{"s_confirmed", "s", "info: challenging"},              // the confirmation returned (from the view's answer, or a Fetch)
	{"s_epoch", "s", "info: acquired an epoch"},            // InitProducerId answered
	{"s_elected", "s", "info: elected"},                    // the lease transaction done
	{"new_lease_shows", "", ""},                            // the bench's view shows the new lease
}

// traceRound times one handover round's member steps (traceSteps) by when
// their lines reached the bench, as phases from each step found to the
// next one found, into round (ms from the signal, per step) and traced
// (per phase).
func (e *benchEnv) traceRound(round map[string]float64, traced map[string][]float64,
	holder, succ *benchMember, sent, released, shown time.Time) {
	prev, prevName := sent, "signal"
	for _, st := range traceSteps {
		var at time.Time
		switch {
		case st.name == "release_shows":
			at = released
		case st.name == "new_lease_shows":
			at = shown
		case st.who == "h":
			at = holder.out.lineAfter(sent, st.substr)
		default:
			at = succ.out.lineAfter(sent, st.substr)
		}
		if at.IsZero() {
			continue
		}
		round[st.name+"_ms"] = float64(at.Sub(sent).Microseconds()) / 1000
		k := "trace " + prevName + " -> " + st.name
		traced[k] = append(traced[k], float64(at.Sub(prev).Microseconds())/1000)
		prev, prevName = at, st.name
	}
}

// startCPUProfile profiles this process into path until the returned
// func is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func (e *benchEnv) clusterName() string {
	if e.embedded {
		return "embedded (kfake, in the bench process)"
	}
	return e.brokers
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeBench prints res (table or JSON) and draws --chart.
func writeBench(c *ucli.Context, res chart.Result) error {
	if outputFormat(c) == FormatJSON {
		enc := json.NewEncoder(stdout(c))
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		chart.WriteText(stdout(c), res)
	}
	return drawBench(c, res)
}

// drawBench draws --chart: res, and the --peer results beside it.
func drawBench(c *ucli.Context, res chart.Result) error {
	if path := c.String("chart"); path != "" {
		results := []chart.Result{res}
		for _, p := range c.StringSlice("peer") {
			more, err := readResults(p)
			if err != nil {
				return err
			}
			results = append(results, more...)
		}
		if err := writeChart(path, "krole bench "+res.Kind, results); err != nil {
			return err
		}
	}
	return nil
}

// readResults reads the JSON results in path (one or more objects).
func readResults(path string) ([]chart.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []chart.Result
	dec := json.NewDecoder(f)
	for {
		var r chart.Result
		if err := dec.Decode(&r); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		chart.Summarize(r.SamplesMS) // sorts them, whatever wrote them
		out = append(out, r)
	}
}

func writeChart(path, title string, results []chart.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := chart.SVG(f, title, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runBenchCompare runs `krole bench compare`.
func runBenchCompare(c *ucli.Context) error {
	if !c.Args().Present() {
		return Usagef(c, "compare needs RESULT.json files")
	}
	var results []chart.Result
	for _, p := range c.Args().Slice() {
		rs, err := readResults(p)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	out := stdout(c)
	for _, r := range results {
		chart.WriteText(out, r)
	}
	fmt.Fprintln(out)
	chart.WriteRatios(out, results)
	if path := c.String("chart"); path != "" {
		return writeChart(path, chart.Title(results), results)
	}
	return nil
}

// pipelineFlag is cfg.Pipeline as the --pipeline flag of a member process.
func pipelineFlag(cfg fencing.Config) string {
	if cfg.Pipeline == fencing.PipelineAuto {
		return "auto"
	}
	return cfg.Pipeline
}
