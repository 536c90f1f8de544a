package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
)

// commandError is the error of a CMD that cannot be started: exit 127 when
// it does not exist, 126 when it cannot be executed.
func commandError(path string, err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return ucli.Exit(fmt.Sprintf("command %q not found", path), exitNotFound)
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	return ucli.Exit(fmt.Sprintf("command %q cannot be executed: %v", path, err), exitCannotExecute)
}

// reportFDEnv names a file descriptor, inherited from the process that
// started `krole run`, to which it writes one JSON object per line for
// each CMD it starts (see [runReport]). `krole demo` passes a pipe there
// to learn the pids of the members' CMDs as data, rather than from the
// text of their lines. It is an interface between two processes of one
// krole build, not documented for users.
const reportFDEnv = "KROLE_RUN_REPORT_FD"

// runReport is a line written to [reportFDEnv]'s descriptor.
type runReport struct {
	Event string `json:"event"` // "cmd_started"
	Pid   int    `json:"pid"`   // CMD's pid
	Token string `json:"token"` // the token CMD runs under, "producerID/epoch"
}

// openReport returns the writer of [reportFDEnv], or nil when it is not
// set or does not name an inherited pipe. It unsets the variable, so that
// CMD does not inherit it, and marks the descriptor close-on-exec, so that
// neither CMD nor the watchdog inherits the pipe: its reader sees the end
// of the stream when krole run exits.
func openReport() *os.File {
	s, ok := os.LookupEnv(reportFDEnv)
	if !ok {
		return nil
	}
	_ = os.Unsetenv(reportFDEnv)
	fd, err := strconv.Atoi(s)
	if err != nil || fd < 3 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil // not open, or not a pipe: not one the starter passed
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "krole-run-report")
}

// runSession is the state of one `krole run` that its member's events and
// work share.
type runSession struct {
	role       codec.Role
	me         codec.MemberID
	path       string
	args       []string
	kill       time.Duration
	stdout     io.Writer // CMD's
	stderr     io.Writer // CMD's
	lines      *lineWriter
	verbose    bool // --verbose: the transport's errors too
	stopMember context.CancelFunc
	report     *os.File // see reportFDEnv; nil: none

	mu          sync.Mutex
	child       *supervise.Child // CMD while it runs (its tree not gone)
	interrupted bool             // SIGINT or SIGTERM: CMD is being stopped before the member leaves
	held        *codec.Token     // the token this member holds the role under, per the events
	resigned    *codec.Token     // the token it resigned the role under when leaving
	exit        *int             // CMD's exit code, when CMD exited by itself
	startErr    error            // why CMD could not be started
	gaveUp      error            // --timeout or --try gave up: the exit

	leaving     context.Context // ends when the member is asked to leave
	working     chan struct{}   // closed when the work running CMD returns; nil before
	unconfirmed *codec.Token    // a token lost while leaving, without a confirmed release
}

// onEvent prints the member's transitions, one line each. The processor
// calls it one event at a time.
func (s *runSession) onEvent(e processor.Event) {
	s.mu.Lock()
	held := s.held
	switch e.Kind {
	case processor.Elected:
		tok := e.Token
		s.held = &tok
	case processor.Revoked:
		s.held = nil
		tok := e.Token
		switch {
		case e.Reason == processor.ReasonContextEnded:
			s.resigned = &tok
		case e.Reason != processor.ReasonFenced && s.leaving != nil && s.leaving.Err() != nil:
			s.unconfirmed = &tok // lost while leaving: its release did not go through
		}
	}
	s.mu.Unlock()

	switch e.Kind {
	case processor.Elected:
		s.lines.printf("elected %s as %s (token %s)", e.Role, e.Member, e.Token)
	case processor.Revoked:
		switch e.Reason {
		case processor.ReasonContextEnded:
			// Reported once the member has left: "resigned ...".
		case processor.ReasonFenced:
			// A fencing.ErrFenced says "fenced: ..." itself; another
			// cause (the transport no longer holds the token,
			// fencing.ErrNotHeld) is said to be one.
			cause := "fenced"
			switch {
			case errors.Is(e.Err, fencing.ErrFenced):
				cause = e.Err.Error()
			case e.Err != nil:
				cause = "fenced: " + e.Err.Error()
			}
			s.lines.printf("revoked %s (token %s): %s", e.Role, e.Token, cause)
		case processor.ReasonDeregistered:
			// Revoked comes before the release is written: the line says
			// what is under way; a failed release is a warning line of its
			// own after it.
			s.lines.printf("revoked %s (token %s): this member's registration was removed (krole resign); "+
				"releasing the role to the next candidate, then joining again at the back", e.Role, e.Token)
		case processor.ReasonLeaseLost:
			s.lines.printf("revoked %s (token %s): lease lost: no renewal succeeded in time", e.Role, e.Token)
		case processor.ReasonTokenRetired:
			// The transport's error names requests and session keys; the
			// line says what it means for the role.
			what := "a renewal got no definite answer from the cluster"
			if s.leaving != nil && s.leaving.Err() != nil {
				what = "the renewal under way when interrupted got no answer"
			}
			msg := fmt.Sprintf("revoked %s (token %s): %s, so the token is retired: nothing more is written under it", e.Role, e.Token, what)
			if s.verbose && e.Err != nil {
				msg += " (" + withoutPackagePrefixes(e.Err.Error()) + ")"
			}
			s.lines.printf("%s", msg)
		default:
			msg := string(e.Reason)
			if e.Err != nil {
				msg += ": " + e.Err.Error()
			}
			s.lines.printf("revoked %s (token %s): %s", e.Role, e.Token, msg)
		}
	case processor.HolderChanged:
		switch {
		case e.Holder == nil:
			s.lines.printf("%s has no holder", e.Role)
		case e.Holder.Member == s.me && held != nil && *held == e.Holder.Token:
			// This member's own election, as the view shows it.
		default:
			s.lines.printf("holder of %s is now %s (token %s)", e.Role, e.Holder.Member, e.Holder.Token)
		}
	}
}

// work runs CMD while the member holds the role: it returns once CMD has
// exited, by itself or stopped because ctx ended (the role was lost or
// krole is leaving). CMD exiting by itself makes the member leave, which
// resigns the role.
func (s *runSession) work(ctx context.Context, held processor.Held) error {
	working := make(chan struct{})
	defer close(working)
	s.mu.Lock()
	s.working = working
	s.mu.Unlock()
	if s.path == "" {
		// Hold the role until ctx ends: the token on stdout, for scripts.
		fmt.Fprintln(s.stdout, held.Token.String())
		<-ctx.Done()
		return nil
	}
	if s.isInterrupted() {
		// Elected as the member leaves: CMD does not start.
		<-ctx.Done()
		return nil
	}
	child, err := supervise.Start(supervise.Spec{
		Path:     s.path,
		Args:     s.args,
		Watchdog: watchdogArgv(),
		Grace:    s.kill,
		Env: []string{
			"KROLE_ROLE=" + string(held.Role),
			"KROLE_MEMBER=" + string(held.Member),
			"KROLE_PRODUCER_ID=" + strconv.FormatInt(held.Token.ProducerID, 10),
			"KROLE_EPOCH=" + strconv.Itoa(int(held.Token.Epoch)),
			"KROLE_FENCE=" + strconv.FormatInt(held.Fence, 10),
		},
		Stdout: s.stdout,
		Stderr: s.stderr,
	})
	if err != nil {
		s.mu.Lock()
		s.startErr = err
		s.mu.Unlock()
		s.lines.printf("cannot start CMD: %v; resigning %s", err, held.Role)
		s.stopMember()
		return nil
	}
	pid := child.Pid()
	s.mu.Lock()
	s.child = child
	interrupted := s.interrupted
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.child = nil
		s.mu.Unlock()
	}()
	if interrupted {
		// Interrupted as CMD started: the interrupt stops nothing
		// started after it looked, so stop CMD here.
		s.stopCmd(child)
		return nil
	}
	s.lines.printf("started CMD (pid %d) with token %s", pid, held.Token)
	s.reportf(runReport{Event: "cmd_started", Pid: pid, Token: held.Token.String()})
	if !child.Tree() && runtime.GOOS == "linux" {
		s.lines.printf("warning: CMD (pid %d) runs without the watchdog that keeps its whole process tree: "+
			"only its process group is stopped, and waited for", pid)
	}
	select {
	case <-child.Exited():
		if s.isInterrupted() {
			// Stopped by the interrupt (stopForInterrupt), which
			// says so; the member leaves once it has.
			<-child.Done()
			<-ctx.Done()
			return nil
		}
		code := child.ExitCode()
		s.mu.Lock()
		s.exit = &code
		s.mu.Unlock()
		if child.LeftBehind() {
			// The rest of the tree is stopped while this member still
			// holds the role (ctx is not done: the renewals go on), and
			// the role is resigned only once it is gone.
			s.lines.printf("CMD (pid %d) exited with code %d, leaving processes of its tree running: "+
				"stopping them: SIGTERM, then SIGKILL after %v", pid, code, s.kill)
			if killed, _ := child.Stop(context.Background(), s.kill); killed {
				s.lines.printf("the rest of CMD's tree killed after --kill-timeout %v", s.kill)
			} else {
				s.lines.printf("the rest of CMD's tree stopped")
			}
		}
		<-child.Done()
		s.lines.printf("CMD (pid %d) exited by itself with code %d; resigning %s", pid, code, held.Role)
		s.stopMember()
		return nil
	case <-ctx.Done():
	}
	if s.isInterrupted() {
		<-child.Done() // stopForInterrupt stops it, and says so
		return nil
	}
	// Stop returns once no process of CMD's tree is left: the member
	// resigns (releases the role, deregisters) only after this returns.
	s.stopCmd(child)
	return nil
}

// stopCmd stops CMD's whole tree (SIGTERM, then SIGKILL after
// --kill-timeout) and returns once it is gone.
func (s *runSession) stopCmd(child *supervise.Child) {
	pid := child.Pid()
	s.lines.printf("stopping CMD (pid %d): SIGTERM, then SIGKILL after %v", pid, s.kill)
	if killed, _ := child.Stop(context.Background(), s.kill); killed {
		s.lines.printf("CMD (pid %d) killed after --kill-timeout %v", pid, s.kill)
	} else {
		s.lines.printf("CMD (pid %d) stopped with code %d", pid, child.ExitCode())
	}
}

// stopForInterrupt stops CMD, if it runs, on SIGINT or SIGTERM, before the
// member leaves: the member holds the role, and its session's heartbeats
// renew it, until CMD's tree is gone, and only then releases it. (The
// member's own wait for work, at the end of a holding, also keeps the role
// renewed as long as work runs, until the holding is lost: fenced, the
// session ended, or no heartbeat vouched for the role before the local
// deadline; then the member goes on without it, and work may outlive the
// holding. Stopping the tree here first keeps the order whatever the
// member's reason. A second signal ends krole at once, see
// SecondInterrupt.)
func (s *runSession) stopForInterrupt() {
	s.mu.Lock()
	s.interrupted = true
	child := s.child
	s.mu.Unlock()
	if child != nil {
		s.stopCmd(child)
	}
}

func (s *runSession) isInterrupted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interrupted
}

// reportf writes r to the report descriptor, if any, as one line. A
// failed write (the reader has gone) is ignored: the report is for the
// reader's convenience only.
func (s *runSession) reportf(r runReport) {
	if s.report == nil {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.report.Write(append(b, '\n'))
}

// lockedWriter returns w for CMD's output. A file (the terminal, in
// production) is handed to CMD as it is. Any other writer (a buffer, when
// tests run the app in-process) is written by a goroutine of os/exec, so
// it is wrapped to take mu around each write: mu is the lineWriter's for
// stderr, where krole run writes its lines too.
func lockedWriter(w io.Writer, mu *sync.Mutex) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &syncWriter{mu: mu, w: w}
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// watchdogArgv runs this very binary as the supervise watchdog, CMD's
// parent, which keeps CMD's whole process tree and stops it when krole is
// killed with SIGKILL (see package supervise). Without a path to this
// binary, CMD runs without the watchdog: its tree is then its process group
// only, and only CMD itself is sure to die with krole.
func watchdogArgv() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{exe, supervise.WatchdogCommand}
}
