// Package runner is the member of `krole run`: it campaigns for one role
// (or a group's roles: slots, or --roles), runs CMD under supervision
// (package supervise) while it holds a role, one CMD per role held,
// says each transition in one line on stderr, and leaves within
// [LeaveBudget] when interrupted or when CMD exits by itself. The command
// line reads the flags into [Options] and maps [Run]'s error to the exit
// code: an error with an ExitCode method carries its own.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/cmdlog"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/processor"
)

// Exit codes of `krole run` besides CMD's own.
const (
	// ExitTimeout: the timeout passed before this member held the role
	// (as GNU timeout's 124).
	ExitTimeout = 124
	// ExitBusy: with Try, another member held the role (sysexits'
	// EX_TEMPFAIL: try again later).
	ExitBusy = 75
	// ExitMemberInUse: another live process runs as this member
	// (processor.ErrMemberInUse); this one left without writing anything.
	ExitMemberInUse = 73
	// ExitCannotExecute: CMD exists but cannot be executed.
	ExitCannotExecute = 126
	// ExitNotFound: CMD does not exist.
	ExitNotFound = 127
)

// ExitError ends `krole run` with Code, after Msg (none when empty).
type ExitError struct {
	Msg  string
	Code int
}

func (e *ExitError) Error() string { return e.Msg }

// ExitCode is the process's exit code.
func (e *ExitError) ExitCode() int { return e.Code }

// CommandError is the error of a CMD at path that cannot be started:
// [ExitNotFound] when it does not exist, [ExitCannotExecute] when it
// cannot be executed.
func CommandError(path string, err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return &ExitError{Msg: fmt.Sprintf("command %q not found", path), Code: ExitNotFound}
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	return &ExitError{Msg: fmt.Sprintf("command %q cannot be executed: %v", path, err), Code: ExitCannotExecute}
}

// MaxSlots is the most slots [Options].Slots may ask for.
const MaxSlots = 1024

// SlotRoles returns the roles of n slots named after name: name-slot-0
// to name-slot-(n-1). It fails when n is not 1 to [MaxSlots], or when a
// slot's name would not be a valid role name (an error matching
// [codec.ErrInvalid]).
func SlotRoles(name codec.Role, n int) ([]codec.Role, error) {
	if n < 1 || n > MaxSlots {
		return nil, fmt.Errorf("--slots %d: must be 1 to %d", n, MaxSlots)
	}
	if err := codec.CheckGroup(string(name)); err != nil {
		return nil, err
	}
	roles := make([]codec.Role, n)
	for k := range roles {
		r, err := codec.NewRole(string(name) + "-slot-" + strconv.Itoa(k))
		if err != nil {
			return nil, fmt.Errorf("--slots %d: the name of slot %d: %w", n, k, err)
		}
		roles[k] = r
	}
	return roles, nil
}

// Options are what one `krole run` does.
type Options struct {
	Config fencing.Config // the cluster; its ClientID is the session's default
	// Role is the role campaigned for; with Slots, the name of the group
	// of slots.
	Role codec.Role
	// Slots, when positive, makes the member a candidate for the Slots
	// roles [SlotRoles] names, as a group (named Role) in which it holds
	// at most one at a time: a semaphore. CMD runs for the slot held,
	// with KROLE_SLOT its number.
	Slots int
	// Roles, when not empty, makes the member a member of a group named
	// Role over these roles ([GroupRoles] names them), with Weight
	// (0 counts as 1): it holds its share of them, one CMD per role held.
	// Patterns are what named them, for the member's lines. Try and
	// Timeout do not apply.
	Roles    []codec.Role
	Patterns []string
	Weight   int
	// Drain, with Slots or Roles, makes a leaving member (SIGINT or
	// SIGTERM, or a CMD that exited by itself) hand every role over to
	// the group's other members first, each CMD stopped before its
	// role's release, within [DrainBudget]; then it stops what still
	// runs and leaves.
	Drain    bool
	Member   codec.MemberID
	Value    string             // carried in the registration; "" none
	Settings processor.Settings // with defaults applied, valid
	// Kill is how long CMD's tree has after SIGTERM before SIGKILL.
	Kill time.Duration
	// Path and Args are CMD; an empty Path holds the role until ctx ends,
	// printing the token on Stdout at each election.
	Path string
	Args []string
	// Timeout (0: none) gives up with [ExitTimeout] when the member does
	// not hold the role by then; Try gives up with [ExitBusy] when another
	// member holds it once the member is ready.
	Timeout time.Duration
	Try     bool
	// Verbose logs all the member's activity, not only transitions and
	// warnings.
	Verbose bool
	// MetricsListen, when set, is the HOST:PORT where the member's
	// Prometheus metrics are served (see [ServeMetrics]).
	MetricsListen string
	// Stdout and Stderr are CMD's and krole run's own.
	Stdout, Stderr io.Writer
}

// Run campaigns for o.Role (or the group's roles) until ctx ends (SIGINT
// or SIGTERM: with o.Drain the roles are handed over first; every CMD
// still running is stopped, then the member resigns), a CMD exits by
// itself (the member leaves the same way; the first such code is the
// error's), or the member cannot go on. It blocks until the member has
// left, or [LeaveBudget] after ctx ended. Interrupted before the member
// started, it returns nil.
func Run(ctx context.Context, o Options) error {
	member, settings, cfg := o.Member, o.Settings, o.Config
	roles := []codec.Role{o.Role}
	what := string(o.Role) // what the member campaigns for, in its lines
	var (
		group *processor.Group
		slot  map[codec.Role]int
	)
	switch {
	case len(o.Roles) > 0:
		o.Try, o.Timeout = false, 0 // see Options.Roles
		roles = o.Roles
		group = &processor.Group{Name: string(o.Role), Weight: o.Weight}
		what = "the roles of " + string(o.Role)
	case o.Slots > 0:
		var err error
		if roles, err = SlotRoles(o.Role, o.Slots); err != nil {
			return err
		}
		group = &processor.Group{Name: string(o.Role), Limit: 1}
		slot = make(map[codec.Role]int, len(roles))
		for k, r := range roles {
			slot[r] = k
		}
		what = "the slots of " + string(o.Role)
	}
	lw := cmdlog.NewLines(o.Stderr, "")
	level := slog.LevelWarn
	if o.Verbose {
		level = slog.LevelInfo
	}
	// An authorization failure stops the member (see cmdlog.AuthzStop):
	// denied is its error, said as the command's.
	var (
		deniedMu sync.Mutex
		denied   error
		leave    = func() {}
	)
	// While the cluster is unreachable: one line when that begins and one
	// when it ends, not a warning at every retry (see cmdlog.Outage).
	out := cmdlog.NewOutage(lw, fmt.Sprintf("%s can be neither renewed nor taken until it answers", what))
	out.Verbose = o.Verbose
	logger := slog.New(cmdlog.NewAuthzStop(out.Wrap(cmdlog.NewHandler(lw, level)), cfg.Topic, func(err error) {
		deniedMu.Lock()
		denied = err
		deniedMu.Unlock()
		leave()
	}))
	if margin := settings.LeaseDuration - settings.HeartbeatDeadline; o.Kill > margin {
		lw.Printf("note: --kill-timeout %v is longer than the %v between this member's own renewal deadline "+
			"and the end of its lease: a CMD slow to stop may still run when another member takes the role", o.Kill, margin)
	}

	s := &session{
		what: what, slot: slot, group: group != nil, many: len(o.Roles) > 0, me: member, path: o.Path, args: o.Args, kill: o.Kill,
		stdout: cmdlog.Locked(o.Stdout, new(sync.Mutex)), stderr: lw.Locked(o.Stderr), lines: lw, verbose: o.Verbose,
		report: OpenReport(),
	}
	if s.report != nil {
		defer s.report.Close()
	}
	s.prep.Go(s.prepareStandby)
	defer s.closeStandby()
	reg, metricsAddr, stopMetrics, err := ServeMetrics(o.MetricsListen)
	if err != nil {
		return err
	}
	defer stopMetrics()

	// The session's context ends when ctx does, after the line that says
	// so, or when CMD exits by itself. Until the member starts, an
	// interrupt ends it quietly.
	sctx, stopSession := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSession()
	s.stopMember = stopSession
	s.cmdExited = stopSession
	leave = stopSession
	quiet := context.AfterFunc(ctx, stopSession)
	interrupted := func() bool { return false }
	started := false  // the member started (OnReady said so)
	var failure error // why the member left, when not asked to (OnFatal)
	if o.Timeout > 0 {
		// Given up only while not holding: the check and the election
		// take s.mu, so a member elected first keeps the role.
		t := time.AfterFunc(o.Timeout, func() {
			s.mu.Lock()
			giveUp := len(s.held) == 0 && s.gaveUp == nil
			if giveUp {
				s.gaveUp = &ExitError{Code: ExitTimeout}
			}
			s.mu.Unlock()
			if giveUp {
				if group != nil {
					lw.Printf("not holding a slot of %s within --timeout %v; giving up", o.Role, o.Timeout)
				} else {
					lw.Printf("not holding %s within --timeout %v; giving up", what, o.Timeout)
				}
				stopSession()
			}
		})
		defer t.Stop()
	}
	var sess *election.Session
	// leaveNow makes the member leave, once: with drain, it first hands
	// every role over (each CMD stopped before its role's release); then
	// every CMD still running is stopped while the member still holds
	// (and renews) its role, and only once the trees are gone does the
	// member leave (its session's end releases what it still holds).
	drain := o.Drain && group != nil
	var (
		leaveOnce  sync.Once
		leaveBegan atomic.Pointer[time.Time] // when a drain before leaving began
	)
	leaveNow := func() {
		leaveOnce.Do(func() {
			if drain {
				now := time.Now()
				leaveBegan.Store(&now)
				s.drainFirst(sctx, sess, string(o.Role))
			}
			s.stopAll()
			stopSession()
		})
	}
	if drain {
		s.cmdExited = func() { go leaveNow() }
	}
	sess, err = StartInterruptible(ctx, func() (*election.Session, error) {
		return election.New(election.Config{
			Cluster:    cfg,
			Member:     member,
			Roles:      roles,
			Group:      group,
			Value:      o.Value,
			Settings:   settings,
			Logger:     logger,
			ViewLogger: logger,
			Registerer: reg,
			OnEvent:    s.onEvent,
			OnReady: func() {
				if !quiet() {
					return // interrupted while starting: the member leaves at once
				}
				if o.Try {
					if h := heldByOthers(ctx, sess, roles, member); h != "" {
						s.mu.Lock()
						s.gaveUp = &ExitError{Code: ExitBusy}
						s.mu.Unlock()
						if group != nil {
							lw.Printf("every slot of %s is held (by %s); giving up (--try)", o.Role, h)
						} else {
							lw.Printf("%s is held by %s; giving up (--try)", what, h)
						}
						stopSession()
						return
					}
				}
				started = true
				if metricsAddr != "" {
					lw.Printf("metrics at http://%s/metrics", metricsAddr)
				}
				campaign, as := what, string(member)
				switch {
				case len(o.Roles) > 0:
					campaign = fmt.Sprintf("the %d roles of %s (%s)", len(roles), o.Role, strings.Join(o.Patterns, ","))
					as = fmt.Sprintf("%s, weight %d", member, max(o.Weight, 1))
				case group != nil:
					campaign = fmt.Sprintf("a slot of %s (%s-slot-0 to %s)", o.Role, o.Role, roles[len(roles)-1])
				}
				lw.Printf("campaigning for %s as %s (lease %v, heartbeat every %v, stagger %v)",
					campaign, as, settings.LeaseDuration, settings.HeartbeatInterval, settings.Stagger)
				interrupted = context.AfterFunc(ctx, func() {
					if drain {
						lw.Printf("interrupted; handing %s over, then leaving", what)
					} else {
						lw.Printf("interrupted; leaving %s", what)
					}
					leaveNow()
				})
			},
			OnFatal: func(ve *election.ViewError) {
				if !ve.CaughtUp {
					return // said once Run has returned, without a member to leave
				}
				// A fatal error of the view (the topic was deleted, the state
				// cannot be read): the member cannot follow the role any
				// more, and leaves now.
				failure = explain.RunError(cfg, fmt.Errorf("following the role topic: %w", ve.Err))
				lw.Printf("%s; leaving %s", explain.OneLine(explain.Describe(failure)), what)
			},
		})
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while connecting
		}
		return explain.RunError(cfg, err)
	}
	defer sess.Close()
	go out.Follow(sctx, sess.View().Health, cmdlog.OutageCheckEvery)
	// A member that may not read the role topic would register, and then
	// wait for a view that never sees it: say so now.
	if err := sess.Transport().CheckRead(ctx, roles[0]); fencing.IsNotAuthorized(err) {
		return err
	}
	// The roles' transaction coordinators, looked up now, in the
	// background, are one round trip less in this member's first
	// challenge: the next handover, when it counts. A failed look-up is
	// left to the challenge, which looks the coordinator up (and retries)
	// itself.
	fctx, stopFind := context.WithTimeout(sctx, settings.TransactionTimeout)
	found := make(chan struct{})
	go func() {
		defer close(found)
		for _, r := range roles {
			if fctx.Err() != nil {
				return
			}
			_ = sess.Transport().FindCoordinator(fctx, r)
		}
	}()
	defer func() { stopFind(); <-found }()

	if group != nil {
		// A drain request (krole drain) hands the member's roles over;
		// once it holds none it leaves, and krole run exits 0.
		held := "role"
		if o.Slots > 0 {
			held = "slot"
		}
		go func() {
			select {
			case <-sess.Member().DrainedOnRequest():
				lw.Printf("drained on request (krole drain): holding no %s of %s; leaving", held, o.Role)
				stopSession()
			case <-sctx.Done():
			}
		}()
	}

	// Run returns once the member has left and the view has stopped;
	// when leaving outlasts LeaveBudget, krole run leaves without it.
	s.leaving = sctx
	budget := func() time.Duration {
		if began := leaveBegan.Load(); began != nil {
			// A drain came first: leaving gets the rest of the budget.
			return max(LeaveBudget-time.Since(*began), LeaveBudget-DrainBudget)
		}
		return LeaveBudget
	}
	err, abandoned := leaveWithin(sctx, budget, s.cmdStopped, func() error { return sess.Run(sctx, s.work) })
	quiet()
	interrupted()
	s.mu.Lock()
	gaveUp := s.gaveUp
	s.mu.Unlock()
	var ve *election.ViewError
	var inUse *processor.MemberInUseError
	switch {
	case gaveUp != nil && !started:
		return gaveUp
	case errors.As(err, &inUse):
		// Refused: the running process keeps the id, untouched.
		return &ExitError{Msg: memberInUseLine(inUse), Code: ExitMemberInUse}
	case errors.As(err, &ve) && ve.CaughtUp:
		// failure is set, and said, by OnFatal.
	case errors.As(err, &ve): // the view never caught up
		if ctx.Err() != nil {
			return nil // interrupted while starting
		}
		return explain.RunError(cfg, ve.Err)
	case err != nil:
		return err
	case !started:
		return nil // interrupted while starting
	}

	s.mu.Lock()
	resigned, exit, startErr, held, unconfirmed := maps.Clone(s.resigned), s.exit, s.startErr, maps.Clone(s.held), maps.Clone(s.unconfirmed)
	s.mu.Unlock()
	deniedMu.Lock()
	authErr := denied
	deniedMu.Unlock()
	switch {
	case abandoned:
		if len(held) == 0 {
			// Revoked on the way out, but the member had not returned:
			// its session's end, which releases the roles, is written
			// last, so it is not confirmed either.
			held = resigned
		}
		if len(held) == 0 {
			lw.Printf("%s", unconfirmedLine(o.Role, what, member, nil, settings.LeaseDuration, true))
		}
		for _, r := range slices.Sorted(maps.Keys(held)) {
			tok := held[r]
			lw.Printf("%s", unconfirmedLine(r, what, member, &tok, settings.LeaseDuration, true))
		}
	case len(resigned) > 0:
		for _, r := range slices.Sorted(maps.Keys(resigned)) {
			lw.Printf("resigned %s (token %s)", r, resigned[r])
		}
	case len(unconfirmed) > 0:
		for _, r := range slices.Sorted(maps.Keys(unconfirmed)) {
			tok := unconfirmed[r]
			lw.Printf("%s", unconfirmedLine(r, what, member, &tok, settings.LeaseDuration, false))
		}
	default:
		lw.Printf("left %s", what)
	}
	switch {
	case failure != nil:
		return failure
	case authErr != nil:
		return authErr
	case gaveUp != nil:
		return gaveUp
	case startErr != nil:
		return CommandError(o.Path, startErr)
	case exit != nil && *exit != 0:
		return &ExitError{Code: *exit}
	}
	return nil
}

// memberInUseLine says what to do first when another live process runs
// as this member, then what showed it.
func memberInUseLine(e *processor.MemberInUseError) string {
	other := "it"
	if e.Other != "" {
		other = "it is instance " + e.Other
	}
	return fmt.Sprintf("another process runs as member %s on role %s; stop it or choose another --member "+
		"(%s: %s; this one, instance %s, left without writing anything)", e.Member, e.Role, other, e.Evidence, e.Instance)
}

// heldByOthers returns the members that hold every one of roles live, as
// the session's view judges their leases, when none is me; "" otherwise.
func heldByOthers(ctx context.Context, sess *election.Session, roles []codec.Role, me codec.MemberID) string {
	var by []string
	for _, role := range roles {
		h := heldByOther(ctx, sess, role, me)
		if h == "" {
			return ""
		}
		if !slices.Contains(by, string(h)) {
			by = append(by, string(h))
		}
	}
	return strings.Join(by, ", ")
}

// heldByOther returns the member that holds role live, as the session's
// view judges the lease, when it is not me; "" otherwise.
func heldByOther(ctx context.Context, sess *election.Session, role codec.Role, me codec.MemberID) codec.MemberID {
	st, err := sess.View().Role(ctx, role)
	if err != nil {
		return ""
	}
	h := server.NewRow(st, time.Now()).Holder
	if h == nil || h.Expired || h.Member == me {
		return ""
	}
	return h.Member
}
