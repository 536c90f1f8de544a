// Package supervise runs the command that `krole run` starts while it holds
// a role: in its own process group, killed with its parent (Linux
// parent-death signal; with the watchdog, its whole group is), and stopped
// with SIGTERM, then SIGKILL after a grace period.
//
// Killing the command when the role is lost is local and best effort, like
// the cancellation of a processor's work: it fences nothing, and a
// deposed command may still be writing when the next holder starts. A
// target that must refuse a deposed command's writes has to check the
// holding's token, which `krole run` passes in the command's environment
// (KROLE_PRODUCER_ID, KROLE_EPOCH).
//
// On systems other than Linux there is no parent-death signal: a command
// can outlive a krole killed with SIGKILL, though Stop still reaches its
// whole process group.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Child is a command started by [Start]. Its methods are safe for
// concurrent use.
type Child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit error, valid after done
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
	// [Watchdog]), so that not only the command but every process in its
	// group dies with a krole killed by SIGKILL. A watchdog that cannot
	// start is skipped silently: the command then runs guarded by its own
	// death signal only. Default none.
	Watchdog []string
	// Grace is the watchdog's SIGTERM-to-SIGKILL period, used only with
	// Watchdog. Default 0: SIGKILL right after SIGTERM. (Child.Stop takes
	// its own grace period.)
	Grace time.Duration
}

// Start starts the command and returns once it has started (or failed
// to: the program is not found or cannot be executed). On Linux the child
// gets SIGKILL if the starting thread of this process dies (prctl
// PR_SET_PDEATHSIG), so it never outlives a krole that was killed with
// SIGKILL; it runs in a process group of its own, so Stop reaches its
// children too. With spec.Watchdog, Start returns once the watchdog has
// started too; a process killed in the instant between starting the child
// and starting its watchdog leaves the child's own children running (the
// child itself still dies by its parent-death signal). A goroutine, locked
// to the starting thread, waits for the child until it exits, then closes
// Done.
func Start(spec Spec) (*Child, error) {
	path, err := exec.LookPath(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", spec.Path, err)
	}
	cmd := exec.Command(path, spec.Args...)
	cmd.Args[0] = spec.Path
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = spec.Stdout, spec.Stderr, spec.Stdin
	cmd.ExtraFiles = spec.ExtraFiles
	cmd.SysProcAttr = sysProcAttr(syscall.SIGKILL, true)
	c := &Child{cmd: cmd, done: make(chan struct{})}
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
		var dog *exec.Cmd
		if len(spec.Watchdog) > 0 {
			args := append(append([]string(nil), spec.Watchdog[1:]...),
				strconv.Itoa(os.Getpid()), strconv.Itoa(cmd.Process.Pid), spec.Grace.String())
			dog = exec.Command(spec.Watchdog[0], args...)
			dog.SysProcAttr = sysProcAttr(DeathSignal, false)
			if err := dog.Start(); err != nil {
				dog = nil // the command runs, guarded by its own death signal only
			}
		}
		started <- nil
		c.err = cmd.Wait()
		if dog != nil {
			// SIGKILL ends the watchdog before it can act (it acts only
			// once this process has died); reaping it waits for the
			// kernel to tear a Go process down, which is no reason to
			// make Done wait (the holder's release waits for Done).
			_ = dog.Process.Kill()
		}
		close(c.done)
		if dog != nil {
			_ = dog.Wait()
		}
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %q: %w", spec.Path, err)
	}
	return c, nil
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Done returns a channel that is closed when the child has exited (and its
// watchdog, if any, has been sent SIGKILL; it is reaped after). It is never
// sent on.
func (c *Child) Done() <-chan struct{} { return c.done }

// ExitCode returns the child's exit code once it has exited: its own code,
// or 128+signal when a signal ended it. It is -1 while the child runs.
func (c *Child) ExitCode() int {
	select {
	case <-c.done:
	default:
		return -1
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if c.err != nil {
		return 1
	}
	return 0
}

// Stop sends SIGTERM to the child's process group and waits for it to
// exit; after grace it sends SIGKILL and waits again. It blocks until the
// child has exited or ctx ends, and returns whether SIGKILL was needed.
// When ctx ends first, Stop sends SIGKILL at once (without waiting out
// grace) and returns killed=true with ctx.Err() unless the child has
// exited by then. A child that has exited already is left alone
// (killed=false, nil).
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
	select {
	case <-c.done:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

func (c *Child) signal(sig syscall.Signal) {
	// The negative pid addresses the process group; fall back to the
	// process alone if the group is gone.
	if err := syscall.Kill(-c.cmd.Process.Pid, sig); err != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}
