package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// Options configure a [Member]. The zero value is usable: default
// settings, the system clock, no logs, no metrics, no event callback.
type Options struct {
	// Settings are the timings; zero fields take their defaults (see
	// [Settings]).
	Settings Settings
	// Clock is the local clock. Default the system clock.
	Clock Clock
	// Logger receives a structured record of every transition (Info),
	// every failed call (Warn) and every decision (Debug). Default none.
	Logger *slog.Logger
	// Registerer receives the member's metrics. Default nil: no metrics,
	// nothing registered globally. Members given the same Registerer share
	// the collectors (only krole_holder has a member label):
	//
	//	krole_holder{role,member}                     gauge: 1 while this member holds role, else 0
	//	krole_transitions_total{role,transition}      elected, or the revocation reason with "_" for " "
	//	krole_heartbeat_duration_seconds{result}      member-session rounds, from start to answer
	//	krole_lease_rewrite_duration_seconds{result}  lease rewrites, the wait for a call slot included
	//	krole_fenced_total{role}                      losses of role to a later member
	//	krole_work_failures_total{role}               runs of work that returned an error
	//	krole_campaign_backoff_seconds{role}          campaign backoff after the last work failure; 0 once elected
	//	krole_queued_roles{member}                    roles registered for but not campaigned for (paused)
	//
	// A heartbeat's result is ok, late (committed after a vouched role's
	// local deadline: the incarnation ends), fenced, unknown (no definite
	// answer) or error; a rewrite's is ok, fenced, retired or error. Both
	// histograms have 16 buckets doubling from 0.5ms and no role label.
	Registerer prometheus.Registerer
	// OnEvent receives the member's events (see [Event]), one call at a
	// time (never concurrently, even across roles), in order for each role.
	// Every role's goroutine waits for it, so a slow OnEvent delays their
	// check-ins with the member session (a role that misses them is lost):
	// return quickly, and never call [Member.Resign]. Default none.
	OnEvent func(Event)
	// Group, when set, makes the member's roles one group, spread over
	// its members; the source must be a [GroupSource]. Default none.
	Group *Group
}

// Work is the long-running part of a processor: it runs while this member
// holds held.Role, and ctx ends when the role is lost (see [Member.Run]).
// Each holding gets at most one call, on a goroutine of its own; calls for
// different roles run concurrently, calls for one role never overlap.
// Work should return soon after ctx ends: until it does, the member
// neither resigns nor returns from Run (see "Stepping down while work
// stops" in the package doc).
type Work func(ctx context.Context, held Held) error

// Member is one member of one or more roles: it registers as a candidate,
// follows the roles through a [Source], challenges when its turn comes,
// renews what it holds and steps down when it must. Create it with [New];
// run it with [Member.Run].
type Member struct {
	t       fencing.Transport
	src     Source
	me      codec.MemberID
	s       Settings
	clk     Clock
	log     *slog.Logger
	met     metrics
	onEvent func(Event)
	evMu    sync.Mutex

	runners map[codec.Role]*runner
	order   []codec.Role

	lim  *limiter   // the transport calls in flight
	acts *actors    // the roles acting at once while they campaign
	adm  *admission // how many roles it campaigns for
	sess *session   // the member session: heartbeats for every held role
	grp  *balancer  // the group's plan; nil outside a group
	prog progress   // when other members were last seen taking a role

	inst string             // this process's instance; "" without an InstanceRegisterer
	ireg InstanceRegisterer // t, when it is one
	// instExt: the localExt every role's Local starts with (inst); nil
	// without an instance.
	instExt *localExt

	mu      sync.Mutex
	started bool
	running bool
	stop    context.CancelFunc // ends Run's roles (refuse)
	inUse   *MemberInUseError  // why refuse ended them
	// What Add needs to start a role while Run runs: Run's context and
	// work (the work every role runs), and its wait groups. closing: Run's context ended, so Add
	// starts no more roles (Run holds one count of stopping until then).
	runCtx   context.Context
	runWork  Work
	wg       *sync.WaitGroup
	stopping *sync.WaitGroup
	closing  bool

	works sync.WaitGroup

	// wake resumes the parked roles at the end of their waits; under wakeMu.
	wakeMu sync.Mutex
	wake   alarm[*runner]

	// seen holds each member's session record last read by a role
	// (sharedSeen), under seenMu.
	seenMu sync.Mutex
	seen   map[codec.MemberID]*rolestate.SessionSeen

	// idle (tests) is called by a role's goroutine before each wait.
	idle func(role codec.Role, until time.Time)
	// manualRounds (tests): the session's rounds run only when the test
	// calls them; the session end is still written when Run ends.
	manualRounds bool
}

// New returns a Member named me for roles, which reads the roles from src
// and acts through t. It validates as [ValidateMember] does, checks a
// [fencing.TxnTimeouter]'s timeout as Settings.TransactionTimeout is
// checked ([*SettingsError]), and registers the metrics. It does not block.
func New(t fencing.Transport, src Source, me codec.MemberID, roles []codec.Role, opts Options) (*Member, error) {
	if t == nil || src == nil {
		return nil, errors.New("processor: a member needs a transport and a source")
	}
	s, err := ValidateMember(me, roles, opts.Settings)
	if err != nil {
		return nil, err
	}
	if err := checkGroup(opts.Group, src); err != nil {
		return nil, err
	}
	// The transport's timeout holds readers back as long as the member's
	// own would (docs/DESIGN.md, "Liveness: what bounds a vacancy").
	if c, ok := t.(fencing.TxnTimeouter); ok {
		if err := s.checkTxnTimeout("transport transaction timeout", c.TxnTimeout()); err != nil {
			return nil, err
		}
	}
	m := &Member{
		t: t, src: src, me: me, s: s,
		clk: opts.Clock, log: opts.Logger, onEvent: opts.OnEvent,
		runners: make(map[codec.Role]*runner, len(roles)),
	}
	if m.clk == nil {
		m.clk = SystemClock()
	}
	if ir, ok := t.(InstanceRegisterer); ok {
		m.ireg, m.inst = ir, NewInstance()
		m.instExt = &localExt{instance: m.inst}
	}
	m.lim = newLimiter(s.MaxInFlight)
	m.acts = &actors{width: actorsWidth(s)}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.log = m.log.With("member", string(me))
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("processor: metrics: %w", err)
	}
	m.met = met
	m.adm = newAdmission(m)
	m.wake = alarm[*runner]{mu: &m.wakeMu, clk: m.clk, fire: resumeAll}
	m.sess = newSession(m)
	if opts.Group != nil {
		m.grp = newBalancer(m, *opts.Group)
	}
	for _, r := range roles {
		m.runners[r] = newRunner(m, r)
		m.order = append(m.order, r)
	}
	return m, nil
}

// ValidateMember returns s with its defaults once me, roles and s are
// what [New] accepts: the one list of its checks, for callers that must
// know before they connect.
func ValidateMember(me codec.MemberID, roles []codec.Role, s Settings) (Settings, error) {
	if err := me.Validate(); err != nil {
		return s, fmt.Errorf("processor: %w", err)
	}
	if len(roles) == 0 {
		return s, errors.New("processor: a member needs at least one role")
	}
	seen := make(map[codec.Role]bool, len(roles))
	for _, r := range roles {
		if err := r.Validate(); err != nil {
			return s, fmt.Errorf("processor: %w", err)
		}
		if seen[r] {
			return s, fmt.Errorf("processor: role %s given twice", r)
		}
		seen[r] = true
	}
	s = s.WithDefaults()
	return s, s.Validate()
}

// ID returns the member's id.
func (m *Member) ID() codec.MemberID { return m.me }

// Roles returns the roles the member runs, in the order given to New.
func (m *Member) Roles() []codec.Role {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]codec.Role(nil), m.order...)
}

// Settings returns the settings the member runs with, defaults applied.
func (m *Member) Settings() Settings { return m.s }

// Run runs the member until ctx ends, then leaves, and returns nil, a
// [*MemberInUseError], or [ErrAlreadyRun] (a Member runs once). It blocks
// until every goroutine it started, work included, has returned.
//
// Each role runs by the rules of [Decide], on a goroutine while it acts
// (see the package doc); the member session runs beside them (see "Member sessions" in the package
// doc). work, when not nil, runs for each role while this member holds
// it, on a context derived from ctx that is cancelled when the role is
// lost, when ctx ends, and by a timer at the local deadline
// (HeartbeatDeadline after the last renewal began), whatever is in
// flight. A new holding's work starts only after the previous run for the
// role has returned. Work returning nil leaves the role held; an error
// resigns it (revoked: work failed), and the member campaigns again after
// a backoff doubling from HeartbeatInterval up to [MaxWorkBackoff]. The
// cancellation is best effort: only the broker's fence stops a deposed
// holder's writes, so pass held.Token to a fenced writer.
//
// When ctx ends, a lease write in flight finishes; then, unless
// KeepOnExit is set, Run cancels work and waits for it, keeping the
// holding renewed, writes one session end that releases the member's
// leases, and deregisters each role, each write on a fresh context
// bounded by TransactionTimeout.
func (m *Member) Run(ctx context.Context, work Work) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return ErrAlreadyRun
	}
	m.started, m.running = true, true
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	m.stop = stop
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.running = false
		m.mu.Unlock()
	}()

	var wg, stopping sync.WaitGroup
	vetExit := make(chan struct{})
	go func() {
		defer close(vetExit)
		m.sess.vetAtStart(ctx)
		// Begun now so that no handover waits for its InitProducerId.
		if _, err := m.sess.ensure(ctx); err != nil && ctx.Err() == nil {
			m.log.Info("starting the member session failed; the first challenge tries again", "err", err)
			return
		}
		// No round at once: it would contend with the first challenge
		// (docs/DESIGN.md, "Why it is safe: member sessions"); but a
		// group member campaigns only once its heartbeat shows.
		if m.grp != nil {
			m.sess.poke()
		}
	}()
	if m.grp != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.grp.run(ctx)
		}()
	}
	// The session ends once every role has stopped acting on its role
	// (rolesStopped), before they deregister (session.awaitFinish).
	rolesStopped, sessDone := make(chan struct{}), make(chan struct{})
	m.sess.finishing.Store(true)
	go func() {
		defer close(sessDone)
		if m.manualRounds {
			<-rolesStopped
			m.sess.finish(ctx)
			return
		}
		m.sess.run(ctx, rolesStopped)
	}()
	if ss, ok := m.src.(SessionSource); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.prog.watch(ctx, ss, m.s, m.clk)
		}()
	}
	// Parked roles wake at the end of ctx: one callback for them all.
	stopResume := context.AfterFunc(ctx, func() {
		m.acts.close()
		m.mu.Lock()
		rs := make([]*runner, 0, len(m.runners))
		for _, r := range m.runners {
			rs = append(rs, r)
		}
		m.mu.Unlock()
		for _, r := range rs {
			r.resume()
		}
	})
	defer stopResume()
	m.mu.Lock()
	m.runCtx, m.runWork, m.wg, m.stopping = ctx, work, &wg, &stopping
	stopping.Add(1) // Run's own, until its context ends: Add needs it above zero
	for _, role := range m.order {
		m.startLocked(m.runners[role])
	}
	m.mu.Unlock()
	go func() {
		<-ctx.Done()
		m.mu.Lock()
		m.closing = true
		m.mu.Unlock()
		stopping.Done()
	}()
	stopping.Wait()
	close(rolesStopped)
	wg.Wait()
	<-sessDone
	<-vetExit
	m.works.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inUse != nil {
		return m.inUse
	}
	return nil
}

// startLocked starts r's goroutine under Run; m.mu is held.
func (m *Member) startLocked(r *runner) {
	m.wg.Add(1)
	m.stopping.Add(1)
	r.start()
}

// Add makes the running member a candidate for role too, with the work
// Run was given: it registers and campaigns as for the roles given to
// [New], and leaves it when Run ends. It does not block. It returns
// [ErrNotRunning] outside Run, or an error when role is not a valid name
// or the member already runs it.
func (m *Member) Add(role codec.Role) error {
	if err := role.Validate(); err != nil {
		return fmt.Errorf("processor: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running || m.closing || m.stopping == nil || m.runCtx.Err() != nil {
		return ErrNotRunning
	}
	if _, ok := m.runners[role]; ok {
		return fmt.Errorf("processor: the member already runs role %s", role)
	}
	r := newRunner(m, role)
	m.runners[role] = r
	m.order = append(m.order, role)
	m.startLocked(r)
	return nil
}

// runner returns role's runner.
func (m *Member) runner(role codec.Role) (*runner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runners[role]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownRole, role)
	}
	return r, nil
}

// RewriteLease asks the member to write its lease of role again at once,
// so that readers see the holder's new value (lease writes carry it). It
// does not block, and does nothing when the member does not hold role; it
// returns [ErrUnknownRole] for a role the member does not run.
func (m *Member) RewriteLease(role codec.Role) error {
	r, err := m.runner(role)
	if err != nil {
		return err
	}
	r.askRewrite()
	return nil
}

// Resign hands role over if this member holds it: it cancels the role's
// work and waits for it, keeping the holding renewed, then writes the
// release so the next candidate challenges at once. It blocks until the
// release is written (or the role given up) or ctx ends. The member then
// registers again at the back of the queue, which Resign does not wait
// for. It returns [ErrNotHolder], [ErrNotRunning], [ErrUnknownRole], or
// the release write's error (the role is given up either way).
func (m *Member) Resign(ctx context.Context, role codec.Role) error {
	return m.resign(ctx, role, false)
}

// Withdraw takes the member out of role's queue until [Member.Rejoin]: it
// hands the role over as Resign does if it holds it, deregisters, and
// neither registers nor campaigns for role meanwhile. It blocks until that
// is done or ctx ends. It returns [ErrNotRunning], [ErrUnknownRole], the
// release write's error, or nil, whether or not the member held role.
func (m *Member) Withdraw(ctx context.Context, role codec.Role) error {
	return m.resign(ctx, role, true)
}

// Rejoin ends a [Member.Withdraw] of role: the member registers at the
// back of the queue and campaigns again. It does not block. It returns
// [ErrUnknownRole] for a role the member does not run, else nil.
func (m *Member) Rejoin(role codec.Role) error {
	r, err := m.runner(role)
	if err != nil {
		return err
	}
	if r.withdrawn.Swap(false) {
		r.poke()
	}
	return nil
}

func (m *Member) resign(ctx context.Context, role codec.Role, withdraw bool) error {
	r, err := m.runner(role)
	if err != nil {
		return err
	}
	m.mu.Lock()
	running := m.running
	m.mu.Unlock()
	if !running {
		return ErrNotRunning
	}
	req := make(chan error, 1)
	exited := r.ask(resignReq{q: req, withdraw: withdraw})
	if exited == nil {
		return ErrNotRunning
	}
	select {
	case err := <-req:
		return err
	case <-exited:
		select {
		case err := <-req:
			return err
		default:
		}
		return ErrNotRunning
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Member) emit(e Event) {
	if m.onEvent == nil {
		return
	}
	m.evMu.Lock()
	defer m.evMu.Unlock()
	m.onEvent(e)
}

// sharedSeen returns member's session record se as one value that every
// role reading the same record shares (read only): a role's state holds
// its lease's holder's latest record, which is the same for every role
// the holder holds.
func (m *Member) sharedSeen(member codec.MemberID, se rolestate.SessionSeen) *rolestate.SessionSeen {
	m.seenMu.Lock()
	defer m.seenMu.Unlock()
	if p := m.seen[member]; p != nil && sameSeen(*p, se) {
		return p
	}
	if m.seen == nil {
		m.seen = map[codec.MemberID]*rolestate.SessionSeen{}
	}
	c := se // made here, so that a record shared already allocates nothing
	p := &c
	m.seen[member] = p
	return p
}

// sameSeen reports whether a and b are the same session record as read.
func sameSeen(a, b rolestate.SessionSeen) bool {
	x, y := a.Heartbeat, b.Heartbeat
	return a.Offset == b.Offset && a.SeenAt.Equal(b.SeenAt) &&
		x.Member == y.Member && x.Session == y.Session && x.GrantedAt == y.GrantedAt && x.Deadline == y.Deadline &&
		x.End == y.End && x.Group == y.Group && x.Weight == y.Weight && x.Drain == y.Drain &&
		slices.Equal(x.Excluded, y.Excluded)
}
