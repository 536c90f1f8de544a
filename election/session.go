package election

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/view"
)

// Config configures a [Session]. Cluster.Brokers is required; Member and
// Roles go together: both for a session that campaigns, neither for one
// that only reads. Every other zero field takes its default.
type Config struct {
	// Cluster names the brokers, role topic, transactional-id prefix, TLS
	// and SASL ([fencing.Config] gives the defaults). TxnTimeout is not
	// read: the session sets it to Settings.TransactionTimeout. ClientID
	// defaults to "krole-" + Member ("krole-observer" without one).
	Cluster Cluster
	// Member is this member's id, one live process's ([ErrMemberInUse]).
	// Default "": a session that only reads ([ErrReadOnly]).
	Member MemberID
	// Roles are the roles the member may campaign for: at least one with
	// Member, none without. Default none.
	Roles []Role
	// Group, when set, makes Roles one group that spreads over its
	// members, as [processor.Options].Group: a semaphore's slots with
	// Limit 1. Only with Member. Default none.
	Group *processor.Group
	// Value rides in the member's registrations and leases, for readers
	// to find the holder by (its address, say); at most
	// [codec.MaxValueLen] bytes of UTF-8, only with Member. Default "".
	Value string
	// Settings are the timings; zero fields default from LeaseDuration
	// (10s; see [processor.Settings]).
	Settings Settings
	// StateDir keeps the view's table on disk ([view.Options].StateDir).
	// Default "": in memory.
	StateDir string
	Logger   *slog.Logger // the member's logs; default none
	// ViewLogger receives the view's and goka's logs. Default none.
	ViewLogger *slog.Logger
	// Registerer receives the member's metrics. Default none.
	Registerer prometheus.Registerer
	// OnEvent receives the member's events, one call at a time, in order
	// per role; it must return quickly and must not call Resign
	// ([processor.Options].OnEvent). Default none.
	OnEvent func(Event)
	// OnReady is called once, and waited for, when the view has first
	// caught up, before the member starts (so before any OnEvent); not
	// when the run ends first. Default none.
	OnReady func()
	// Clock is the member's and the view's clock: timers, lease stamps,
	// and the view's stamps by which [Election.Leader] judges a lease.
	// Default the system clock.
	Clock processor.Clock
	// OnMinted is called on the member's goroutine with every token its
	// AcquireEpoch returns (won or lost), before any lease is written
	// under it; it must return quickly. Default none.
	OnMinted func(role Role, tok Token)
	// OnFatal is called once, and waited for, with the [*ViewError] Run
	// will return when the view fails for good, before the member leaves
	// (so before its Revoked events); not when ctx ended. Default none.
	OnFatal func(*ViewError)
}

// Session is a member of some roles with the view and transport it runs
// on, or, without a member, a reader of the role topic (package doc: what
// it starts, and in which order it stops). Create it with [New]. Safe for
// concurrent use.
type Session struct {
	t       *fencing.BrokerTransport
	v       *view.View
	vr      viewRunner        // v; a test wraps it to fail on demand
	m       *processor.Member // nil: the session only reads
	g       *gates            // the roles the member may campaign for
	clk     processor.Clock
	log     *slog.Logger
	onReady func()
	onFatal func(*ViewError)

	vt *values  // the values the member registers with
	tr *tracker // the member's events, for the Elections

	mu       sync.Mutex
	started  bool               // Run was called, or Close, or the session started itself
	autoStop context.CancelFunc // ends the run the session started itself
	autoDone chan struct{}      // closed when that run has returned
	adopted  bool               // Run was called after the session started itself
	work     Work               // the work of that run, from Run; nil: none
}

// New validates cfg, connects, and builds the view and the member; it
// starts nothing. It blocks for the connection only, and fails with an
// error matching [fencing.ErrClient] when no broker answers, or
// [processor.ErrInvalidSettings]. The Session holds the connection until
// Run returns or [Session.Close].
func New(cfg Config) (*Session, error) {
	s, err := checkMember(cfg)
	if err != nil {
		return nil, err
	}
	cluster := cfg.Cluster
	cluster.TxnTimeout = s.TransactionTimeout // see the package doc
	if cluster.ClientID == "" {
		cluster.ClientID = "krole-" + cmp.Or(string(cfg.Member), "observer")
	}
	clk := cfg.Clock
	if clk == nil {
		clk = processor.SystemClock()
	}
	t, err := fencing.NewBrokerTransport(cluster)
	if err != nil {
		return nil, err
	}
	// The view shares the transport's record of the producer ids the
	// member mints; it verifies other authors through a transport of its
	// own, many roles per request.
	v, err := view.New(view.Options{Config: cluster, StateDir: cfg.StateDir, Logger: cfg.ViewLogger, Clock: clk.Now,
		Authors: t.Authors()})
	if err != nil {
		_ = t.Close()
		return nil, err
	}
	vals := &values{def: cfg.Value}
	tr := newTracker()
	onEvent := func(e processor.Event) {
		tr.note(e)
		if cfg.OnEvent != nil {
			cfg.OnEvent(e)
		}
	}
	g := newGates(cfg.Roles)
	var m *processor.Member
	if cfg.Member != "" {
		m, err = processor.New(valueTransport{t, vals, cfg.OnMinted}, gatedSource{v, g}, cfg.Member, cfg.Roles, processor.Options{
			Settings:   s,
			Clock:      clk,
			Logger:     cfg.Logger,
			Registerer: cfg.Registerer,
			OnEvent:    onEvent,
			Group:      cfg.Group,
		})
		if err != nil {
			_ = t.Close()
			return nil, err
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Say what the brokers' abort interval makes of the stall rule
	// (harmless to members on a view: docs/DESIGN.md, "Liveness: what
	// bounds a vacancy").
	if bs, err := t.StartTxnSettings(); err == nil {
		if err := bs.CheckTimings(s.TransactionTimeout, s.LeaseDuration, s.HeartbeatInterval); err != nil {
			log.Info("a transaction left open by a crash can hold the role topic's readers back longer than a lease; "+
				"challenges of that partition's roles wait until it ends", "broker", err.Error())
		}
	}
	return &Session{t: t, v: v, vr: v, m: m, g: g, clk: clk, log: log, onReady: cfg.OnReady, onFatal: cfg.OnFatal, vt: vals, tr: tr}, nil
}

// checkMember validates the member, its roles, its value and the
// settings, and returns the settings with their defaults.
func checkMember(cfg Config) (processor.Settings, error) {
	switch {
	case cfg.Member == "" && len(cfg.Roles) > 0:
		return processor.Settings{}, fmt.Errorf("election: Config.Roles %v without a Config.Member to campaign as (a session without a member only reads)", cfg.Roles)
	case cfg.Member == "" && cfg.Group != nil:
		return processor.Settings{}, fmt.Errorf("election: Config.Group %q without a Config.Member to campaign as (a session without a member only reads)", cfg.Group.Name)
	case cfg.Member == "" && cfg.Value != "":
		return processor.Settings{}, fmt.Errorf("election: Config.Value %q without a Config.Member to register with it (a session without a member only reads)", cfg.Value)
	case cfg.Member != "" && len(cfg.Roles) == 0:
		return processor.Settings{}, fmt.Errorf("election: Config.Member %q without Config.Roles to campaign for (leave Member empty for a session that only reads)", cfg.Member)
	case cfg.Member == "":
		s := cfg.Settings.WithDefaults()
		return s, s.Validate()
	}
	if err := codec.CheckWriteValue(cfg.Value); err != nil {
		return processor.Settings{}, fmt.Errorf("election: %w", err)
	}
	if g := cfg.Group; g != nil {
		switch err := codec.CheckGroup(g.Name); {
		case err != nil:
			return processor.Settings{}, fmt.Errorf("election: Config.Group: %w", err)
		case g.Weight < 0 || g.Weight > codec.MaxWeight:
			return processor.Settings{}, fmt.Errorf("election: Config.Group %s: weight %d: a weight is 0-%d", g.Name, g.Weight, codec.MaxWeight)
		case g.Limit < 0:
			return processor.Settings{}, fmt.Errorf("election: Config.Group %s: limit %d: it is 0 (none) or more", g.Name, g.Limit)
		}
	}
	return processor.ValidateMember(cfg.Member, cfg.Roles, cfg.Settings)
}

// valueTransport writes the session's values into registrations and
// leases and reports minted tokens (Config.OnMinted).
type valueTransport struct {
	*fencing.BrokerTransport
	values   *values
	onMinted func(codec.Role, codec.Token)
}

// AcquireEpoch implements fencing.Transport, calling onMinted.
func (t valueTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	tok, err := t.BrokerTransport.AcquireEpoch(ctx, role)
	if err == nil && t.onMinted != nil {
		t.onMinted(role, tok)
	}
	return tok, err
}

// WriteLease implements fencing.Transport: every lease but a release
// carries role's current value, written under the holder's token.
func (t valueTransport) WriteLease(ctx context.Context, role codec.Role, token codec.Token, lease codec.Lease) (int64, error) {
	if !lease.Released() {
		lease.Value = t.values.get(role)
	}
	return t.BrokerTransport.WriteLease(ctx, role, token, lease)
}

// Register implements fencing.Transport with the session's value for role.
func (t valueTransport) Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error) {
	return t.values.register(role, func(value string) (int64, error) { return t.RegisterValue(ctx, role, member, value) })
}

// RegisterInstance implements processor.InstanceRegisterer with the
// session's value for role.
func (t valueTransport) RegisterInstance(ctx context.Context, role codec.Role, member codec.MemberID, instance string) (int64, error) {
	return t.values.register(role, func(value string) (int64, error) {
		return t.AppendRegistration(ctx, role, codec.Registration{Member: member, Value: value, Instance: instance})
	})
}

// viewRunner is what Run needs of the view to run it: *view.View.
type viewRunner interface {
	Run(ctx context.Context) error
	WaitCaughtUp(ctx context.Context) error
}

// Run runs the view and the member, campaigning for every role of
// Config.Roles, until ctx ends, then stops them in the package doc's
// order. It blocks until every goroutine it started, work included, has
// returned. work runs while the member holds a role; its ctx ends when
// the role is lost or Run's ctx ends ([processor.Member.Run]). work may
// be nil.
//
// Run returns nil when ctx ended, a [*ViewError], a [*MemberInUseError],
// or [ErrAlreadyRun] when called twice or after Close. Called after the
// session started itself, it adopts that run; its work runs for holdings
// that begin after the call.
func (s *Session) Run(ctx context.Context, work Work) error {
	s.mu.Lock()
	if s.autoStop != nil && !s.adopted { // adopt the run the session started
		s.adopted, s.work = true, work
		stop, done := s.autoStop, s.autoDone
		s.mu.Unlock()
		s.g.openAll()
		select {
		case <-ctx.Done():
			stop()
			<-done
		case <-done:
		}
		return s.tr.result()
	}
	if s.started {
		s.mu.Unlock()
		return ErrAlreadyRun
	}
	s.started = true
	s.mu.Unlock()
	s.g.openAll()
	return s.run(ctx, work)
}

// adoptedWork is the work of a run the session started itself: Run's,
// once Run has adopted it.
func (s *Session) adoptedWork(ctx context.Context, held Held) error {
	s.mu.Lock()
	w := s.work
	s.mu.Unlock()
	if w == nil {
		return nil // no work: the role stays held
	}
	return w(ctx, held)
}

// start runs the session in the background, without work, unless it has
// been run or closed; its member starts once a Campaign opens a gate.
func (s *Session) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.autoStop, s.autoDone = stop, done
	go func() {
		defer close(done)
		if err := s.run(ctx, s.adoptedWork); err != nil {
			s.log.Warn("the session stopped", "err", err)
		}
	}()
}

func (s *Session) run(ctx context.Context, work Work) (err error) {
	defer s.closeTransport()
	defer func() { s.tr.end(err) }()

	// The view's ctx ends only after the member has left, so the member's
	// lookups answer until then.
	mctx, stopMember := context.WithCancelCause(ctx)
	defer stopMember(nil)
	vctx, stopView := context.WithCancel(context.WithoutCancel(ctx))
	defer stopView()

	var (
		g        errgroup.Group
		mu       sync.Mutex
		caughtUp bool
	)
	fatal := func(err error) *ViewError { // at most one: see the two paths below
		mu.Lock()
		verr := &ViewError{CaughtUp: caughtUp, Err: err}
		mu.Unlock()
		if s.onFatal != nil {
			s.onFatal(verr)
		}
		stopMember(verr)
		return verr
	}
	g.Go(func() error {
		err := s.vr.Run(vctx)
		if err == nil && vctx.Err() == nil {
			err = view.ErrStopped // Run returns nil only when its ctx ends
		}
		if err == nil {
			return nil
		}
		return fatal(err)
	})
	g.Go(func() error {
		defer stopView()
		if err := s.waitCaughtUp(mctx); err != nil {
			return nil // ctx ended, or the view failed: its goroutine says why
		}
		mu.Lock()
		caughtUp = mctx.Err() == nil
		mu.Unlock()
		if !caughtUp {
			return nil
		}
		if s.onReady != nil {
			s.onReady()
		}
		if s.m == nil {
			<-mctx.Done() // only the view runs
			return nil
		}
		select { // the member starts when it is to campaign for a role
		case <-s.g.any:
		case <-mctx.Done():
			return nil
		}
		return s.m.Run(mctx, work) // returns once mctx has ended and the member has left
	})
	return g.Wait()
}

// The backoff of waitCaughtUp between failed first catch-ups.
const (
	catchUpRetryMin = 100 * time.Millisecond
	catchUpRetryMax = 5 * time.Second
)

// waitCaughtUp waits for the view's first catch-up, retrying a failed
// probe (a leader moving, a broker restarting) with backoff. It returns
// nil once caught up, else ctx's error or view.ErrStopped.
func (s *Session) waitCaughtUp(ctx context.Context) error {
	wait := catchUpRetryMin
	for {
		err := s.vr.WaitCaughtUp(ctx)
		if err == nil || errors.Is(err, view.ErrStopped) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("the view's first catch-up failed; trying again", "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, catchUpRetryMax)
	}
}

// Resign hands role over if this member holds it and queues the member
// again at the back ([processor.Member.Resign]; [Election.Resign] leaves
// instead). It blocks until the release is written or ctx ends. It
// returns [ErrNotHolder] for a role not campaigned for, or [ErrReadOnly].
func (s *Session) Resign(ctx context.Context, role Role) error {
	if s.m == nil {
		return ErrReadOnly
	}
	if s.g.shut(role) {
		return ErrNotHolder
	}
	return s.m.Resign(ctx, role)
}

// Drain hands every role of the member's group (Config.Group) over to
// the group's other members and stops campaigning for them
// ([processor.Member.Drain]). It blocks until the member holds no role,
// or ctx ends (its error). The session goes on running: end Run after
// Drain to leave. It returns [ErrReadOnly] in a session without a member,
// an error for a member of no group, and one matching [ErrNotRunning]
// while the member does not run.
func (s *Session) Drain(ctx context.Context) error {
	if s.m == nil {
		return ErrReadOnly
	}
	err := s.m.Drain(ctx)
	if errors.Is(err, processor.ErrNotRunning) {
		return s.tr.notRunning()
	}
	return err
}

// Writer returns the fenced writer of held ([fencing.BrokerTransport.Writer]):
// it fails with [fencing.ErrFenced] once a later holding began.
func (s *Session) Writer(held Held) *fencing.Writer {
	return s.t.Writer(held.Role, held.Token)
}

// Transport returns the transport that mints the member's tokens, for
// Transact, processor/stream or Describe. Run closes it.
func (s *Session) Transport() *fencing.BrokerTransport { return s.t }

// View returns the session's view, for lookups and watches while it runs.
func (s *Session) View() *view.View { return s.v }

// Member returns the member, nil in a session without one. The session
// runs it: do not call its Run.
func (s *Session) Member() *processor.Member { return s.m }

// Close ends the session; defer it right after New (as etcd's
// Session.Close). A session that started itself stops as Run's end stops
// it, and Close blocks until then (bounded by the settings' timeouts). A
// session run by [Session.Run] is left to Run's ctx. A session never run
// releases its connection; a later Run returns [ErrAlreadyRun].
func (s *Session) Close() error {
	s.mu.Lock()
	started := s.started
	s.started = true
	s.adopted = true // a Run after Close has nothing to adopt
	stop, done := s.autoStop, s.autoDone
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
		return nil
	}
	if started {
		return nil
	}
	s.tr.end(nil)
	return s.t.Close()
}

func (s *Session) closeTransport() {
	if err := s.t.Close(); err != nil {
		s.log.Warn("closing the transport", "err", err)
	}
}
