// Package demo is `krole demo`: an embedded Kafka-protocol cluster and
// three `krole run` processes of the krole binary campaigning for one
// role, then a failover (SIGKILL of the holder) and a handover (SIGTERM of
// the next holder), each step narrated as it happens. internal/cli has the
// command: its flags and their usage errors ([Options]).
package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/runner"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// FreeListen is where the cluster listens when a free port is wanted: the
// default of --listen, and the fallback when the --keep default is taken.
const FreeListen = "127.0.0.1:0"

// The role and members the demo shows, and how long a member has to leave
// before SIGKILL.
const (
	roleName  = codec.Role("controller")
	stopGrace = 5 * time.Second
)

// memberNames are the members the demo starts, in join order.
var memberNames = []codec.MemberID{"node-1", "node-2", "node-3"}

// memberScript is the CMD each member runs while it holds the role: one
// line that shows the token and the fencing number krole hands it, then a
// wait until it is stopped.
const memberScript = `echo "$KROLE_MEMBER is doing the $KROLE_ROLE work under token $KROLE_PRODUCER_ID/$KROLE_EPOCH, fence $KROLE_FENCE"; exec sleep 3600`

// Options are what a run of the demo is given: where its lines go and
// the settings of its flags. Every field but Exe and Env is required.
type Options struct {
	// Out receives the narration and the members' lines.
	Out io.Writer
	// Exe is the krole binary whose `krole run` the members are; "" is
	// this process's executable.
	Exe string
	// Env is added to each member's environment.
	Env []string

	// LeaseDuration is the members' lease (valid for processor.Settings).
	LeaseDuration time.Duration
	// Pause is the pause between the steps (zero: none).
	Pause time.Duration
	// Listen is the cluster's HOST:PORT (port 0: a free one). With
	// Fallback, a Listen in use is replaced by FreeListen.
	Listen   string
	Fallback bool
	// Keep leaves the cluster and the members running after the handover,
	// with what to try next printed, until ctx ends.
	Keep bool
	// Topic and TxnPrefix are the cluster's role topic and the members'
	// transactional-id prefix.
	Topic, TxnPrefix string
	// DefaultBrokers is where krole's commands look for a cluster without
	// -b: the commands printed leave -b out for a cluster there.
	DefaultBrokers string
}

// errInterrupted ends the demo's steps when ctx ended.
var errInterrupted = errors.New("interrupted")

// Run runs the demo until it is done or, with Keep, until ctx ends: an
// interruption (ctx ending) stops everything it started and returns nil.
// On every path the members leave before the cluster stops.
func Run(ctx context.Context, o Options) error {
	exe := o.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("cannot find the krole executable to start the members: %w", err)
		}
	}
	d := &demo{
		ctx:    ctx,
		out:    &lockedOut{w: o.Out},
		exe:    exe,
		invoke: invocation(exe),
		role:   roleName,
		lease:  o.LeaseDuration,
		pause:  o.Pause,
		topic:  o.Topic,
		prefix: o.TxnPrefix,
		opts:   o,
		exited: make(chan *member, len(memberNames)*4),
	}
	defer d.stopAll() // on every path: the members leave before the cluster stops
	err := d.run(o.Listen, o.Fallback, o.Keep)
	if errors.Is(err, errInterrupted) || (err != nil && d.ctx.Err() != nil) {
		d.say("")
		d.step("Interrupted: stopping everything the demo started.")
		d.stopAll()
		d.result("Stopped.")
		return nil
	}
	return err
}

// demo is one run of `krole demo`.
type demo struct {
	ctx     context.Context
	out     *lockedOut
	exe     string // the krole binary the members run
	invoke  string // how the user runs krole, for the commands printed
	role    codec.Role
	lease   time.Duration // the members' lease
	pause   time.Duration
	topic   string
	prefix  string  // the transactional-id prefix
	brokers string  // the cluster's address, once started
	opts    Options // what Run was given: the members' environment, the hooks

	cleanups []func() // run in reverse order by stopAll

	mu      sync.Mutex
	members []*member    // every member started, live or not
	exited  chan *member // members that exited unasked

	states <-chan rolestate.State // the role as the demo's view follows it
	state  rolestate.State        // the latest of states
}

// member is one `krole run` process of the demo.
type member struct {
	name  codec.MemberID
	child *supervise.Child
	out   *prefixWriter

	mu     sync.Mutex
	asked  bool // the demo asked it to exit (or killed it)
	cmdPid int  // the pid of the CMD it started last, as it reported it
}

func (m *member) expectExit() {
	m.mu.Lock()
	m.asked = true
	m.mu.Unlock()
}

// cmdStarted records the pid of the CMD m reported it started.
func (m *member) cmdStarted(pid int) {
	m.mu.Lock()
	m.cmdPid = pid
	m.mu.Unlock()
}

func (m *member) lastCmd() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmdPid
}

func (d *demo) run(listen string, fallback, keep bool) error {
	start := time.Now()
	d.say("krole demo: three members campaign for the role %q; one holds it at a time, under a lease.", d.role)
	d.say("Each step says what it does; Ctrl-C stops the demo and everything it started at any time.")
	d.say("")

	// 1. The cluster.
	d.step("Starting an embedded Kafka-protocol cluster (kfake, in this process)...")
	cluster, err := d.startCluster(listen, fallback)
	if err != nil {
		return err
	}
	d.cleanups = append(d.cleanups, func() { cluster.Close() })
	d.brokers = strings.Join(cluster.ListenAddrs(), ",")
	d.detail("brokers %s; role topic %s (compacted) created.", d.brokers, d.topic)

	cfg := fencing.Config{Brokers: []string{d.brokers}, Topic: d.topic, TxnPrefix: d.prefix}.WithDefaults()
	if err := d.follow(cfg); err != nil {
		return err
	}

	// 2. The members, one after the other: join order is rank.
	if err := d.sleep(); err != nil {
		return err
	}
	d.step("Starting %d members as separate processes, one after the other: the order they join in is their rank.", len(memberNames))
	d.detail("Each one runs:")
	d.detail("  %s", d.runCommandLineAs("krole", "node-N"))
	d.detail("While a member holds the role, krole runs the command after -- with its fencing token in")
	d.detail("KROLE_PRODUCER_ID and KROLE_EPOCH and the holding's number in KROLE_FENCE (greater than")
	d.detail("every earlier holding's); when it loses the role, krole stops the command.")
	for i, name := range memberNames {
		m, err := d.startMember(name)
		if err != nil {
			return err
		}
		if _, _, err := d.await(fmt.Sprintf("%s to join the queue", name), 20*time.Second, func(st rolestate.State) bool {
			return st.Rank(name) >= 0
		}); err != nil {
			return err
		}
		if i == 0 {
			st, _, err := d.await(fmt.Sprintf("%s to take the role", name), 20*time.Second, func(st rolestate.State) bool {
				return st.Lease != nil && !st.Lease.Released() && st.Lease.Member == m.name
			})
			if err != nil {
				return err
			}
			d.waitCmd(m, 5*time.Second)
			d.detail("%s was first: it holds %s under token %s, minted by the Kafka transaction coordinator.", name, d.role, st.Lease.Token)
		}
	}

	if err := d.sleep(); err != nil {
		return err
	}
	d.step("The table: what the role topic says, as 'krole table' shows it.")
	d.table()

	// 3. SIGKILL of the holder: the failover.
	if err := d.sleep(); err != nil {
		return err
	}
	holder := d.holderMember()
	if holder == nil {
		return fmt.Errorf("no member of the demo holds %s", d.role)
	}
	old := *d.state.Lease
	next := d.successor(holder.name)
	d.step("Killing the holder, %s (pid %d), with SIGKILL.", holder.name, holder.child.Pid())
	d.detail("It cannot resign: the others wait for its lease to run out (it ends at most %v after", d.lease)
	d.detail("its last renewal), then %s challenges and gets a new token: a dead holder's roles go to", next)
	d.detail("the live candidates by a score of role and member, so that many roles spread over them.")
	cmdPid := holder.lastCmd()
	holder.expectExit()
	killed := time.Now()
	if err := syscall.Kill(holder.child.Pid(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %s (pid %d): %w", holder.name, holder.child.Pid(), err)
	}
	<-holder.child.Done()
	d.checkCmdGone(holder.name, cmdPid)
	st, at, err := d.await("a new holder after the SIGKILL", 3*d.lease+20*time.Second, func(st rolestate.State) bool {
		return st.Lease != nil && !st.Lease.Released() && st.Lease.Member != holder.name && st.Lease.Token.Newer(old.Token)
	})
	if err != nil {
		return err
	}
	newHolder := d.member(st.Lease.Member)
	if newHolder != nil {
		d.waitCmd(newHolder, 5*time.Second)
	}
	d.result("Failover: %s holds %s %s after the SIGKILL, under token %s (%s held %s).",
		st.Lease.Member, d.role, round(at.Sub(killed)), st.Lease.Token, holder.name, old.Token)
	d.detail("The epoch went up: the brokers now refuse every transactional write under %s.", old.Token)
	// The winner deregisters the dead holder right after its lease write.
	if _, _, err := d.await("the dead holder to leave the queue", time.Second, func(st rolestate.State) bool {
		return st.Rank(holder.name) < 0
	}); err == nil {
		d.detail("%s also took %s out of the queue: the winner prunes a holder whose lease ran out.", st.Lease.Member, holder.name)
	} else if errors.Is(err, errInterrupted) {
		return err
	}
	d.table()

	// 4. SIGTERM of the new holder: it resigns, the handover.
	if err := d.sleep(); err != nil {
		return err
	}
	if newHolder == nil {
		return fmt.Errorf("the new holder %s is not a member of the demo", st.Lease.Member)
	}
	old = *st.Lease
	next = d.nextInLine(newHolder.name)
	d.step("Asking %s (pid %d) to resign, with SIGTERM.", newHolder.name, newHolder.child.Pid())
	d.detail("It stops its command, leaves the queue and ends its member session, which releases the role, so")
	d.detail("%s takes over at once, without waiting for the lease to run out.", next)
	newHolder.expectExit()
	termed := time.Now()
	if err := syscall.Kill(newHolder.child.Pid(), syscall.SIGTERM); err != nil {
		return fmt.Errorf("signalling %s (pid %d): %w", newHolder.name, newHolder.child.Pid(), err)
	}
	st, at, err = d.await("a new holder after the resignation", d.lease+20*time.Second, func(st rolestate.State) bool {
		return st.Lease != nil && !st.Lease.Released() && st.Lease.Member != newHolder.name && st.Lease.Token.Newer(old.Token)
	})
	if err != nil {
		return err
	}
	handover := at.Sub(termed)
	if m := d.member(st.Lease.Member); m != nil {
		d.waitCmd(m, 5*time.Second)
	}
	if err := d.waitExit(newHolder, stopGrace); err != nil {
		return err
	}
	d.result("Handover: %s holds %s %s after the SIGTERM, under token %s (%s held %s).",
		st.Lease.Member, d.role, round(handover), st.Lease.Token, newHolder.name, old.Token)
	d.detail("%s exited with code %d.", newHolder.name, newHolder.child.ExitCode())
	// Its deregistration comes before its session's end, which released
	// the role.
	if _, _, err := d.await("the resigned holder to leave the queue", 2*time.Second, func(st rolestate.State) bool {
		return st.Rank(newHolder.name) < 0
	}); errors.Is(err, errInterrupted) {
		return err
	}
	d.table()

	if keep {
		return d.keep()
	}

	// 5. The end.
	if err := d.sleep(); err != nil {
		return err
	}
	d.step("Stopping the members (SIGTERM: each resigns or leaves the queue) and the cluster.")
	d.stopMembers()
	d.result("Done in %s. To play with the members yourself: %s", round(time.Since(start)), d.invokeDemoKeep())
	return nil
}

// startCluster starts the embedded cluster on listen; when fallback is set
// and listen is in use, on a free port instead.
func (d *demo) startCluster(listen string, fallback bool) (*devcluster.Cluster, error) {
	opts := devcluster.Options{Listen: listen, Topic: d.topic, Partitions: 3}
	cluster, err := devcluster.Start(d.ctx, opts)
	if err != nil && fallback && errors.Is(err, syscall.EADDRINUSE) {
		d.detail("%s is in use (another krole dev or Kafka?): using a free port instead.", listen)
		opts.Listen = FreeListen
		cluster, err = devcluster.Start(d.ctx, opts)
	}
	switch {
	case err == nil:
		return cluster, nil
	case d.ctx.Err() != nil:
		return nil, errInterrupted
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("cannot listen on %s: address already in use (another krole dev or Kafka?); choose another with --listen", listen)
	}
	return nil, err
}

// follow starts the demo's own view of the role topic, and waits until it
// has caught up.
func (d *demo) follow(cfg fencing.Config) error {
	v, err := view.New(view.Options{Config: cfg})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(d.ctx))
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = v.Run(ctx)
	}()
	d.cleanups = append(d.cleanups, func() {
		cancel()
		<-done
	})
	if err := v.WaitCaughtUp(d.ctx); err != nil {
		if d.ctx.Err() != nil {
			return errInterrupted
		}
		if errors.Is(err, view.ErrStopped) {
			<-done // Run has returned, or is returning
		}
		select {
		case <-done: // Run failed: its error says why
			if runErr != nil {
				err = runErr
			}
		default: // Run still runs: runErr is not to be read
		}
		return explain.RunError(cfg, err)
	}
	d.states = v.Follow(ctx, d.role)
	d.state = rolestate.State{Role: d.role, LeaseOffset: -1}
	return nil
}

// startMember starts `krole run` for name, its output prefixed with its
// name.
func (d *demo) startMember(name codec.MemberID) (*member, error) {
	if err := d.ctx.Err(); err != nil {
		return nil, errInterrupted
	}
	m := &member{name: name}
	m.out = &prefixWriter{out: d.out, prefix: fmt.Sprintf("  [%s] ", name)}
	// The member reports the pid of each CMD it starts on a pipe of its
	// own (see Options.ReportEnv): the demo reads it as data.
	rep, repW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting member %s: %w", name, err)
	}
	child, err := supervise.Start(supervise.Spec{
		Path:       d.exe,
		Args:       d.runArgs(name),
		Env:        append(append([]string(nil), d.opts.Env...), runner.ReportFDEnv+"=3"),
		ExtraFiles: []*os.File{repW},
		Stdout:     m.out,
		Stderr:     m.out,
	})
	repW.Close() // the member holds the only write end now
	if err != nil {
		rep.Close()
		return nil, fmt.Errorf("starting member %s: %w", name, err)
	}
	go func() { // ends when the member exits: the end of the pipe
		defer rep.Close()
		runner.ReadReports(rep, m.cmdStarted)
	}()
	m.child = child
	d.mu.Lock()
	d.members = append(d.members, m)
	d.mu.Unlock()
	d.detail("%s: started, pid %d", name, child.Pid())
	go func() {
		<-child.Done()
		m.out.flush()
		m.mu.Lock()
		asked := m.asked
		m.mu.Unlock()
		if !asked {
			d.detail("%s (pid %d) exited %s", name, child.Pid(), supervise.ExitText(child.ExitCode()))
			select {
			case d.exited <- m:
			default:
			}
		}
	}()
	return m, nil
}

// runArgs are the arguments of the `krole run` of member name.
func (d *demo) runArgs(name codec.MemberID) []string {
	args := []string{"run", string(d.role), "--member", string(name),
		"--brokers", d.brokers, "--topic", d.topic, "--txn-prefix", d.prefix,
		"--lease-duration", d.lease.String(), "--", "sh", "-c", memberScript}
	return args
}

// runCommandLine is the `krole run` command line of member name, as a
// person would type it.
func (d *demo) runCommandLine(name string) string {
	return d.runCommandLineAs(d.invoke, name)
}

// runCommandLineAs is runCommandLine with krole run as prog.
func (d *demo) runCommandLineAs(prog, name string) string {
	return fmt.Sprintf("%s -- sh -c '%s'",
		d.commandAs(prog, fmt.Sprintf("run %s --member %s --lease-duration %v", d.role, name, d.lease)), memberScript)
}

// command is the krole command line to run sub, with the connection flags
// that differ from the defaults.
func (d *demo) command(sub string) string { return d.commandAs(d.invoke, sub) }

// commandAs is command with krole run as prog.
func (d *demo) commandAs(prog, sub string) string {
	parts := []string{prog}
	if sub != "" {
		parts = append(parts, sub)
	}
	if d.brokers != "" && d.brokers != d.opts.DefaultBrokers {
		parts = append(parts, "-b", d.brokers)
	}
	if d.topic != fencing.DefaultTopic {
		parts = append(parts, "--topic", d.topic)
	}
	if d.prefix != fencing.DefaultTxnPrefix {
		parts = append(parts, "--txn-prefix", d.prefix)
	}
	return strings.Join(parts, " ")
}

// invokeDemoKeep is the command line of `krole demo --keep`.
func (d *demo) invokeDemoKeep() string {
	return d.invoke + " demo --keep"
}

// invocation is how the person running the demo runs krole: "go run ."
// under go run, "krole" when that is the binary on the PATH, else the path
// it was started as.
func invocation(exe string) string {
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ."
	}
	base := filepath.Base(exe)
	if p, err := exec.LookPath(base); err == nil {
		if a, err1 := os.Stat(p); err1 == nil {
			if b, err2 := os.Stat(exe); err2 == nil && os.SameFile(a, b) {
				return base
			}
		}
	}
	if arg0 := os.Args[0]; strings.Contains(arg0, string(filepath.Separator)) {
		return arg0
	}
	return exe
}

// await waits until the role's state, as the demo's view follows it,
// satisfies ok, and returns it with the time the view showed it. It fails
// when a member exits unasked, when timeout passes, and when the demo is
// interrupted.
func (d *demo) await(what string, timeout time.Duration, ok func(rolestate.State) bool) (rolestate.State, time.Time, error) {
	if ok(d.state) {
		return d.state, time.Now(), nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case st, open := <-d.states:
			if !open {
				if d.ctx.Err() != nil {
					return st, time.Time{}, errInterrupted
				}
				return st, time.Time{}, fmt.Errorf("waiting for %s: the view of the role topic stopped", what)
			}
			d.state = st
			if ok(st) {
				return st, time.Now(), nil
			}
		case m := <-d.exited:
			return d.state, time.Time{}, fmt.Errorf("member %s exited %s while waiting for %s%s",
				m.name, supervise.ExitText(m.child.ExitCode()), what, m.out.lastLine())
		case <-d.ctx.Done():
			return d.state, time.Time{}, errInterrupted
		case <-t.C:
			return d.state, time.Time{}, fmt.Errorf("waited %v for %s in vain", timeout, what)
		}
	}
}

// waitCmd waits (a little) until m has started its command, so that the
// command's line comes before the demo's next one.
func (d *demo) waitCmd(m *member, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for m.lastCmd() == 0 || !m.out.seen(workLine) {
		if time.Now().After(deadline) || d.ctx.Err() != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// workLine is what the members' command prints.
const workLine = "work under token"

// waitExit waits until m has exited, up to timeout.
func (d *demo) waitExit(m *member, timeout time.Duration) error {
	select {
	case <-m.child.Done():
		return nil
	case <-d.ctx.Done():
		return errInterrupted
	case <-time.After(timeout):
		return fmt.Errorf("%s (pid %d) did not exit within %v of SIGTERM", m.name, m.child.Pid(), timeout)
	}
}

// checkCmdGone says whether the command of a killed member died with it.
// Without Linux's parent-death signal it may not have: the demo stops it.
func (d *demo) checkCmdGone(name codec.MemberID, pid int) {
	if pid == 0 {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for pidAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !pidAlive(pid) {
		d.detail("%s is gone, and its command (pid %d) died with it.", name, pid)
		return
	}
	d.detail("%s is gone, but its command (pid %d) outlived it (no parent-death signal on %s): the demo kills it.", name, pid, runtime.GOOS)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// holderMember is the member that the latest state names as the holder.
func (d *demo) holderMember() *member {
	if d.state.Lease == nil || d.state.Lease.Released() {
		return nil
	}
	return d.member(d.state.Lease.Member)
}

// member returns the live member named name, or nil.
func (d *demo) member(name codec.MemberID) *member {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.members) - 1; i >= 0; i-- {
		if m := d.members[i]; m.name == name {
			return m
		}
	}
	return nil
}

// live returns the candidates of the demo's role other than holder whose
// processes run, in rank order.
func (d *demo) live(holder codec.MemberID) []codec.MemberID {
	var out []codec.MemberID
	for _, c := range d.state.Candidates {
		if m := d.member(c.Member); c.Member != holder && m != nil && !m.child.Gone() {
			out = append(out, c.Member)
		}
	}
	return out
}

// nextInLine is the live candidate ranked first after holder: the one
// that takes the role when holder lets it go.
func (d *demo) nextInLine(holder codec.MemberID) codec.MemberID {
	if l := d.live(holder); len(l) > 0 {
		return l[0]
	}
	return "the next member"
}

// successor is the live candidate that takes the role first when holder
// dies: the highest processor.SplitScore.
func (d *demo) successor(holder codec.MemberID) codec.MemberID {
	l := d.live(holder)
	if len(l) == 0 {
		return "the next member"
	}
	best := l[0]
	for _, m := range l[1:] {
		if processor.SplitScore(d.role, m) > processor.SplitScore(d.role, best) {
			best = m
		}
	}
	return best
}

// keep leaves everything running until the demo is interrupted, after
// bringing the stopped members back and printing what to try.
func (d *demo) keep() error {
	if err := d.sleep(); err != nil {
		return err
	}
	var back []codec.MemberID
	for _, name := range memberNames {
		if m := d.member(name); m == nil || m.child.Gone() {
			back = append(back, name)
		}
	}
	d.step("Bringing %s back, so that three members run: they join at the back of the queue.", joinNames(back))
	for _, name := range back {
		if _, err := d.startMember(name); err != nil {
			return err
		}
		if _, _, err := d.await(fmt.Sprintf("%s to join the queue", name), 20*time.Second, func(st rolestate.State) bool {
			return st.Rank(name) >= 0
		}); err != nil {
			return err
		}
	}
	holder := d.holderMember()
	d.say("")
	d.step("The cluster and the members keep running. In another terminal, try:")
	type try struct{ cmd, what string }
	tries := []try{
		{d.command("table --watch"), "the holder, its lease ticking down, the queue"},
		{d.command("describe " + string(d.role)), "the token the transaction coordinator has for the role"},
		{d.command("serve"), "the same table in a browser, at http://127.0.0.1:8080"},
	}
	if holder != nil {
		tries = append(tries,
			try{fmt.Sprintf("kill -9 %d", holder.child.Pid()), fmt.Sprintf("kill the holder, %s, and watch the failover", holder.name)},
			try{fmt.Sprintf("kill %d", holder.child.Pid()), "or make it resign, and watch the handover"})
	}
	width := 0
	for _, t := range tries {
		width = max(width, len(t.cmd))
	}
	for _, t := range tries {
		d.detail("  %-*s  # %s", width, t.cmd, t.what)
	}
	d.detail("  %s", d.runCommandLine("node-4"))
	d.detail("  %-*s  # join the queue yourself (Ctrl-C there resigns)", width, "")
	if d.brokers != d.opts.DefaultBrokers {
		d.detail("(or 'export KROLE_BROKERS=%s' and leave out -b)", d.brokers)
	}
	d.detail("Members: %s.", d.memberList())
	d.detail("The members' lines keep coming here. Ctrl-C stops everything.")
	<-d.ctx.Done()
	d.say("")
	d.step("Stopping the members and the cluster.")
	d.stopMembers()
	d.result("Stopped.")
	return nil
}

// memberList names the live members and their pids, the holder first.
func (d *demo) memberList() string {
	var parts []string
	for _, c := range d.state.Candidates {
		m := d.member(c.Member)
		if m == nil || m.child.Gone() {
			continue
		}
		p := fmt.Sprintf("%s (pid %d", m.name, m.child.Pid())
		if l := d.state.Lease; l != nil && !l.Released() && l.Member == m.name {
			p += ", the holder"
		}
		parts = append(parts, p+")")
	}
	return strings.Join(parts, ", ")
}

// stopMembers stops every member that still runs: SIGTERM (it resigns or
// leaves the queue), then SIGKILL after stopGrace.
func (d *demo) stopMembers() {
	d.mu.Lock()
	members := append([]*member(nil), d.members...)
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range members {
		m.expectExit()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if killed, _ := m.child.Stop(context.Background(), stopGrace); killed {
				d.detail("%s (pid %d) did not leave within %v: killed", m.name, m.child.Pid(), stopGrace)
			}
			<-m.child.Done()
			m.out.flush()
		}()
	}
	wg.Wait()
}

// stopAll stops what the demo started, members first: they resign through
// the cluster, which stops last.
func (d *demo) stopAll() {
	d.stopMembers()
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
	d.cleanups = nil
}

// table prints the role's row as `krole table` does.
func (d *demo) table() {
	var b bytes.Buffer
	_ = render.RowsTable(&b, []server.Row{server.NewRow(d.state, time.Now())}, time.Now())
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line != "" {
			d.out.write("    " + line)
		}
	}
}

// sleep pauses between steps, for a person to read along; it fails when
// the demo is interrupted.
func (d *demo) sleep() error {
	if d.pause > 0 {
		select {
		case <-time.After(d.pause):
		case <-d.ctx.Done():
		}
	}
	if d.ctx.Err() != nil {
		return errInterrupted
	}
	return nil
}

// say, step, detail and result print the demo's own lines: a plain line, a
// step ("==> "), a line under a step, and an outcome ("<== ").
func (d *demo) say(format string, args ...any) {
	d.out.write(fmt.Sprintf(format, args...) + "\n")
}

func (d *demo) step(format string, args ...any) {
	d.out.write("==> " + fmt.Sprintf(format, args...) + "\n")
}

func (d *demo) detail(format string, args ...any) {
	d.out.write("    " + fmt.Sprintf(format, args...) + "\n")
}

func (d *demo) result(format string, args ...any) {
	d.out.write("<== " + fmt.Sprintf(format, args...) + "\n")
}

// round shows a measured time with a precision that reads well.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}

func joinNames(names []codec.MemberID) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	switch len(s) {
	case 0:
		return "no one"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// pidAlive reports whether process pid runs (a zombie does not count).
func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if runtime.GOOS == "linux" {
			return false
		}
		return syscall.Kill(pid, 0) == nil
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// lockedOut writes whole chunks to w, one writer at a time.
type lockedOut struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *lockedOut) write(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = io.WriteString(o.w, s)
}

// prefixWriter writes the output of a member to out line by line, each
// line prefixed.
type prefixWriter struct {
	out    *lockedOut
	prefix string

	mu    sync.Mutex
	buf   []byte
	last  string
	lines []string // the last few, for seen
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.emit(string(p.buf[:i]))
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func (p *prefixWriter) emit(line string) {
	line = strings.TrimRight(line, "\r")
	p.last = line
	p.lines = append(p.lines, line)
	if len(p.lines) > 16 {
		p.lines = p.lines[1:]
	}
	p.out.write(p.prefix + line + "\n")
}

// flush writes an unfinished last line.
func (p *prefixWriter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		p.emit(string(p.buf))
		p.buf = nil
	}
}

// lastLine is ": " and the member's last line, or "" when it printed none.
func (p *prefixWriter) lastLine() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := strings.TrimPrefix(strings.TrimPrefix(p.last, "krole: "), "krole run: ")
	if last == "" {
		return ""
	}
	return ": " + last
}

// seen reports whether one of the member's recent lines contains s.
func (p *prefixWriter) seen(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
