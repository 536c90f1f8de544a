// Package supervise runs the command that `krole run` starts while it holds
// a role: in its own process group, killed with its parent (Linux
// parent-death signal; with the watchdog, its whole group is), and stopped
// with SIGTERM, then SIGKILL after a grace period.
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

// Child is a running command. Its methods are safe for concurrent use.
type Child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit error, valid after done
}

// Spec says what to run.
type Spec struct {
	Path   string
	Args   []string // not including the program name
	Env    []string // added to the parent's environment
	Stdout io.Writer
	Stderr io.Writer
	Stdin  io.Reader
	// Watchdog, when set, is the argv prefix that runs this program as the
	// watchdog (for krole: the krole binary and WatchdogCommand; see
	// [Watchdog]), so that not only the command but every process in its
	// group dies with a krole killed by SIGKILL. Grace is the watchdog's
	// SIGTERM-to-SIGKILL period then.
	Watchdog []string
	Grace    time.Duration
}

// Start starts the command. The child gets SIGKILL if the starting thread of
// this process dies (prctl PR_SET_PDEATHSIG), so it never outlives a
// krole that was killed with SIGKILL; it runs in a process group of its
// own, so Stop reaches its children too.
func Start(spec Spec) (*Child, error) {
	path, err := exec.LookPath(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", spec.Path, err)
	}
	cmd := exec.Command(path, spec.Args...)
	cmd.Args[0] = spec.Path
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = spec.Stdout, spec.Stderr, spec.Stdin
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
			_ = dog.Process.Kill()
			_ = dog.Wait()
		}
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %q: %w", spec.Path, err)
	}
	return c, nil
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Done is closed when the child has exited.
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
