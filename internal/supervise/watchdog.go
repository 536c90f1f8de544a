package supervise

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// WatchdogCommand is the first argument that makes a krole binary act as
// the watchdog (see [Spec].Watchdog). It is not a user-facing command.
const WatchdogCommand = "__krole_watchdog"

// Watchdog is the body of the watchdog process: it starts the command and
// keeps its tree, as the package doc says.
//
// Its arguments: optionally "-standby" (then it first waits for the line
// "start ENV" on the control pipe, ENV a JSON array of "KEY=value" added
// to the command's environment, and returns at the pipe's end before
// it), the grace period (as time.ParseDuration reads it), the number n of
// extra files, the path of the program, its argv[0] and its arguments.
// Its descriptors: 0-2 the command's standard streams, 3 the control pipe
// from the starting process, 4 the status pipe to it, 5 to 5+n-1 the
// command's extra files (its 3 to 3+n-1). Its environment is the
// command's.
//
// It reports "started PID" (or "error ERRNO TEXT", and returns), then, when
// the command exits, "exited CODE REST" (CODE as [Child.ExitCode], REST 1
// when processes of the tree were left), then "gone" once no process of
// the tree is left, and returns. On "term" it sends SIGTERM to the tree
// once; on "kill" it sends SIGKILL to the tree until it is gone. At the
// end of the control pipe (the starting process died, or closed it) it
// sends SIGTERM, then after the grace period SIGKILL until the tree is
// gone. It returns the process exit code: 0, or 2 for bad arguments.
func Watchdog(args []string) int {
	standby := len(args) > 0 && args[0] == standbyFlag
	if standby {
		args = args[1:]
	}
	if len(args) < 4 {
		return 2
	}
	grace, err1 := time.ParseDuration(args[0])
	n, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || n < 0 || n > 1000 {
		return 2
	}
	path, argv := args[2], args[3:]
	ctl, status := os.NewFile(3, "krole-watchdog-control"), os.NewFile(4, "krole-watchdog-status")
	if ctl == nil || status == nil {
		return 2
	}
	// The command inherits its standard streams and extra files only.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	for i := range n {
		syscall.CloseOnExec(5 + i)
		files = append(files, os.NewFile(uintptr(5+i), "extra"))
	}
	// Signals change nothing: stopping the tree is the starting process's
	// decision, or the watchdog's own once that process has died. They are
	// caught, not ignored (an ignored signal would stay ignored in the
	// command), and only here: Ignore first drops any other Notify of the
	// binary (krole's main exits at a second SIGTERM). A signal ignored
	// from the start (SIGHUP under nohup) stays ignored, for the command
	// too.
	sigs := make(chan os.Signal, 4)
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			signal.Ignore(sig)
			signal.Notify(sigs, sig)
		}
	}
	go func() {
		for range sigs {
		}
	}()

	// The command's parent-death signal is sent when the thread that
	// started it exits: this goroutine keeps its thread to the end.
	runtime.LockOSThread()
	// On Linux, every orphan of the tree becomes the watchdog's child. An
	// error (a kernel before 3.4) leaves the group and the linked
	// descendants.
	_ = becomeSubreaper()
	ctlr := bufio.NewReader(ctl)
	if standby && !awaitGo(ctlr) {
		return 0
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{Files: files, Sys: sysProcAttr(syscall.SIGKILL, true)})
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = 0
		}
		fmt.Fprintf(status, "error %d %v\n", int(errno), err)
		return 0
	}
	for _, f := range files[3:] {
		f.Close()
	}
	pid := p.Pid
	_ = p.Release() // reaped below, by wait4 on any child
	fmt.Fprintf(status, "started %d\n", pid)

	w := &keeper{pgid: pid, self: os.Getpid()}
	go w.control(ctlr, grace)
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			break // ECHILD: no child left
		}
		if got == pid {
			w.reaped.Store(true)
			code := ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			fmt.Fprintf(status, "exited %d %d\n", code, b2i(w.treeLeft()))
		}
	}
	// No child left. As a subreaper (Linux), no descendant is left either;
	// otherwise the tree is the group, and its members are not the
	// watchdog's to reap.
	waitGroupGone(pid)
	fmt.Fprintln(status, "gone")
	return 0
}

// awaitGo waits for a standby watchdog's "start ENV" line and sets ENV
// in its environment, which the command inherits; false at the pipe's end
// or a line it cannot read.
func awaitGo(ctl *bufio.Reader) bool {
	line, err := ctl.ReadString('\n')
	rest, ok := strings.CutPrefix(line, "start ")
	var env []string
	if err != nil || !ok || json.Unmarshal([]byte(rest), &env) != nil {
		return false
	}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			_ = os.Setenv(k, v)
		}
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// keeper signals the tree of the command whose process group is pgid, as
// the watchdog self (whose descendants, on Linux, are the tree).
type keeper struct {
	pgid, self int
	killing    sync.Once
	reaped     atomic.Bool // the command has been reaped: its pid may be reused
}

// treeLeft reports whether, the command having been reaped, any process
// of its tree is left: a child to reap (Linux: any descendant) or a
// member of its group.
func (k *keeper) treeLeft() bool {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
	if got > 0 {
		// Reaped an orphan that had exited already; others may be left.
		return k.treeLeft()
	}
	return err == nil || groupLive(k.pgid)
}

// control acts on the control pipe's words until it ends, then stops the
// tree: the starting process has died (or closed the pipe, which it does
// only once the tree is gone).
func (k *keeper) control(ctl io.Reader, grace time.Duration) {
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		switch sc.Text() {
		case "term":
			k.signalTree(syscall.SIGTERM)
		case "kill":
			go k.kill()
		}
	}
	k.signalTree(syscall.SIGTERM)
	time.Sleep(grace) // the process exits as soon as the tree is gone
	k.kill()
}

// kill sends SIGKILL to the tree until the process exits (it does once
// the tree is gone). A process forked just as a round went out is caught
// by the next.
func (k *keeper) kill() {
	k.killing.Do(func() {
		for {
			k.signalTree(syscall.SIGKILL)
			time.Sleep(pollInterval)
		}
	})
}

// signalTree sends sig to the command's process group and to every other
// descendant of the watchdog (Linux), each once. On Linux, once the
// command has been reaped, the group is not signalled as a whole: its
// members are descendants, and a group id whose members have all exited
// may be reused.
func (k *keeper) signalTree(sig syscall.Signal) {
	skip := 0
	if !treeKept || !k.reaped.Load() {
		_ = syscall.Kill(-k.pgid, sig)
		skip = k.pgid
	}
	signalDescendants(k.self, skip, sig)
}
