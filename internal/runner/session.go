package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/cmdlog"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
)

// session is the state of one `krole run` that its member's events and
// work share.
type session struct {
	what       string             // what the member campaigns for, in lines: the role, or the slots
	slot       map[codec.Role]int // each slot's number (KROLE_SLOT); nil: one role, no slots
	me         codec.MemberID
	path       string
	args       []string
	kill       time.Duration
	stdout     io.Writer // CMD's
	stderr     io.Writer // CMD's
	lines      *cmdlog.Lines
	verbose    bool // --verbose: the transport's errors too
	stopMember context.CancelFunc
	report     *os.File // see ReportFDEnv; nil: none

	mu           sync.Mutex
	child        *supervise.Child // CMD while it runs (its tree not gone)
	interrupted  bool             // SIGINT or SIGTERM: CMD is being stopped before the member leaves
	held         *codec.Token     // the token this member holds a role under, per the events
	heldRole     codec.Role       // the role held under held
	resigned     *codec.Token     // the token it resigned a role under when leaving
	resignedRole codec.Role       // the role resigned under resigned
	exit         *int             // CMD's exit code, when CMD exited by itself
	startErr     error            // why CMD could not be started
	gaveUp       error            // --timeout or --try gave up: the exit

	leaving     context.Context // ends when the member is asked to leave
	working     chan struct{}   // closed when the work running CMD returns; nil before
	unconfirmed *codec.Token    // a token lost while leaving, without a confirmed release
	unconfRole  codec.Role      // the role of unconfirmed
}

// onEvent prints the member's transitions, one line each. The processor
// calls it one event at a time.
func (s *session) onEvent(e processor.Event) {
	s.mu.Lock()
	held := s.held
	switch e.Kind {
	case processor.Elected:
		tok := e.Token
		s.held, s.heldRole = &tok, e.Role
	case processor.Revoked:
		if s.heldRole == e.Role {
			s.held = nil
		}
		tok := e.Token
		switch {
		case e.Reason == processor.ReasonContextEnded:
			s.resigned, s.resignedRole = &tok, e.Role
		case e.Reason != processor.ReasonFenced && s.leaving != nil && s.leaving.Err() != nil:
			s.unconfirmed, s.unconfRole = &tok, e.Role // lost while leaving: its release did not go through
		}
	}
	s.mu.Unlock()

	switch e.Kind {
	case processor.Elected:
		s.lines.Printf("elected %s as %s (token %s)", e.Role, e.Member, e.Token)
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
			s.lines.Printf("revoked %s (token %s): %s", e.Role, e.Token, cause)
		case processor.ReasonDeregistered:
			// Revoked comes before the release is written: the line says
			// what is under way; a failed release is a warning line of its
			// own after it.
			s.lines.Printf("revoked %s (token %s): this member's registration was removed (krole resign); "+
				"releasing the role to the next candidate, then joining again at the back", e.Role, e.Token)
		case processor.ReasonLeaseLost:
			s.lines.Printf("revoked %s (token %s): lease lost: no renewal succeeded in time", e.Role, e.Token)
		case processor.ReasonTokenRetired:
			// The transport's error names requests and session keys; the
			// line says what it means for the role.
			what := "a renewal got no definite answer from the cluster"
			if s.leaving != nil && s.leaving.Err() != nil {
				what = "the renewal under way when interrupted got no answer"
			}
			msg := fmt.Sprintf("revoked %s (token %s): %s, so the token is retired: nothing more is written under it", e.Role, e.Token, what)
			if s.verbose && e.Err != nil {
				msg += " (" + explain.WithoutPackagePrefixes(e.Err.Error()) + ")"
			}
			s.lines.Printf("%s", msg)
		default:
			msg := string(e.Reason)
			if e.Err != nil {
				msg += ": " + e.Err.Error()
			}
			s.lines.Printf("revoked %s (token %s): %s", e.Role, e.Token, msg)
		}
	case processor.HolderChanged:
		switch {
		case s.slot != nil:
			// The slots change hands as a group, many at a time: this
			// member's own lines say what it holds.
		case e.Holder == nil:
			s.lines.Printf("%s has no holder", e.Role)
		case e.Holder.Member == s.me && held != nil && *held == e.Holder.Token:
			// This member's own election, as the view shows it.
		default:
			s.lines.Printf("holder of %s is now %s (token %s)", e.Role, e.Holder.Member, e.Holder.Token)
		}
	}
}

// work runs CMD while the member holds the role: it returns once CMD has
// exited, by itself or stopped because ctx ended (the role was lost or
// krole is leaving). CMD exiting by itself makes the member leave, which
// resigns the role.
func (s *session) work(ctx context.Context, held processor.Held) error {
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
	env := []string{
		"KROLE_ROLE=" + string(held.Role),
		"KROLE_MEMBER=" + string(held.Member),
		"KROLE_PRODUCER_ID=" + strconv.FormatInt(held.Token.ProducerID, 10),
		"KROLE_EPOCH=" + strconv.Itoa(int(held.Token.Epoch)),
		"KROLE_FENCE=" + strconv.FormatInt(held.Fence, 10),
	}
	if k, ok := s.slot[held.Role]; ok {
		env = append(env, "KROLE_SLOT="+strconv.Itoa(k))
	}
	child, err := supervise.Start(supervise.Spec{
		Path:     s.path,
		Args:     s.args,
		Watchdog: watchdogArgv(),
		Grace:    s.kill,
		Env:      env,
		Stdout:   s.stdout,
		Stderr:   s.stderr,
	})
	if err != nil {
		s.mu.Lock()
		s.startErr = err
		s.mu.Unlock()
		s.lines.Printf("cannot start CMD: %v; resigning %s", err, held.Role)
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
	s.lines.Printf("started CMD (pid %d) with token %s", pid, held.Token)
	s.reportf(Report{Event: "cmd_started", Pid: pid, Token: held.Token.String()})
	if !child.Tree() && runtime.GOOS == "linux" {
		s.lines.Printf("warning: CMD (pid %d) runs without the watchdog that keeps its whole process tree: "+
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
			s.lines.Printf("CMD (pid %d) exited with code %d, leaving processes of its tree running: "+
				"stopping them: SIGTERM, then SIGKILL after %v", pid, code, s.kill)
			if killed, _ := child.Stop(context.Background(), s.kill); killed {
				s.lines.Printf("the rest of CMD's tree killed after --kill-timeout %v", s.kill)
			} else {
				s.lines.Printf("the rest of CMD's tree stopped")
			}
		}
		<-child.Done()
		s.lines.Printf("CMD (pid %d) exited by itself with code %d; resigning %s", pid, code, held.Role)
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
func (s *session) stopCmd(child *supervise.Child) {
	pid := child.Pid()
	s.lines.Printf("stopping CMD (pid %d): SIGTERM, then SIGKILL after %v", pid, s.kill)
	if killed, _ := child.Stop(context.Background(), s.kill); killed {
		s.lines.Printf("CMD (pid %d) killed after --kill-timeout %v", pid, s.kill)
	} else {
		s.lines.Printf("CMD (pid %d) stopped with code %d", pid, child.ExitCode())
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
func (s *session) stopForInterrupt() {
	s.mu.Lock()
	s.interrupted = true
	child := s.child
	s.mu.Unlock()
	if child != nil {
		s.stopCmd(child)
	}
}

func (s *session) isInterrupted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interrupted
}

// reportf writes r to the report descriptor, if any, as one line. A
// failed write (the reader has gone) is ignored: the report is for the
// reader's convenience only.
func (s *session) reportf(r Report) {
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

// cmdStopped returns a channel closed when the work running CMD has
// returned (CMD stopped), or nil when none runs.
func (s *session) cmdStopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.working
}
