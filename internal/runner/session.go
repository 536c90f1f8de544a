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
	what       string             // what the member campaigns for, in lines: the role, the slots, the group's roles
	slot       map[codec.Role]int // each slot's number (KROLE_SLOT); nil: no slots
	group      bool               // the roles are a group's (--slots, --roles): their holders change many at a time
	many       bool               // --roles: the member holds many roles at once, and its lines name each
	me         codec.MemberID
	path       string
	args       []string
	kill       time.Duration
	stdout     io.Writer // CMD's
	stderr     io.Writer // CMD's
	lines      *cmdlog.Lines
	verbose    bool // --verbose: the transport's errors too
	stopMember context.CancelFunc
	// cmdExited is what a CMD that exits by itself makes the member do:
	// leave (stopMember), or drain and then leave.
	cmdExited func()
	report    *os.File       // see ReportFDEnv; nil: none
	prep      sync.WaitGroup // prepareStandby while it runs

	mu            sync.Mutex
	children      map[codec.Role]*supervise.Child // each CMD while it runs (its tree not gone)
	standby       *supervise.Standby              // a watchdog ready for the next CMD; nil when none
	standbyClosed bool                            // the member is leaving: no standby from now on
	idle          chan struct{}                   // closed when children becomes empty; nil before the first CMD
	interrupted   bool                            // leaving: every CMD is being stopped before the member leaves
	draining      bool                            // handing every role over before leaving: no CMD starts
	held          map[codec.Role]codec.Token      // the roles this member holds, per the events, and their tokens
	resigned      map[codec.Role]codec.Token      // the roles it resigned when leaving
	exit          *int                            // the code of the first CMD that exited by itself
	startErr      error                           // why CMD could not be started
	gaveUp        error                           // --timeout or --try gave up: the exit

	leaving     context.Context            // ends when the member is asked to leave
	unconfirmed map[codec.Role]codec.Token // tokens lost while leaving, without a confirmed release
}

// onEvent prints the member's transitions, one line each. The processor
// calls it one event at a time.
func (s *session) onEvent(e processor.Event) {
	s.mu.Lock()
	held, holding := s.held[e.Role]
	switch e.Kind {
	case processor.Elected:
		s.held = put(s.held, e.Role, e.Token)
	case processor.Revoked:
		delete(s.held, e.Role)
		switch {
		case e.Reason == processor.ReasonContextEnded:
			s.resigned = put(s.resigned, e.Role, e.Token)
		case e.Reason != processor.ReasonFenced && s.leaving != nil && s.leaving.Err() != nil:
			s.unconfirmed = put(s.unconfirmed, e.Role, e.Token) // lost while leaving: its release did not go through
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
		case s.group:
			// A group's roles change hands many at a time: this
			// member's own lines say what it holds.
		case e.Holder == nil:
			s.lines.Printf("%s has no holder", e.Role)
		case e.Holder.Member == s.me && holding && held == e.Holder.Token:
			// This member's own election, as the view shows it.
		default:
			s.lines.Printf("holder of %s is now %s (token %s)", e.Role, e.Holder.Member, e.Holder.Token)
		}
	}
}

// put sets m[role] to tok, making m when nil, and returns m.
func put(m map[codec.Role]codec.Token, role codec.Role, tok codec.Token) map[codec.Role]codec.Token {
	if m == nil {
		m = map[codec.Role]codec.Token{}
	}
	m[role] = tok
	return m
}

// cmdEnv is the environment CMD gets for held, besides the process's
// own: the role, the member, the token, the holding's fencing number,
// and the slot's number for a slot of a semaphore (slot >= 0).
func cmdEnv(held processor.Held, slot int) []string {
	env := []string{
		"KROLE_ROLE=" + string(held.Role),
		"KROLE_MEMBER=" + string(held.Member),
		"KROLE_PRODUCER_ID=" + strconv.FormatInt(held.Token.ProducerID, 10),
		"KROLE_EPOCH=" + strconv.Itoa(int(held.Token.Epoch)),
		"KROLE_FENCE=" + strconv.FormatInt(held.Fence, 10),
	}
	if slot >= 0 {
		env = append(env, "KROLE_SLOT="+strconv.Itoa(slot))
	}
	return env
}

// cmdName names the CMD of role in lines: "CMD", or, with many roles
// held at once, "CMD for ROLE".
func (s *session) cmdName(role codec.Role) string {
	if s.many {
		return "CMD for " + string(role)
	}
	return "CMD"
}

// work runs CMD while the member holds a role: it returns once CMD has
// exited, by itself or stopped because ctx ended (the role was lost or
// handed over, or krole is leaving). Calls for different roles run
// concurrently, one CMD each. CMD exiting by itself makes the member
// leave (s.cmdExited), which resigns the role.
func (s *session) work(ctx context.Context, held processor.Held) error {
	if s.path == "" {
		// Hold the role until ctx ends, saying so on stdout, for scripts:
		// the token, or with many roles a line per role gained and lost.
		if s.many {
			fmt.Fprintf(s.stdout, "gained %s %s\n", held.Role, held.Token)
		} else {
			fmt.Fprintln(s.stdout, held.Token.String())
		}
		<-ctx.Done()
		if s.many {
			fmt.Fprintf(s.stdout, "lost %s %s\n", held.Role, held.Token)
		}
		return nil
	}
	if s.isInterrupted() || s.isDraining() {
		// Elected as the member leaves: CMD does not start.
		<-ctx.Done()
		return nil
	}
	slot := -1
	if k, ok := s.slot[held.Role]; ok {
		slot = k
	}
	name := s.cmdName(held.Role)
	child, err := s.startCmd(cmdEnv(held, slot))
	if err != nil {
		s.mu.Lock()
		s.startErr = err
		s.mu.Unlock()
		s.lines.Printf("cannot start %s: %v; resigning %s", name, err, held.Role)
		s.cmdExited()
		return nil
	}
	pid := child.Pid()
	s.mu.Lock()
	if s.children == nil {
		s.children = map[codec.Role]*supervise.Child{}
	}
	if len(s.children) == 0 {
		s.idle = make(chan struct{})
	}
	s.children[held.Role] = child
	interrupted := s.interrupted
	s.mu.Unlock()
	defer func() {
		// The tree is gone by now, whichever way work returns.
		s.mu.Lock()
		delete(s.children, held.Role)
		if len(s.children) == 0 {
			close(s.idle)
		}
		s.mu.Unlock()
	}()
	if interrupted {
		// Interrupted as CMD started: the interrupt stops nothing
		// started after it looked, so stop CMD here.
		s.stopCmd(child, held.Role)
		return nil
	}
	s.lines.Printf("started %s (pid %d) with token %s", name, pid, held.Token)
	s.reportf(Report{Event: "cmd_started", Pid: pid, Token: held.Token.String()})
	if !child.Tree() && runtime.GOOS == "linux" {
		s.lines.Printf("warning: %s (pid %d) runs without the watchdog that keeps its whole process tree: "+
			"only its process group is stopped, and waited for", name, pid)
	}
	select {
	case <-child.Exited():
		if s.isInterrupted() {
			// Stopped by the interrupt (stopAll), which says so; the
			// member leaves once it has.
			<-child.Done()
			<-ctx.Done()
			return nil
		}
		code := child.ExitCode()
		s.mu.Lock()
		if s.exit == nil {
			s.exit = &code
		}
		s.mu.Unlock()
		if child.LeftBehind() {
			// The rest of the tree is stopped while this member still
			// holds the role (ctx is not done: the renewals go on), and
			// the role is resigned only once it is gone.
			s.lines.Printf("%s (pid %d) exited with code %d, leaving processes of its tree running: "+
				"stopping them: SIGTERM, then SIGKILL after %v", name, pid, code, s.kill)
			if killed, _ := child.Stop(context.Background(), s.kill); killed {
				s.lines.Printf("the rest of %s's tree killed after --kill-timeout %v", name, s.kill)
			} else {
				s.lines.Printf("the rest of %s's tree stopped", name)
			}
		}
		<-child.Done()
		if s.many {
			s.lines.Printf("%s (pid %d) exited by itself with code %d; leaving %s", name, pid, code, s.what)
		} else {
			s.lines.Printf("%s (pid %d) exited by itself with code %d; resigning %s", name, pid, code, held.Role)
		}
		s.cmdExited()
		return nil
	case <-ctx.Done():
	}
	if s.isInterrupted() {
		<-child.Done() // stopAll stops it, and says so
		return nil
	}
	// Stop returns once no process of CMD's tree is left: the member
	// resigns (releases the role, deregisters) only after this returns.
	s.stopCmd(child, held.Role)
	return nil
}

// stopCmd stops the whole tree of role's CMD (SIGTERM, then SIGKILL after
// --kill-timeout) and returns once it is gone.
func (s *session) stopCmd(child *supervise.Child, role codec.Role) {
	pid, name := child.Pid(), s.cmdName(role)
	s.lines.Printf("stopping %s (pid %d): SIGTERM, then SIGKILL after %v", name, pid, s.kill)
	if killed, _ := child.Stop(context.Background(), s.kill); killed {
		s.lines.Printf("%s (pid %d) killed after --kill-timeout %v", name, pid, s.kill)
	} else {
		s.lines.Printf("%s (pid %d) stopped with code %d", name, pid, child.ExitCode())
	}
}

// stopAll stops every CMD that runs, all at once, before the member
// leaves (SIGINT or SIGTERM, or a CMD that exited by itself): the member
// holds their roles, and its session's heartbeats renew them, until
// every CMD's tree is gone, and only then releases them. (The member's
// own wait for work, at the end of a holding, also keeps the role renewed
// as long as work runs, until the holding is lost: fenced, the session
// ended, or no heartbeat vouched for the role before the local deadline;
// then the member goes on without it, and work may outlive the holding.
// Stopping the trees here first keeps the order whatever the member's
// reason. A second signal ends krole at once, see SecondInterrupt.)
func (s *session) stopAll() {
	s.mu.Lock()
	s.interrupted = true
	children := make(map[codec.Role]*supervise.Child, len(s.children))
	for r, c := range s.children {
		children[r] = c
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for r, c := range children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.stopCmd(c, r)
		}()
	}
	wg.Wait()
}

func (s *session) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
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

// cmdSpec is CMD's spec, but for the holding's environment.
func (s *session) cmdSpec() supervise.Spec {
	return supervise.Spec{Path: s.path, Args: s.args, Watchdog: watchdogArgv(), Grace: s.kill, Stdout: s.stdout, Stderr: s.stderr}
}

// startCmd starts CMD with env, through the standby watchdog when one is
// ready, and then readies the next.
func (s *session) startCmd(env []string) (*supervise.Child, error) {
	s.mu.Lock()
	sb := s.standby
	s.standby = nil
	next := sb != nil && !s.standbyClosed
	if next {
		s.prep.Add(1) // under mu: closeStandby's Wait comes after
	}
	s.mu.Unlock()
	if sb == nil {
		spec := s.cmdSpec()
		spec.Env = env
		return supervise.Start(spec)
	}
	c, err := sb.Start(env)
	go func() {
		defer s.prep.Done()
		s.prepareStandby()
	}()
	return c, err
}

// prepareStandby readies a watchdog for the next CMD (supervise.Prepare),
// unless one is ready, the member is leaving, or CMD cannot run with a
// watchdog: a CMD then starts without a watchdog process's start first.
func (s *session) prepareStandby() {
	spec := s.cmdSpec()
	if spec.Path == "" || spec.Watchdog == nil || runtime.GOOS != "linux" {
		return
	}
	sb, err := supervise.Prepare(spec)
	if err != nil {
		return // the CMD's start says why, with the watchdog started then
	}
	s.mu.Lock()
	keep := s.standby == nil && !s.standbyClosed
	if keep {
		s.standby = sb
	}
	s.mu.Unlock()
	if !keep {
		sb.Close()
	}
}

// closeStandby ends the standby watchdog, if any, and readies no other;
// it returns once no watchdog is on standby or being readied.
func (s *session) closeStandby() {
	s.mu.Lock()
	s.standbyClosed = true
	s.mu.Unlock()
	s.prep.Wait()
	s.mu.Lock()
	sb := s.standby
	s.standby = nil
	s.mu.Unlock()
	if sb != nil {
		sb.Close()
	}
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

// cmdStopped returns a channel closed once no CMD runs (every CMD's tree
// is gone), or nil when none runs.
func (s *session) cmdStopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.children) == 0 {
		return nil
	}
	return s.idle
}
