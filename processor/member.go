package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
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
	// and nothing is registered globally. New registers these
	// collectors; Members given the same Registerer share them (only
	// krole_holder has a member label, so the others sum over them):
	//
	//	krole_holder{role,member}
	//	    gauge: 1 while this member holds role, else 0.
	//	krole_transitions_total{role,transition}
	//	    counter: transition is elected, or the revocation reason with
	//	    "_" for " ": fenced, lease_lost, resigned, context_ended,
	//	    work_failed, token_retired.
	//	krole_heartbeat_duration_seconds{result}
	//	    histogram of the member session's heartbeat rounds, one
	//	    observation per round whatever the roles held, from the
	//	    round's start to the heartbeat's answer; result is ok, late
	//	    (it committed after the local deadline of a role it vouched
	//	    for: the session's incarnation ends), fenced, retired (no
	//	    definite answer, or the transport no longer holds the session's
	//	    token: the session starts again) or error.
	//	krole_lease_rewrite_duration_seconds{result}
	//	    histogram of lease rewrites (every LeaseRewriteInterval per
	//	    held role, and RenewNow), from the step's start, the wait for
	//	    a call slot included; result is ok, fenced, retired (the
	//	    token was retired: see ReasonTokenRetired) or error.
	//	    Both histograms: buckets from 0.5ms, doubling, 16 of them;
	//	    no role label, so their series do not grow with the roles.
	//	krole_fenced_total{role}
	//	    counter: losses of role to a later member: writes of this
	//	    member (challenge, lease rewrite, release) refused, and
	//	    holdings ended because the member session's round found the
	//	    role's token moved or the transport forgot the token.
	//	krole_work_failures_total{role}
	//	    counter: runs of work that returned an error.
	//	krole_campaign_backoff_seconds{role}
	//	    gauge: the wait before campaigning again after the last work
	//	    failure (see ReasonWorkFailed); 0 once elected.
	//	krole_queued_roles{member}
	//	    gauge: roles the member is registered for but does not
	//	    campaign for now: campaigns pause after a challenge timed out
	//	    (see "Many roles" in the package documentation).
	Registerer prometheus.Registerer
	// OnEvent receives the member's events (see [Event]). It is called
	// from the member's goroutines, one call at a time (never
	// concurrently, even across roles), in order for each role. The
	// calling role's goroutine waits for it, and every other role's
	// waits for its turn, so a slow OnEvent delays the roles' check-ins
	// with the member session and their taking of its rounds' word (a
	// holding not told of a round before its local deadline ends; one
	// whose goroutine does not check in is dropped as stuck): it must
	// return quickly, and must not call [Member.Resign] (which waits for
	// the goroutine that is calling it). Default none.
	OnEvent func(Event)
}

// Work is the long-running part of a processor: it runs while this member
// holds held.Role, and ctx ends when the role is lost (see [Member.Run]).
//
// Each holding gets at most one call, on a goroutine of its own. Calls
// for different roles run concurrently; calls for one role never overlap
// (a new holding's call starts only after the previous one has returned,
// and a holding that ended meanwhile gets no call at all).
// Work should return soon after ctx ends: until it does, the member does
// not resign and its Run does not return (leaving with KeepOnExit, it
// stops waiting for work at the local deadline, RenewDeadline after the
// start of the last renewal; after a resignation, [ReasonResigned], an operator's
// step-down, [ReasonDeregistered], or the end of Run's context, it keeps
// the holding renewed meanwhile and waits for as long as work runs).
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
	adm  *admission // how many roles it campaigns for
	sess *session   // the member session: heartbeats for every held role
	prog progress   // when other members were last seen taking a role

	inst string             // this process's instance; "" without an InstanceRegisterer
	ireg InstanceRegisterer // t, when it is one

	mu      sync.Mutex
	started bool
	running bool
	stop    context.CancelFunc // ends Run's roles (refuse)
	inUse   *MemberInUseError  // why refuse ended them

	works sync.WaitGroup

	// idle, when set (tests), is called by a role's goroutine each time it
	// is about to wait, with the time it will wake at the latest.
	idle func(role codec.Role, until time.Time)
	// manualRounds (tests): the member session's rounds run only when the
	// test calls them, not on a timer; the session end is still written
	// when Run ends.
	manualRounds bool
}

// New returns a Member named me for roles, which reads the roles from src
// and acts through t. It validates the names and the settings (with
// defaults applied) and registers the metrics; it does not block. When t
// is a [fencing.TxnTimeouter] (as [fencing.BrokerTransport] is), its
// transaction timeout must be shorter than LeaseDuration - RenewInterval,
// as Settings.TransactionTimeout must: otherwise New returns a
// [*SettingsError]. A transport that is not one is not checked.
func New(t fencing.Transport, src Source, me codec.MemberID, roles []codec.Role, opts Options) (*Member, error) {
	if t == nil || src == nil {
		return nil, errors.New("processor: a member needs a transport and a source")
	}
	if err := me.Validate(); err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	if len(roles) == 0 {
		return nil, errors.New("processor: a member needs at least one role")
	}
	s := opts.Settings.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	// The coordinator aborts a dead holder's open transaction after the
	// transport's transaction timeout; until then read_committed readers
	// (the view included) cannot see later renewals. It must fit in the
	// same bound as the member's own call timeout. A transport that does
	// not say its timeout (fencingtest.MockTransport) is not checked.
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
	}
	m.lim = newLimiter(s.MaxInFlight)
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
	m.sess = newSession(m)
	for _, r := range roles {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("processor: %w", err)
		}
		if _, dup := m.runners[r]; dup {
			return nil, fmt.Errorf("processor: role %s given twice", r)
		}
		m.runners[r] = newRunner(m, r)
		m.order = append(m.order, r)
	}
	return m, nil
}

// ID returns the member's id.
func (m *Member) ID() codec.MemberID { return m.me }

// Roles returns the roles the member runs, in the order given to New.
func (m *Member) Roles() []codec.Role { return append([]codec.Role(nil), m.order...) }

// Settings returns the settings the member runs with, defaults applied.
func (m *Member) Settings() Settings { return m.s }

// Run runs the member until ctx ends, then leaves, and returns nil (or
// [ErrAlreadyRun]: a Member runs once). It blocks.
//
// Each role runs on its own goroutine: the member registers (unless the
// view already shows it as a candidate), follows the role, challenges in
// its turn, checks in with the member session while it holds the role
// (the session's heartbeats renew it), and steps down when the session's
// round finds its token moved, a write under the token is refused, or no
// renewal succeeds before RenewDeadline. The member session runs beside
// the roles from Run's start (see "Member sessions" in the package
// documentation).
//
// work, when not nil, runs on its own goroutine for each role while this
// member holds it. Its ctx derives from Run's and is cancelled when the
// role is lost (fenced, lease lost, resigned) or Run's ctx ends; it is
// also cancelled by a timer at the local deadline (RenewDeadline after the
// start of the last renewal: the member session round that last vouched
// for the role, or its election or last lease write), independently of any transport call in
// flight. When the role is regained, work starts again, but never while
// its previous run for the role has not returned. work returning nil
// leaves the role held (its job is done); returning an error resigns the
// role (revoked: work failed), and the member campaigns again after a
// backoff that doubles with each consecutive failure, from RenewInterval
// up to [MaxWorkBackoff].
//
// The cancellation is local and best effort: the broker's fence is what
// guarantees that a deposed holder's writes fail. A deposed holder whose
// work keeps writing without its token is not stopped by anything here;
// pass held.Token to a fenced writer.
//
// When ctx ends, a lease write in flight (a rewrite, a challenge's) is
// not cut short but finishes, bounded by its own timeout; then, unless
// KeepOnExit is set, Run cancels work and waits for it, renewing
// meanwhile as Resign does, and once every role has stopped writes one
// session end, which releases every lease that names the member
// session's incarnation (a lease that does not is released on its own,
// as Resign does), while it deregisters each role; each write on a fresh
// context bounded by TransactionTimeout. Run returns once every goroutine it
// started, work included, has returned.
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

	var wg sync.WaitGroup
	vetExit := make(chan struct{})
	go func() {
		defer close(vetExit)
		m.sess.vetAtStart(ctx)
		// The session begins now rather than at the first challenge, so
		// that no handover waits for its InitProducerId; a failure here
		// is retried at the first challenge.
		if _, err := m.sess.ensure(ctx); err != nil && ctx.Err() == nil {
			m.log.Info("starting the member session failed; the first challenge tries again", "err", err)
			return
		}
		// The first heartbeat comes with the first holding (which wakes
		// the session) or a RenewInterval from now, not at once: a
		// round at start would contend with the member's first
		// challenge at the coordinator. Another process under this
		// member id watches for a heartbeat for a LeaseDuration (see
		// vetAtStart), well over a RenewInterval.
	}()
	// The session ends once every role's goroutine has stopped acting
	// on its role (rolesStopped), not once each has also deregistered:
	// a leaving member's runners deregister once the session end is
	// written (session.awaitFinish), so that it is not queued behind them.
	var stopping sync.WaitGroup
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
	for _, role := range m.order {
		r := m.runners[role]
		wg.Add(1)
		stopping.Add(1)
		r.stopped = sync.OnceFunc(stopping.Done)
		go func() {
			defer wg.Done()
			r.run(ctx, work)
		}()
	}
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

// RenewNow asks the member to write its lease of role again at once if it
// holds it (the member session's heartbeats renew a holding without
// writing its lease, which is otherwise rewritten only every
// [LeaseRewriteInterval]): the transport's lease writes carry the
// holder's value (see election), so a holder whose value changed calls it
// to have readers see the new value within a write. It
// does not block, and does nothing when the member does not hold role.
// It returns [ErrUnknownRole] for a role the member does not run.
func (m *Member) RenewNow(role codec.Role) error {
	r, ok := m.runners[role]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownRole, role)
	}
	select {
	case r.renewCh <- struct{}{}:
	default:
	}
	return nil
}

// Resign hands role over if this member holds it: it cancels the role's
// work and waits for it, keeping the holding renewed meanwhile (the
// member session's heartbeats go on vouching for it; see the package
// doc: until the holding is lost), and
// writes the release lease under its token so the next candidate
// challenges at once. It blocks until the release is written (or the
// role given up) or ctx ends. The member then deregisters and registers
// again at the back of the queue; Resign does not wait for that, so a
// view read right after it may still show the old registration. It returns [ErrNotHolder] when
// the member does not hold role, [ErrNotRunning] when Run is not running,
// [ErrUnknownRole], or the error of the release write (the role is given
// up either way).
func (m *Member) Resign(ctx context.Context, role codec.Role) error {
	return m.resign(ctx, role, false)
}

// Withdraw takes the member out of role's queue until [Member.Rejoin]:
// when it holds role it hands it over as Resign does (work stopped, the
// release written); in any case it deregisters, and then it neither
// registers nor campaigns for role again until Rejoin is called. It
// blocks until that is done or ctx ends. It returns [ErrNotRunning] when
// Run is not running, [ErrUnknownRole], or the error of the release
// write; nil otherwise, whether or not the member held role. (Resign,
// and an operator's removal of the registration, queue the member again
// at once.)
func (m *Member) Withdraw(ctx context.Context, role codec.Role) error {
	return m.resign(ctx, role, true)
}

// Rejoin ends a [Member.Withdraw] of role: the member registers (at the
// back of the queue) and campaigns again. It does not block. It returns
// [ErrUnknownRole] for a role the member does not run; otherwise nil,
// also when role was not withdrawn.
func (m *Member) Rejoin(role codec.Role) error {
	r, ok := m.runners[role]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownRole, role)
	}
	if r.withdrawn.Swap(false) {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func (m *Member) resign(ctx context.Context, role codec.Role, withdraw bool) error {
	r, ok := m.runners[role]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownRole, role)
	}
	m.mu.Lock()
	running := m.running
	m.mu.Unlock()
	if !running {
		return ErrNotRunning
	}
	req := make(chan error, 1)
	select {
	case r.resignCh <- resignReq{q: req, withdraw: withdraw}:
	case <-r.exited:
		return ErrNotRunning
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req:
		return err
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
