// Package supervise runs the command that `krole run` starts while it holds
// a role, and stops it as a whole process tree: the command is stopped
// only when no process of its tree is left.
//
// # The tree, and who keeps it
//
// The command's tree is the command, its process group and every process
// descended from it, including descendants that left the group or the
// session (setsid, setpgid) and those whose parent exited (orphans).
//
// With [Spec].Watchdog (what `krole run` uses), the command is not a child
// of the calling process but of a small watchdog process (this binary,
// run as [WatchdogCommand]) that krole starts first:
//
//	krole ── watchdog (child subreaper) ── CMD ── ...
//
// On Linux the watchdog makes itself a child subreaper
// (prctl PR_SET_CHILD_SUBREAPER) before it starts the command, so every
// process of the tree whose parent exits is reparented to the watchdog,
// not to init: the tree is exactly the watchdog's descendants, and the
// watchdog's own children are the command and such orphans, nothing else.
// It reaps them all (wait4 on any child, which is safe in a process that
// starts no other children), and it reports "the tree is gone" when no
// child is left to reap. To signal the tree it reads /proc for its
// descendants (the parent pid chains) and signals each of them (through a
// pidfd, after checking that the pid still names a descendant, so that a
// reused pid is never signalled; before Linux 5.3, with kill), and, until
// the command has been reaped, the command's process group as a whole
// (after that, a group id with no member left may be reused). SIGTERM
// goes out once, to the processes there are: one forked just then may
// miss it, and gets SIGKILL after the grace period. SIGKILL goes out
// again every 20 ms until the tree is gone, so nothing forked meanwhile
// is left.
//
// Why a watchdog in the middle rather than krole itself as the subreaper:
// krole's other children (started with os/exec elsewhere, reaped by their
// own Wait) would be indistinguishable from the tree's orphans, and the
// subreaper role dies with krole: when krole is killed with SIGKILL, its
// orphans would go to init with nothing left to stop them. The watchdog
// survives krole, and so does its subreaper role: it learns of krole's
// death from the end of its control pipe (whose only writer is krole; the
// kernel closes it however krole dies), then sends the tree SIGTERM, and
// SIGKILL after [Spec].Grace, until the tree is gone. Why not a cgroup: a
// writable cgroup v2 is not available to an unprivileged process on most
// hosts and containers (it needs delegation by systemd or the runtime);
// the subreaper needs no privilege and works on every Linux since 3.4.
//
// The watchdog runs in a process group of its own, so signals sent to
// krole's process group (a terminal's Ctrl-C, a supervisor's kill of the
// group) do not reach it; it catches SIGTERM, SIGINT and SIGHUP and acts
// only on krole's word or krole's death. The command runs in a process
// group of its own, with a parent-death signal (SIGKILL) tied to the
// watchdog.
//
// What escapes, on Linux: a process that is not a descendant at all,
// because something outside the tree started it on the tree's behalf (a
// service manager over D-Bus, at, a container runtime's daemon); a
// process of the tree that a setuid program runs under another user (no
// signal reaches it, and the stop waits for it: see Stop); and, if the
// watchdog itself is killed with SIGKILL (the OOM killer, a kill of every
// process), every process of the tree but the command, which dies by its
// parent-death signal: the [Child] then falls back to the command's
// process group, which Stop signals and Done waits for. A descendant that
// makes itself a subreaper, or that double-forks, stays a descendant of
// the watchdog, so it is no escape.
//
// On other systems (macOS, the BSDs) there is no subreaper here and no
// /proc: the tree is the command's process group only. The watchdog still
// sits in the middle and still acts on krole's death, but it signals only
// the group, and the tree counts as gone when the command has exited and
// the group has no member left (a zombie counts as a member there; on
// Linux, a zombie counts as gone): a descendant that left the group
// (setsid, setpgid) is neither signalled nor waited for.
//
// A watchdog can be started ahead of its command ([Prepare]): it waits
// on its control pipe, and [Standby.Start] starts the command with a line
// there, without a process start of this binary in between.
//
// Without [Spec].Watchdog, or when the watchdog cannot be started, the
// command is the caller's own child and the tree is its process group, as
// on other systems, on Linux too; the command still dies with the caller
// (parent-death signal, Linux only), but the rest of its group does not.
//
// # What it does not do
//
// Killing the command when the role is lost is local and best effort, like
// the cancellation of a processor's work: it fences nothing, and a
// deposed command may still be writing when the next holder starts (a
// holder cut off from the cluster is deposed while its tree still
// runs). A target that must refuse a deposed command's writes has to
// check the holding's token, which `krole run` passes in the command's
// environment (KROLE_PRODUCER_ID, KROLE_EPOCH).
package supervise

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Child is a command started by [Start]. Its methods are safe for
// concurrent use.
type Child struct {
	pid  int
	tree bool // the watchdog keeps the tree (see Tree)

	exited chan struct{} // closed when the command itself has exited
	code   int           // its exit code, valid after exited
	rest   bool          // processes of the tree were alive when it exited

	done chan struct{} // closed when the whole tree is gone

	mu  sync.Mutex
	ctl *os.File // the watchdog's control pipe; nil without a live watchdog
}

// Spec says what to run.
type Spec struct {
	// Path is the program: a path, or a name looked up in PATH. It is
	// also the child's argv[0]. Required.
	Path string
	// Args are the arguments, not including the program name. Default
	// none.
	Args []string
	// Env is added to the parent's environment, as "KEY=value"; an entry
	// overrides the parent's value of the same key. Default none.
	Env []string
	// Stdout, Stderr and Stdin are the child's standard streams, as in
	// os/exec.Cmd; nil connects them to the null device.
	Stdout io.Writer
	Stderr io.Writer
	Stdin  io.Reader
	// ExtraFiles are open files the child inherits, as file descriptors
	// 3, 4, ... (os/exec.Cmd.ExtraFiles). Default none.
	ExtraFiles []*os.File
	// Watchdog, when set, is the argv prefix that runs this program as the
	// watchdog (for krole: the krole binary and WatchdogCommand; see
	// [Watchdog]), which starts the command, keeps its whole tree (see
	// the package doc) and stops it when this process dies. A watchdog
	// that cannot start is skipped: the command is then this process's own
	// child and its tree is its process group (see [Child.Tree]). Default
	// none.
	Watchdog []string
	// Grace is the watchdog's SIGTERM-to-SIGKILL period when this
	// process has died, used only with Watchdog. Default 0: SIGKILL right
	// after SIGTERM. (Child.Stop takes its own grace period.)
	Grace time.Duration
}

// waitDelay bounds how long, after the process that os/exec started has
// exited, its Wait waits for the copying of Stdout and Stderr when they
// are not files (a process that escaped the tree may hold the pipe).
const waitDelay = time.Second

// pollInterval is how often a group or a tree is checked or signalled
// again while waiting for it to be gone.
const pollInterval = 20 * time.Millisecond

// Start starts the command and returns once it has started (or failed
// to: the program is not found or cannot be executed).
//
// With spec.Watchdog, the watchdog starts the command (see the package
// doc); Start returns once it has. Without it, or when the watchdog
// cannot be started, the command is this process's child, in a process
// group of its own; on Linux it gets SIGKILL if the starting thread of this
// process dies (prctl PR_SET_PDEATHSIG; a goroutine, locked to the
// starting thread, waits for it).
func Start(spec Spec) (*Child, error) {
	path, err := exec.LookPath(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", spec.Path, err)
	}
	if len(spec.Watchdog) > 0 {
		c, err := startWatched(spec, path)
		if !errors.Is(err, errNoWatchdog) {
			return c, err
		}
	}
	return startDirect(spec, path)
}

var errNoWatchdog = errors.New("the watchdog cannot be started")

// startWatched starts the watchdog, which starts the command.
func startWatched(spec Spec, path string) (*Child, error) {
	d, err := spawnDog(spec, path, false)
	if err != nil {
		return nil, err
	}
	return d.awaitStart(spec.Path)
}

// dog is a watchdog process, from its start to the command's.
type dog struct {
	cmd    *exec.Cmd
	ctl    *os.File // the control pipe's write end
	stR    *os.File // the status pipe's read end
	status *bufio.Reader
	fast   bool // the streams are files (see awaitStart)
}

// spawnDog starts the watchdog of spec. Its protocol: argv (after
// spec.Watchdog) is [-standby] GRACE NEXTRA PATH ARGV0 ARGS...; the
// watchdog's descriptor 3 is the control pipe (lines "term" and "kill"
// from this process, and first, for a standby, "start ENV"; its end means
// this process died), 4 the status pipe (lines "started PID" or "error
// ERRNO TEXT", then "exited CODE REST", then "gone"), 5... the command's
// extra files.
func spawnDog(spec Spec, path string, standby bool) (*dog, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoWatchdog, err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, fmt.Errorf("%w: %w", errNoWatchdog, err)
	}
	args := append([]string(nil), spec.Watchdog[1:]...)
	if standby {
		args = append(args, standbyFlag)
	}
	args = append(args, spec.Grace.String(), strconv.Itoa(len(spec.ExtraFiles)), path, spec.Path)
	args = append(args, spec.Args...)
	cmd := exec.Command(spec.Watchdog[0], args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = spec.Stdout, spec.Stderr, spec.Stdin
	cmd.ExtraFiles = append([]*os.File{ctlR, stW}, spec.ExtraFiles...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	err = cmd.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, fmt.Errorf("%w: %w", errNoWatchdog, err)
	}
	// With files for streams (krole's own stdout and stderr), no
	// goroutine of os/exec copies them: the tree is gone at the watchdog's
	// word, without waiting for its exit to be reaped (which waits for the
	// kernel to tear a Go process down). Otherwise Done waits for the
	// copying, so the output is whole when Done is closed.
	fast := isFile(spec.Stdout) && isFile(spec.Stderr) && isFile(spec.Stdin)
	return &dog{cmd: cmd, ctl: ctlW, stR: stR, status: bufio.NewReader(stR), fast: fast}, nil
}

// awaitStart reads the watchdog's word on starting the command name, and
// returns the command's Child once it has started.
func (d *dog) awaitStart(name string) (*Child, error) {
	line, err := d.status.ReadString('\n')
	f := strings.Fields(line)
	var pid int
	switch {
	case err == nil && len(f) == 2 && f[0] == "started":
		pid, err = strconv.Atoi(f[1])
	case err == nil && len(f) >= 2 && f[0] == "error":
		n, _ := strconv.Atoi(f[1])
		err = &exec.Error{Name: name, Err: syscall.Errno(n)}
		if n == 0 {
			err = &exec.Error{Name: name, Err: errors.New(strings.Join(f[2:], " "))}
		}
	default:
		err = fmt.Errorf("the watchdog exited before it started the command (%v)", err)
	}
	if err != nil || pid <= 0 {
		d.close()
		if err == nil {
			err = fmt.Errorf("the watchdog said %q", line)
		}
		return nil, fmt.Errorf("starting %q: %w", name, err)
	}
	c := &Child{pid: pid, tree: treeKept, ctl: d.ctl, exited: make(chan struct{}), done: make(chan struct{})}
	go c.follow(d.cmd, d.status, d.stR, d.fast)
	return c, nil
}

// close ends the watchdog before it started a command, and waits for it.
func (d *dog) close() {
	d.ctl.Close()
	d.stR.Close()
	_ = d.cmd.Wait()
}

// follow reads the watchdog's status lines until it exits.
func (c *Child) follow(dog *exec.Cmd, status *bufio.Reader, stR *os.File, fast bool) {
	gone := false
	for {
		line, err := status.ReadString('\n')
		if err != nil {
			break
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "exited":
			c.code, _ = strconv.Atoi(f[1])
			c.rest = f[2] == "1"
			close(c.exited)
		case len(f) == 1 && f[0] == "gone":
			gone = true
			if fast {
				close(c.done)
			}
		}
	}
	stR.Close()
	_ = dog.Wait()
	c.mu.Lock()
	c.ctl.Close()
	c.ctl = nil
	c.mu.Unlock()
	if !gone {
		// The watchdog died without saying the tree is gone (killed with
		// SIGKILL): the command died with it (its parent-death signal, on
		// Linux), and what is left of the tree can be reached only
		// through the process group.
		select {
		case <-c.exited:
		default:
			c.code = 128 + int(syscall.SIGKILL)
			close(c.exited)
		}
		waitGroupGone(c.pid)
	}
	if !gone || !fast {
		close(c.done)
	}
}

// isFile reports whether a stream is nil or a file: one that os/exec
// hands to the process as it is.
func isFile(v any) bool {
	switch f := v.(type) {
	case nil:
		return true
	case *os.File:
		return f != nil
	}
	return false
}

// startDirect starts the command as this process's own child.
func startDirect(spec Spec, path string) (*Child, error) {
	cmd := exec.Command(path, spec.Args...)
	cmd.Args[0] = spec.Path
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = spec.Stdout, spec.Stderr, spec.Stdin
	cmd.ExtraFiles = spec.ExtraFiles
	cmd.SysProcAttr = sysProcAttr(syscall.SIGKILL, true)
	cmd.WaitDelay = waitDelay
	c := &Child{exited: make(chan struct{}), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Linux sends the parent-death signal when the *thread* that
		// forked the child exits, and the Go runtime may retire idle
		// threads. So the thread that starts the child stays locked to
		// this goroutine until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait()
		c.code = exitCode(cmd.ProcessState)
		c.rest = groupLive(c.pid)
		close(c.exited)
		waitGroupGone(c.pid)
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %q: %w", spec.Path, err)
	}
	return c, nil
}

// waitGroupGone waits until process group pgid has no member left but
// zombies.
func waitGroupGone(pgid int) {
	for groupLive(pgid) {
		time.Sleep(pollInterval)
	}
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Pid returns the command's process id, which is also its process group.
func (c *Child) Pid() int { return c.pid }

// Tree reports whether the watchdog keeps the command's whole tree, as the
// package doc says: on Linux, with [Spec].Watchdog, when the watchdog
// started. Otherwise the tree is the command's process group only.
func (c *Child) Tree() bool { return c.tree }

// Exited returns a channel that is closed when the command itself has
// exited; other processes of its tree may still run (see [Child.Done]).
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Done returns a channel that is closed when the whole tree is gone: the
// command has exited and no process of its tree is left (and has been
// reaped). It is never sent on.
func (c *Child) Done() <-chan struct{} { return c.done }

// Gone reports whether Done is closed: the whole tree is gone.
func (c *Child) Gone() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// LeftBehind reports, once the command has exited, whether processes of
// its tree were still alive when it did (they may have exited since).
func (c *Child) LeftBehind() bool {
	select {
	case <-c.exited:
		return c.rest
	default:
		return false
	}
}

// ExitCode returns the command's exit code once it has exited: its own
// code, or 128+signal when a signal ended it (128+SIGKILL when the
// watchdog died before it could report it). It is -1 while the command
// runs.
func (c *Child) ExitCode() int {
	select {
	case <-c.exited:
		return c.code
	default:
		return -1
	}
}

// Stop sends SIGTERM to the whole tree and waits until it is gone; after
// grace it sends SIGKILL to what is left of it, again and again, until it
// is gone. It stops the rest of the tree of a command that has exited
// already, too. It blocks until the tree is gone or ctx ends, and returns
// whether SIGKILL was needed. When ctx ends first, Stop sends SIGKILL at
// once (without waiting out grace) and returns killed=true with ctx.Err()
// unless the tree is gone by then. A tree that is gone already is left
// alone (killed=false, nil).
//
// A process that no signal of this process reaches (a setuid program
// running as another user) keeps Stop waiting until ctx ends; so does a
// process stuck in the kernel (state D) until the kernel lets it die.
func (c *Child) Stop(ctx context.Context, grace time.Duration) (killed bool, err error) {
	select {
	case <-c.done:
		return false, nil
	default:
	}
	c.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return false, nil
	case <-t.C:
	case <-ctx.Done():
	}
	c.signal(syscall.SIGKILL)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return true, nil
		case <-ctx.Done():
			return true, ctx.Err()
		case <-tick.C:
			if !c.watched() {
				// Without a watchdog, or after its death, the group
				// again: a member forked as the last SIGKILL went out.
				c.signal(syscall.SIGKILL)
			}
		}
	}
}

func (c *Child) watched() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctl != nil
}

// signal sends sig to the tree: through the watchdog while it lives
// ("kill" makes it send SIGKILL until the tree is gone), else to the
// command's process group.
func (c *Child) signal(sig syscall.Signal) {
	c.mu.Lock()
	ctl := c.ctl
	if ctl != nil {
		word := "term\n"
		if sig == syscall.SIGKILL {
			word = "kill\n"
		}
		_, err := io.WriteString(ctl, word)
		c.mu.Unlock()
		if err == nil {
			return
		}
	} else {
		c.mu.Unlock()
	}
	_ = syscall.Kill(-c.pid, sig)
}
