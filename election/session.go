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

// Config configures a [Session]: the cluster, the member and its roles,
// the timings, and where logs, metrics and events go. Cluster.Brokers is
// required; Member and Roles go together: both for a session that
// campaigns, neither for one that only reads ([Election.Leader],
// [Election.Observe], [Session.View]). Every other zero field takes its
// default.
type Config struct {
	// Cluster names the brokers, the role topic (default "krole.roles"),
	// the transactional-id prefix (default "krole."), TLS and SASL; see
	// [fencing.Config]. Cluster.TxnTimeout is not read: the session sets
	// it to Settings.TransactionTimeout, the one place to change it.
	// Cluster.ClientID defaults to "krole-" + Member ("krole-observer"
	// without a member), so that brokers (their logs and quotas) tell the
	// members apart; the view's clients add suffixes to it.
	Cluster Cluster
	// Member is this member's id, one process's: a second live process
	// under the same id is refused ([ErrMemberInUse]). Default "": a
	// session that only reads, which has no member, writes nothing to the
	// role topic, and refuses Campaign and Resign ([ErrReadOnly]).
	Member MemberID
	// Roles are the roles the member may campaign for, at least one when
	// Member is set, none without it. The member registers for a role at
	// its first [Election.Campaign], or for every role at [Session.Run].
	Roles []Role
	// Value is carried in the member's registrations, for readers to find
	// the holder by (its address, say): [view.View.Leader], `krole leader`.
	// At most [codec.MaxValueLen] bytes of UTF-8; only with Member.
	// Default "": none.
	Value string
	// Settings are the timings; zero fields take their defaults, derived
	// from LeaseDuration (default 10s; see [processor.Settings]).
	Settings Settings
	// StateDir, when set, keeps the view's table on disk; see
	// [view.Options].StateDir. Default "": in memory.
	StateDir string
	// Logger receives the member's logs; see [processor.Options].Logger.
	// Default none.
	Logger *slog.Logger
	// ViewLogger receives the view's logs, and goka's (chatty at info
	// level). Default none.
	ViewLogger *slog.Logger
	// Registerer receives the member's metrics; see
	// [processor.Options].Registerer. Default none.
	Registerer prometheus.Registerer
	// OnEvent receives the member's events, one call at a time, in order
	// per role; it must return quickly and must not call Resign. See
	// [processor.Options].OnEvent. Default none.
	OnEvent func(Event)
	// OnReady is called once, on the run's goroutine group, when the view
	// has caught up with the role topic, before the member starts (so
	// before any OnEvent call). The run waits for it. It is not called
	// when the run ends before that (ctx ended, or the view failed).
	// Default none.
	OnReady func()
	// Clock is the member's local clock: it times the member's renewals,
	// turns and expiry judgements, stamps its leases (GrantedAt and
	// Deadline are its readings) and its events, and is the view's clock
	// (Clock.Now: the view stamps each lease record with when it applied
	// it, and its Holder and Leader lookups, and so [Election.Leader],
	// judge at Clock.Now). A clock set ahead of or behind the others'
	// moves only those readings: observers count a lease's span from when
	// they saw it (see package processor, "Liveness"). See
	// [processor.Options].Clock. Default the system clock.
	Clock processor.Clock
	// OnMinted is called with every token the member's AcquireEpoch
	// returns, on the member's goroutine, as soon as the broker has
	// answered and before any lease is written under the token, so even
	// a process killed right after has reported it; it must return
	// quickly. A token is minted at every challenge, won or lost. Default
	// none.
	OnMinted func(role Role, tok Token)
	// OnFatal is called once by [Session.Run] when the view fails for
	// good, with the [*ViewError] Run will return, before the member
	// leaves (so before the Revoked events of its leaving, and before its
	// work's ctx ends). Run waits for it. It is not called when Run ends
	// because ctx ended. Default none.
	OnFatal func(*ViewError)
}

// Session is one member of one or more roles together with the view and
// the transport it runs on, or, without a member, a reader of the role
// topic; see the package documentation for what it starts and in which
// order it stops. Create it with [New]. Its methods are safe for
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

// New validates cfg, connects to the cluster and builds the view and the
// member (none without Config.Member); it starts nothing. It blocks for the connection only: like
// [fencing.NewBrokerTransport], it fails when no broker answers, with an
// error matching [fencing.ErrClient]. Invalid settings return an error
// matching [processor.ErrInvalidSettings]; other invalid values (Roles
// without Member, or Member without Roles, among them) a plain error
// naming them.
//
// The returned Session holds the connection until [Session.Run] returns;
// a Session that will not be run must be closed with [Session.Close].
func New(cfg Config) (*Session, error) {
	// The settings' one list of checks, before anything connects, and for
	// a session without a member too; processor.New applies the same list.
	s := cfg.Settings.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	cluster := cfg.Cluster
	// A lease write left open by a crash holds back the readers of the
	// role's partition until the coordinator aborts it: keep that within
	// what the settings allow for.
	cluster.TxnTimeout = s.TransactionTimeout
	if cluster.ClientID == "" {
		cluster.ClientID = "krole-" + cmp.Or(string(cfg.Member), "observer")
	}
	if err := checkMember(cfg); err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = processor.SystemClock()
	}
	t, err := fencing.NewBrokerTransport(cluster)
	if err != nil {
		return nil, err
	}
	// The view verifies lease authors through the transport, and knows
	// the producer ids the member mints without asking.
	v, err := view.New(view.Options{Config: cluster, StateDir: cfg.StateDir, Logger: cfg.ViewLogger, Clock: clk.Now,
		Authors: t.Authors(), Describe: t.Describe})
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
	// The transport refused a TxnTimeout above the brokers' maximum; say
	// what the brokers' abort interval makes of the stall rule (see
	// processor.Settings: members on a view are not endangered by it).
	if bs, err := t.StartTxnSettings(); err == nil {
		if err := bs.CheckTimings(s.TransactionTimeout, s.LeaseDuration, s.RenewInterval); err != nil {
			log.Info("a transaction left open by a crash can hold the role topic's readers back longer than a lease; "+
				"challenges of that partition's roles wait until it ends", "broker", err.Error())
		}
	}
	return &Session{t: t, v: v, vr: v, m: m, g: g, clk: clk, log: log, onReady: cfg.OnReady, onFatal: cfg.OnFatal, vt: vals, tr: tr}, nil
}

// checkMember validates the member, its roles and its value: a member
// with at least one role, or neither (a session that only reads).
func checkMember(cfg Config) error {
	switch {
	case cfg.Member == "" && len(cfg.Roles) > 0:
		return fmt.Errorf("election: Config.Roles %v without a Config.Member to campaign as (a session without a member only reads)", cfg.Roles)
	case cfg.Member == "" && cfg.Value != "":
		return fmt.Errorf("election: Config.Value %q without a Config.Member to register with it (a session without a member only reads)", cfg.Value)
	case cfg.Member != "" && len(cfg.Roles) == 0:
		return fmt.Errorf("election: Config.Member %q without Config.Roles to campaign for (leave Member empty for a session that only reads)", cfg.Member)
	case cfg.Member == "":
		return nil
	}
	if err := cfg.Member.Validate(); err != nil {
		return fmt.Errorf("election: %w", err)
	}
	if err := codec.CheckWriteValue(cfg.Value); err != nil {
		return fmt.Errorf("election: %w", err)
	}
	seen := make(map[Role]bool, len(cfg.Roles))
	for _, r := range cfg.Roles {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("election: %w", err)
		}
		if seen[r] {
			return fmt.Errorf("election: Config.Roles has %s twice", r)
		}
		seen[r] = true
	}
	return nil
}

// valueTransport registers the member with its value and reports the
// tokens it mints (Config.OnMinted); every other call (and
// fencing.TxnTimeouter) is the broker transport's own.
type valueTransport struct {
	*fencing.BrokerTransport
	values   *values
	onMinted func(codec.Role, codec.Token)
}

// AcquireEpoch implements fencing.Transport, calling onMinted with the
// token before returning it.
func (t valueTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	tok, err := t.BrokerTransport.AcquireEpoch(ctx, role)
	if err == nil && t.onMinted != nil {
		t.onMinted(role, tok)
	}
	return tok, err
}

// WriteLease implements fencing.Transport: every lease the member writes
// carries the session's current value for role (Config.Value, or
// Campaign's), so that the value readers report for the holder was
// written under its token; a release carries none.
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
// session's value for role: the member registers through it.
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

// Run runs the view and the member until ctx ends, then stops them and
// closes the transport; see the package documentation for the order. It
// blocks until every goroutine it started has returned, work included.
// The member registers and campaigns for every role of Config.Roles
// (client-go's Run); a program that campaigns with [Election.Campaign]
// alone need not call Run. A session without a member runs its view only.
//
// work runs while the member holds a role, as in [processor.Member.Run]:
// its ctx ends when the role is lost or Run's ctx ends. To write under
// the holding's token, use [Session.Writer]. work may be nil: the member
// then only holds the roles.
//
// Run returns nil when ctx ended; a [*ViewError] when the view failed
// (it stopped with an error; after the first catch-up, the member has
// resigned and left first); a [*MemberInUseError] (matching
// [ErrMemberInUse]) when another live process runs under Config.Member
// (the member left without writing anything for it); [ErrAlreadyRun]
// when called a second time or after Close.
//
// Run may be called after the session started itself (a Campaign,
// Leader or Observe came first): it then adopts that run, campaigns for
// every role as above, and returns once ctx has ended and the session
// has stopped; its work runs for the holdings that begin after the call,
// not for one under way.
func (s *Session) Run(ctx context.Context, work Work) error {
	s.mu.Lock()
	if s.autoStop != nil && !s.adopted {
		// A Campaign, Leader or Observe started the session before Run:
		// Run adopts that run, as if it had started it.
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
// once Run has adopted the run, for the holdings that begin from then on.
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
// been run (or closed) already: the first [Election.Campaign],
// [Election.Leader] or [Election.Observe] of a session nobody runs
// starts it, and [Session.Close] stops it. Its member starts once a
// Campaign opens a role's gate.
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

	// The member's ctx ends with Run's, or when the view fails. The view's
	// ends only after the member has left, so that the member's lookups
	// answer until then.
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

// waitCaughtUp waits for the view's first catch-up. A catch-up whose probe
// of the topic's end failed (a partition's leader moving, a broker
// restarting: what a rolling restart of the cluster does, often while the
// members restart too) is tried again, after a backoff that doubles from
// catchUpRetryMin to catchUpRetryMax, each failure logged at warn, until
// it succeeds, ctx ends or the view stops. It returns nil once caught up,
// else ctx's error or view.ErrStopped.
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

// Resign hands role over if this member holds it; see
// [processor.Member.Resign]. It blocks until the release is written or ctx
// ends. It returns [ErrNotHolder] for a role the member has not
// campaigned for, and [ErrReadOnly] in a session without a member.
//
// Unlike [Election.Resign], it keeps the member a candidate: it
// registers again at once, at the back of the queue (as an operator's
// `krole resign --member` makes a holder do).
func (s *Session) Resign(ctx context.Context, role Role) error {
	if s.m == nil {
		return ErrReadOnly
	}
	if s.g.shut(role) {
		return ErrNotHolder
	}
	return s.m.Resign(ctx, role)
}

// Writer returns the fenced writer of held: it writes under held.Token,
// in transactions of held.Role's transactional id, and fails with an
// error matching [fencing.ErrFenced] once a later member holds the role.
// It sends nothing; see [fencing.BrokerTransport.Writer].
func (s *Session) Writer(held Held) *fencing.Writer {
	return s.t.Writer(held.Role, held.Token)
}

// Transport returns the transport the member acts through, the one that
// mints its tokens: use it for [fencing.BrokerTransport.Transact], for
// package processor/stream, or for Describe. It is closed when Run
// returns.
func (s *Session) Transport() *fencing.BrokerTransport { return s.t }

// View returns the view the member follows its roles through, for
// lookups and watches. It answers while Run runs; see package view.
func (s *Session) View() *view.View { return s.v }

// Member returns the member, nil in a session without one. The session
// runs it: do not call its Run.
func (s *Session) Member() *processor.Member { return s.m }

// Close ends the session, and is safe to defer right after New (as
// etcd's Session.Close):
//
//   - a session that started itself (a Campaign, Leader or Observe before
//     Run) is stopped as Run's end stops it: the member, if a Campaign
//     started it, resigns what it holds and deregisters, then the view
//     and the transport stop. Close blocks until that is done (bounded by
//     the settings' timeouts).
//   - a session run by [Session.Run]: Close does nothing; Run's ctx ends
//     it, and Run closes the transport when it returns.
//   - a session never run: Close releases the connection, and a later
//     Run returns [ErrAlreadyRun].
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
