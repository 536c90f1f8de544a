package processor_test

// Integration tests of the Member wired to the real view (view.View as its
// Source) and the real transport (fencing.BrokerTransport), against a
// Kafka-protocol cluster over TCP: the embedded kfake cluster, or the one
// KROLE_BROKERS names.
//
// Every member has its own transport and its own view, as members on
// separate nodes would. A recorder collects what the members report (their
// events) and what the broker accepted (every AcquireEpoch that returned a
// token and every WriteLease that succeeded, through a wrapper of the
// transport), and the tests check the recording against what krole
// guarantees:
//
//   - safety (the broker's fence): no lease write under a token succeeds
//     once a newer token of the role has been minted; tokens are never
//     handed out twice;
//   - the table: a view that has caught up agrees with Describe on the
//     holder's token;
//   - liveness bounds that follow from the settings (a crashed holder is
//     replaced within its lease deadline + Stagger; a resigning one before
//     its deadline). These are correctness bounds, not speed assertions;
//     each carries `slack` for scheduling on a loaded 2-core machine, the
//     view's fetch and the race detector.
//
// Run them with `go test -run Integration ./processor/`; KROLE_TEST_LOG=1
// logs the members' transitions.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// slack is added to every bound that follows from the settings: goroutine
// scheduling on a loaded 2-core machine (with -race), the view's fetch
// round trip, and a challenge's round trips. It is not a speed target.
const slack = 750 * time.Millisecond

// itTxnTimeout is the transports' transaction timeout (fencing.Config's
// TxnTimeout): processor.New requires it below LeaseDuration -
// HeartbeatInterval (1.6s with itSettings).
const itTxnTimeout = time.Second

// itSettings are short timings, so that a lease runs out within a test:
// lease 2s, renew every 400ms, stop on its own 1.6s after the last
// successful write, stagger 200ms per rank.
func itSettings() processor.Settings {
	return processor.Settings{
		LeaseDuration:      2 * time.Second,
		HeartbeatInterval:  400 * time.Millisecond,
		HeartbeatDeadline:  1600 * time.Millisecond,
		RetryBackoff:       50 * time.Millisecond,
		Stagger:            200 * time.Millisecond,
		TransactionTimeout: time.Second,
	}
}

// ---------------------------------------------------------------------------
// The recorder and the recording transport.

// stamped is an event with the time the test received it.
type stamped struct {
	processor.Event
	Got time.Time
}

// write is a lease write the broker accepted: it began at Start and was
// acknowledged at End.
type write struct {
	Role       codec.Role
	Member     codec.MemberID
	Token      codec.Token
	Lease      codec.Lease
	Start, End time.Time
	Offset     int64 // the registration's offset, or the lease record's
}

// acquire is a token the coordinator minted: AcquireEpoch was called at
// Start and returned it at At.
type acquire struct {
	Role      codec.Role
	Member    codec.MemberID
	Token     codec.Token
	Start, At time.Time
}

type recorder struct {
	mu       sync.Mutex
	events   []stamped
	writes   []write
	acquires []acquire
	// registers are the registrations appended: role, member, and when
	// Register was called and returned.
	registers []write
	// beats are the member-session heartbeats that committed (session
	// ends included): Member, Lease.Session (the heartbeat's session),
	// Start and End, and the roles excluded in beatExcluded.
	beats []beat
	// hook, when set, is called with every event before it is recorded,
	// under mu, on the member's goroutine.
	hook func(processor.Event)
}

func (r *recorder) onEvent(e processor.Event) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hook != nil {
		r.hook(e)
	}
	r.events = append(r.events, stamped{Event: e, Got: now})
}

// holders returns, for role, the members holding it as their own events
// say (an Elected not yet followed by a Revoked), with their tokens.
func (r *recorder) holders(role codec.Role) map[codec.MemberID]codec.Token {
	r.mu.Lock()
	defer r.mu.Unlock()
	return holdersOf(r.events, role)
}

func holdersOf(evs []stamped, role codec.Role) map[codec.MemberID]codec.Token {
	out := map[codec.MemberID]codec.Token{}
	for _, e := range evs {
		if e.Role != role {
			continue
		}
		switch e.Kind {
		case processor.Elected:
			out[e.Member] = e.Token
		case processor.Revoked:
			delete(out, e.Member)
		}
	}
	return out
}

// find returns the events of kind for role that satisfy ok, in order.
func (r *recorder) find(kind processor.EventKind, role codec.Role, ok func(stamped) bool) []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []stamped
	for _, e := range r.events {
		if e.Kind == kind && e.Role == role && (ok == nil || ok(e)) {
			out = append(out, e)
		}
	}
	return out
}

// lastWrite returns the last lease write of member for role that the
// broker accepted.
func (r *recorder) lastWrite(role codec.Role, member codec.MemberID) (write, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.writes) - 1; i >= 0; i-- {
		if w := r.writes[i]; w.Role == role && w.Member == member {
			// A later heartbeat of the session the lease names, not
			// excluding the role, renewed it: the last "write" is the
			// latest such heartbeat.
			for j := len(r.beats) - 1; j >= 0; j-- {
				b := r.beats[j]
				if b.hb.Member == member && !b.hb.End && w.Lease.Session != nil && b.hb.Session.Nonce == w.Lease.Session.Nonce &&
					b.start.After(w.Start) && !slices.Contains(b.hb.Excluded, role) {
					w.Start, w.End = b.start, b.end
					w.Lease.GrantedAt, w.Lease.Deadline = b.hb.GrantedAt, b.hb.Deadline
					break
				}
			}
			return w, true
		}
	}
	return write{}, false
}

// letGo reports whether member's last lease write of role is a release,
// or a later committed heartbeat of its session stopped vouching for the
// role (excluded it, or ended the session).
func (r *recorder) letGo(role codec.Role, member codec.MemberID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.writes) - 1; i >= 0; i-- {
		w := r.writes[i]
		if w.Role != role || w.Member != member {
			continue
		}
		if w.Lease.Released() {
			return true
		}
		for _, b := range r.beats {
			if b.hb.Member == member && w.Lease.Session != nil && b.hb.Session.Nonce == w.Lease.Session.Nonce &&
				b.start.After(w.Start) && (b.hb.End || slices.Contains(b.hb.Excluded, role)) {
				return true
			}
		}
		return false
	}
	return false
}

// lastBeat returns member's last committed session record.
func (r *recorder) lastBeat(member codec.MemberID) (beat, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.beats) - 1; i >= 0; i-- {
		if r.beats[i].hb.Member == member {
			return r.beats[i], true
		}
	}
	return beat{}, false
}

// beat is a member-session heartbeat that committed.
type beat struct {
	hb         codec.Heartbeat
	start, end time.Time
}

// checkFence asserts what the broker guarantees: a lease write under a
// token never succeeds when it began after a newer token of the role had
// been minted (AcquireEpoch returned it), and no token is minted twice.
func (r *recorder) checkFence(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[codec.Role]map[codec.Token]codec.MemberID{}
	for _, a := range r.acquires {
		if seen[a.Role] == nil {
			seen[a.Role] = map[codec.Token]codec.MemberID{}
		}
		if m, dup := seen[a.Role][a.Token]; dup {
			t.Errorf("role %s: token %s minted twice (for %s and %s)", a.Role, a.Token, m, a.Member)
		}
		seen[a.Role][a.Token] = a.Member
	}
	for _, w := range r.writes {
		for _, a := range r.acquires {
			if a.Role == w.Role && later(a.Token, w.Token) && a.At.Before(w.Start) {
				t.Errorf("role %s: %s's write under %s (began %s) succeeded after %s had minted newer token %s (%s)",
					w.Role, w.Member, w.Token, w.Start.Format("15:04:05.000"), a.Member, a.Token, a.At.Format("15:04:05.000"))
			}
		}
	}
}

// later orders the tokens of one role: a higher epoch of the same producer
// id, or a higher producer id (the coordinator rolls it over upward).
func later(a, b codec.Token) bool {
	if a.ProducerID != b.ProducerID {
		return a.ProducerID > b.ProducerID
	}
	return a.Epoch > b.Epoch
}

// recTransport is a BrokerTransport that records the tokens it is given,
// the lease writes, registrations and heartbeats the broker accepts.
// TxnTimeout is promoted, so processor.New still checks the transaction
// timeout.
type recTransport struct {
	*fencing.BrokerTransport
	rec    *recorder
	member codec.MemberID
	// acquireDelay, when set, delays each AcquireEpoch: a member that
	// takes many roles one after another, slowly.
	acquireDelay time.Duration
	// onWrite, when set, is called with each lease write the broker
	// accepted, after it is recorded.
	onWrite func(write)
}

func (t *recTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	if t.acquireDelay > 0 {
		select {
		case <-time.After(t.acquireDelay):
		case <-ctx.Done():
			return codec.Token{}, ctx.Err()
		}
	}
	start := time.Now()
	tok, err := t.BrokerTransport.AcquireEpoch(ctx, role)
	if err == nil {
		now := time.Now()
		t.rec.mu.Lock()
		t.rec.acquires = append(t.rec.acquires, acquire{Role: role, Member: t.member, Token: tok, Start: start, At: now})
		t.rec.mu.Unlock()
	}
	return tok, err
}

func (t *recTransport) WriteLease(ctx context.Context, role codec.Role, tok codec.Token, l codec.Lease) (int64, error) {
	start := time.Now()
	off, err := t.BrokerTransport.WriteLease(ctx, role, tok, l)
	if err == nil {
		w := write{Role: role, Member: t.member, Token: tok, Lease: l, Start: start, End: time.Now(), Offset: off}
		t.rec.mu.Lock()
		t.rec.writes = append(t.rec.writes, w)
		t.rec.mu.Unlock()
		if t.onWrite != nil {
			t.onWrite(w)
		}
	}
	return off, err
}

func (t *recTransport) Heartbeat(ctx context.Context, hb codec.Heartbeat) error {
	start := time.Now()
	err := t.BrokerTransport.Heartbeat(ctx, hb)
	if err == nil {
		end := time.Now()
		t.rec.mu.Lock()
		t.rec.beats = append(t.rec.beats, beat{hb: hb, start: start, end: end})
		t.rec.mu.Unlock()
	}
	return err
}

func (t *recTransport) Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error) {
	return t.RegisterInstance(ctx, role, member, "")
}

// RegisterInstance records the registration as Register does; the member
// registers through it (processor.InstanceRegisterer).
func (t *recTransport) RegisterInstance(ctx context.Context, role codec.Role, member codec.MemberID, instance string) (int64, error) {
	start := time.Now()
	off, err := t.BrokerTransport.RegisterInstance(ctx, role, member, instance)
	if err == nil {
		end := time.Now()
		t.rec.mu.Lock()
		t.rec.registers = append(t.rec.registers, write{Role: role, Member: member, Start: start, End: end, Offset: off})
		t.rec.mu.Unlock()
	}
	return off, err
}

// ---------------------------------------------------------------------------
// The environment: a cluster, a recorder, an observer view and a probe
// transport (an outsider: Describe, and a fencing AcquireEpoch).

type env struct {
	t     testing.TB
	c     *testcluster.Cluster
	fn    *faultnet.Net // between the clients and the brokers, with withFaults
	rec   *recorder
	obs   *view.View // nil with withoutObserver
	probe *fencing.BrokerTransport
}

// envSetup is what newEnv's options set.
type envSetup struct {
	cluster  testcluster.Options
	faults   bool
	apart    codec.Role
	config   func(*fencing.Config)
	observer bool
}

type envOption func(*envSetup)

// withFaults puts a faultnet.Net (e.fn) between every client and the
// embedded cluster.
func withFaults() envOption { return func(s *envSetup) { s.faults = true } }

// withBrokers runs the embedded cluster on n brokers.
func withBrokers(n int) envOption { return func(s *envSetup) { s.cluster.Nodes = n } }

// withPartitions gives the role topic n partitions.
func withPartitions(n int32) envOption { return func(s *envSetup) { s.cluster.Partitions = n } }

// withApart places role's transaction coordinator and its partition's
// leader on different brokers of the embedded cluster (three of them, the
// topic's default three partitions), so that each request says where it
// went.
func withApart(role codec.Role) envOption { return func(s *envSetup) { s.apart = role } }

// withConfig changes the cluster config that every client of the test
// starts from.
func withConfig(f func(*fencing.Config)) envOption { return func(s *envSetup) { s.config = f } }

// withoutObserver starts no observer view, so that the process's work is
// the members' own (a measuring harness).
func withoutObserver() envOption { return func(s *envSetup) { s.observer = false } }

// newEnv starts a cluster whose transactions time out after txnTimeout,
// a probe and (unless withoutObserver) an observer view.
func newEnv(t testing.TB, txnTimeout time.Duration, opts ...envOption) *env {
	t.Helper()
	setup := envSetup{observer: true}
	for _, o := range opts {
		o(&setup)
	}
	e := &env{t: t, rec: &recorder{}}
	if setup.faults {
		e.c, e.fn = testcluster.StartFaulty(t, setup.cluster)
	} else {
		e.c = testcluster.Start(t, setup.cluster)
	}
	e.c.Config.TxnTimeout = txnTimeout
	if setup.config != nil {
		setup.config(&e.c.Config)
	}
	if role := setup.apart; role != "" {
		e.c.RequireFake(t)
		coord := e.c.Fake.CoordinatorFor(e.c.Config.TransactionalID(string(role)))
		p := codec.Partition(role, 3) // testcluster's default partitions
		if e.c.Fake.LeaderFor(e.c.Config.Topic, p) == coord {
			require.NoError(t, e.c.Fake.MoveTopicPartition(e.c.Config.Topic, p, (coord+1)%3))
		}
		require.NotEqual(t, coord, e.c.Fake.LeaderFor(e.c.Config.Topic, p), "coordinator and partition leader differ")
	}
	e.probe = e.transport()
	if setup.observer {
		e.obs = e.view()
	}
	return e
}

func testLog(component string) *slog.Logger {
	if os.Getenv("KROLE_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", component)
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// transport connects a BrokerTransport, closed when the test ends.
func (e *env) transport() *fencing.BrokerTransport {
	e.t.Helper()
	return e.transportWith(e.c.Config)
}

// transportWith is transport on cfg.
func (e *env) transportWith(cfg fencing.Config) *fencing.BrokerTransport {
	e.t.Helper()
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// view runs a view until the test ends, and waits for its first catch-up.
func (e *env) view() *view.View {
	e.t.Helper()
	return e.viewWith(view.Options{})
}

// viewWith is view with opts (its Config, unless set, and Logger set
// here).
func (e *env) viewWith(opts view.Options) *view.View {
	e.t.Helper()
	if opts.Config.Brokers == nil {
		opts.Config = e.c.Config
	}
	opts.Logger = testLog("view")
	v, err := view.New(opts)
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- v.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			assert.NoError(e.t, err, "view Run")
		case <-time.After(20 * time.Second):
			e.t.Errorf("view Run did not return")
		}
	})
	require.NoError(e.t, v.WaitCaughtUp(e.ctx(20*time.Second)))
	return v
}

// state returns role as the observer view holds it once it has caught up
// with everything committed before the call.
func (e *env) state(role codec.Role) rolestate.State {
	e.t.Helper()
	ctx := e.ctx(10 * time.Second)
	require.NoError(e.t, e.obs.WaitCaughtUp(ctx))
	st, err := e.obs.Role(ctx, role)
	require.NoError(e.t, err)
	return st
}

// describe asks the coordinator which token holds role.
func (e *env) describe(role codec.Role) codec.Token {
	e.t.Helper()
	tok, ok, err := e.probe.Describe(e.ctx(10*time.Second), role)
	require.NoError(e.t, err)
	require.True(e.t, ok, "Describe: nobody ever held %s", role)
	return tok
}

// node is one member with a transport and a view of its own.
type node struct {
	e      *env
	setup  nodeSetup
	id     codec.MemberID
	tr     *recTransport
	src    *view.View
	m      *processor.Member
	cancel context.CancelFunc
	done   chan struct{}
}

// nodeSetup is what start's options set.
type nodeSetup struct {
	clock        processor.Clock
	ownIDs       bool   // the transport's and view's client ids are clientIDOf(id)
	viewSuffix   string // after the view's
	viewOpts     view.Options
	source       func(*view.View) processor.Source
	slowAcquire  time.Duration
	onLeaseWrite func(write)
	opts         func(*processor.Options)
	work         processor.Work
	errc         chan<- error
}

type nodeOption func(*nodeSetup)

// onClock runs the member and its view on clk: one machine, one clock.
func onClock(clk processor.Clock) nodeOption {
	return func(s *nodeSetup) { s.clock = clk }
}

// ownClientID gives the member's transport and view the member's own
// client id (clientIDOf), so that faultnet can tell its requests apart.
func ownClientID() nodeOption { return func(s *nodeSetup) { s.ownIDs = true } }

// splitClientIDs is ownClientID with the view under a client id of its
// own, clientIDOf(id)+"-v", so that the transport's requests and the
// view's (its consumers' "...-v-view") are told apart.
func splitClientIDs() nodeOption { return func(s *nodeSetup) { s.ownIDs, s.viewSuffix = true, "-v" } }

// viewOptions are the options of the member's view (Config, Logger and
// Clock are set by start).
func viewOptions(o view.Options) nodeOption { return func(s *nodeSetup) { s.viewOpts = o } }

// sourceFrom makes the member read through f(its view) instead of the view.
func sourceFrom(f func(*view.View) processor.Source) nodeOption {
	return func(s *nodeSetup) { s.source = f }
}

// slowAcquire delays each AcquireEpoch of the member by d.
func slowAcquire(d time.Duration) nodeOption {
	return func(s *nodeSetup) { s.slowAcquire = d }
}

// onLeaseWrite calls f with each lease write of the member the broker
// accepted.
func onLeaseWrite(f func(write)) nodeOption {
	return func(s *nodeSetup) { s.onLeaseWrite = f }
}

// withOptions changes the member's processor.Options (its Settings,
// Logger, OnEvent and Clock are set by start before f).
func withOptions(f func(*processor.Options)) nodeOption { return func(s *nodeSetup) { s.opts = f } }

// working runs w as the member's work when start is given none.
func working(w processor.Work) nodeOption { return func(s *nodeSetup) { s.work = w } }

// runErrTo hands Run's error to errc instead of asserting it is nil.
func runErrTo(errc chan<- error) nodeOption { return func(s *nodeSetup) { s.errc = errc } }

// start starts a member named id for roles, with a transport that records
// its calls and a view of its own, and stops it (if the test has not)
// when the test ends.
func (e *env) start(id codec.MemberID, roles []codec.Role, s processor.Settings, work processor.Work, opts ...nodeOption) *node {
	e.t.Helper()
	n := e.node(id, opts...)
	e.member(n, roles, s)
	return n.run(work)
}

// node connects the transport and the view of a node named id, for
// member to create its member on (as start does, with opts).
func (e *env) node(id codec.MemberID, opts ...nodeOption) *node {
	e.t.Helper()
	n := &node{e: e, id: id}
	for _, o := range opts {
		o(&n.setup)
	}
	cfg := e.c.Config
	vo := n.setup.viewOpts
	vo.Config = e.c.Config
	if n.setup.ownIDs {
		cfg.ClientID, vo.Config.ClientID = clientIDOf(id), clientIDOf(id)+n.setup.viewSuffix
	}
	n.tr = &recTransport{BrokerTransport: e.transportWith(cfg), rec: e.rec, member: id,
		acquireDelay: n.setup.slowAcquire, onWrite: n.setup.onLeaseWrite}
	if n.setup.clock != nil {
		vo.Clock = n.setup.clock.Now
	}
	n.src = e.viewWith(vo)
	return n
}

// member creates n's member of roles, in place of any earlier one; run
// runs it.
func (e *env) member(n *node, roles []codec.Role, s processor.Settings) {
	e.t.Helper()
	var src processor.Source = n.src
	if n.setup.source != nil {
		src = n.setup.source(n.src)
	}
	po := processor.Options{Settings: s, Logger: testLog(string(n.id)), OnEvent: e.rec.onEvent, Clock: n.setup.clock}
	if n.setup.opts != nil {
		n.setup.opts(&po)
	}
	m, err := processor.New(n.tr, src, n.id, roles, po)
	require.NoError(e.t, err)
	n.m = m
}

// run runs n's member with work (nil: the one working gave) until n.stop
// or the end of the test.
func (n *node) run(work processor.Work) *node {
	e := n.e
	e.t.Helper()
	if work == nil {
		work = n.setup.work
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, errc, done := n.m, n.setup.errc, make(chan struct{})
	n.cancel, n.done = cancel, done
	go func() {
		defer close(done)
		err := m.Run(ctx, work)
		if errc != nil {
			errc <- err
			return
		}
		assert.NoError(e.t, err)
	}()
	e.t.Cleanup(stopRun(e.t, n.id, cancel, done))
	return n
}

// holder starts a member as start does and waits until it is role's sole
// holder, and returns it with its token.
func (e *env) holder(id codec.MemberID, role codec.Role, s processor.Settings, work processor.Work, opts ...nodeOption) (*node, codec.Token) {
	e.t.Helper()
	n := e.start(id, []codec.Role{role}, s, work, opts...)
	holder, tok := e.soleHolder(role, 10*time.Second)
	require.Equal(e.t, id, holder)
	return n, tok
}

// candidate starts a member as start does and waits until the observer's
// view shows it as a candidate of role.
func (e *env) candidate(id codec.MemberID, role codec.Role, s processor.Settings, work processor.Work, opts ...nodeOption) *node {
	e.t.Helper()
	n := e.start(id, []codec.Role{role}, s, work, opts...)
	e.awaitCandidate(role, id)
	return n
}

// stop returns a function that ends the member's context and waits for
// Run to return.
func (n *node) stop(t testing.TB) func() {
	return stopRun(t, n.id, n.cancel, n.done)
}

// stopRun ends a run's context and waits for its Run to return.
func stopRun(t testing.TB, id codec.MemberID, cancel context.CancelFunc, done <-chan struct{}) func() {
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("member %s: Run did not return", id)
		}
	}
}

// await polls cond until it holds or d passes (then the test fails with
// what). cond runs on the test's goroutine, so it may call require.
func await(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(d, cond) {
		t.Fatalf("after %v: %s", d, what)
	}
}

// poll polls cond until it holds (true) or d passes (false).
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond) // the poll's interval
	}
	return true
}

// throughout checks ok every 100ms until until, and fails the test
// (what, with ok's detail) at the first check that does not hold. The
// window is on purpose: nothing may happen during it.
func throughout(t testing.TB, until time.Time, what string, ok func() (bool, string)) {
	t.Helper()
	failed := false
	for {
		if !failed {
			if good, detail := ok(); !good {
				t.Errorf("%s: %s", what, detail)
				failed = true
			}
		}
		left := time.Until(until)
		if left <= 0 {
			return
		}
		time.Sleep(min(100*time.Millisecond, left))
	}
}

// soleHolder waits until exactly one member holds role by its events, and
// returns it with its token.
func (e *env) soleHolder(role codec.Role, d time.Duration) (codec.MemberID, codec.Token) {
	e.t.Helper()
	var m codec.MemberID
	var tok codec.Token
	await(e.t, d, fmt.Sprintf("exactly one holder of %s", role), func() bool {
		var ok bool
		m, tok, ok = e.rec.sole(role)
		return ok
	})
	return m, tok
}

// sole returns the one member holding role by its events, if exactly one
// does, with its token.
func (r *recorder) sole(role codec.Role) (codec.MemberID, codec.Token, bool) {
	hs := r.holders(role)
	if len(hs) != 1 {
		return "", codec.Token{}, false
	}
	for m, tok := range hs {
		return m, tok, true
	}
	panic("unreachable")
}

// settled waits until role has settled after a succession in which
// candidates may have raced: exactly one member holds it by its events,
// Describe names its token, and it has renewed under that token since it
// was elected (so no challenger that saw the vacancy was still on its way:
// a token minted before the renewal began would have fenced it).
func (e *env) settled(role codec.Role, d time.Duration) (codec.MemberID, codec.Token) {
	e.t.Helper()
	var holder codec.MemberID
	var tok codec.Token
	await(e.t, d, fmt.Sprintf("%s has not settled", role), func() bool {
		var ok bool
		if holder, tok, ok = e.rec.sole(role); !ok {
			return false
		}
		el := e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Token == tok })
		w, ok := e.rec.lastWrite(role, holder)
		if len(el) != 1 || !ok || w.Token != tok || !w.Start.After(el[0].Got) {
			return false
		}
		cur, _, err := e.probe.Describe(e.ctx(10*time.Second), role)
		require.NoError(e.t, err)
		if cur != tok {
			return false
		}
		m, now, ok := e.rec.sole(role)
		return ok && m == holder && now == tok
	})
	return holder, tok
}

// agree asserts that holder under tok holds role as the broker and the
// observer's table see it: Describe names tok, and the table's lease is
// holder's under tok and not a release. A lease write the member made
// before its Elected event may still be on its way to the table, so the
// table is given up to 5s.
func (e *env) agree(role codec.Role, holder codec.MemberID, tok codec.Token) {
	e.t.Helper()
	assert.Equal(e.t, tok, e.describe(role), "Describe names the holder's token")
	var st rolestate.State
	if !poll(5*time.Second, func() bool {
		st = e.state(role)
		return st.Lease != nil && st.Lease.Member == holder && st.Lease.Token == tok && !st.Lease.Released()
	}) {
		e.t.Fatalf("the table shows lease %+v for %s, not %s under %s", st.Lease, role, holder, tok)
	}
}

// awaitCandidate waits up to 5s until member is among role's candidates
// in the observer's view.
func (e *env) awaitCandidate(role codec.Role, member codec.MemberID) {
	e.t.Helper()
	await(e.t, 5*time.Second, string(member)+" is a candidate", func() bool { return slices.Contains(e.candidates(role), member) })
}

// holderAndCandidate starts node-a with s, waits until it is role's sole
// holder (under tok), then starts node-b with s and waits until it is a
// candidate: the opening of most succession tests. opts apply to both.
func (e *env) holderAndCandidate(role codec.Role, s processor.Settings, opts ...nodeOption) (a, b *node, tok codec.Token) {
	e.t.Helper()
	a, tok = e.holder("node-a", role, s, nil, opts...)
	b = e.candidate("node-b", role, s, nil, opts...)
	return a, b, tok
}

// candidates returns the members the observer's table ranks for role.
func (e *env) candidates(role codec.Role) []codec.MemberID {
	var out []codec.MemberID
	for _, c := range e.state(role).Candidates {
		out = append(out, c.Member)
	}
	return out
}

// roleNames are n roles named by format (fmt) with 0..n-1.
func roleNames(format string, n int) []codec.Role {
	roles := make([]codec.Role, n)
	for i := range roles {
		roles[i] = codec.Role(fmt.Sprintf(format, i))
	}
	return roles
}

// roleIn returns the first role named by format (fmt) with 0, 1, ...
// that falls in partition p of parts.
func roleIn(format string, p, parts int32) codec.Role {
	for i := 0; ; i++ {
		if r := codec.Role(fmt.Sprintf(format, i)); codec.Partition(r, parts) == p {
			return r
		}
	}
}

// allHeld reports whether every role has a holder by the events (one of
// members, if any are given).
func allHeld(r *recorder, roles []codec.Role, members ...codec.MemberID) bool {
	for _, role := range roles {
		hs := r.holders(role)
		if len(hs) == 0 {
			return false
		}
		for _, m := range members {
			if _, ok := hs[m]; !ok {
				return false
			}
		}
	}
	return true
}

// awaitSeenBy waits up to d until n's own view ranks every one of members
// as a candidate of every role.
func (e *env) awaitSeenBy(n *node, roles []codec.Role, d time.Duration, members ...codec.MemberID) {
	e.t.Helper()
	await(e.t, d, fmt.Sprintf("%s's view shows %v as candidates of every role", n.id, members), func() bool {
		for _, r := range roles {
			st, err := n.src.Role(e.ctx(5*time.Second), r)
			require.NoError(e.t, err)
			for _, m := range members {
				if st.Rank(m) < 0 {
					return false
				}
			}
		}
		return true
	})
}

// awaitLive waits until each node's own view is past its first moments
// for role (docs/DESIGN.md, "The view: catching up": a record committed
// just after a view's first catch-up may reach it a round trip or two
// late): it shows every node's registration, each written after the
// views' catch-up, and a heartbeat of the holder's session granted after
// the call.
func (e *env) awaitLive(role codec.Role, nodes ...*node) {
	e.t.Helper()
	since := time.Now().UnixMilli()
	for _, n := range nodes {
		await(e.t, 10*time.Second, fmt.Sprintf("%s's view shows %s live", n.id, role), func() bool {
			st, err := n.src.Role(e.ctx(5*time.Second), role)
			require.NoError(e.t, err)
			for _, o := range nodes {
				if st.Rank(o.id) < 0 {
					return false
				}
			}
			return st.Session != nil && !st.Session.Heartbeat.End && st.Session.Heartbeat.GrantedAt > since
		})
	}
}

// ---------------------------------------------------------------------------
// The tests.

// Three members race for one role through several handovers with a
// Stagger of 1ms, so that neighbouring candidates challenge together and
// the broker, not the schedule, decides who wins. What must hold:
//
//   - the broker's fence: no member's lease write succeeds after a newer
//     token was minted (checkFence). Two members may both hold the role by
//     their own events for a moment (a challenge that wrote its lease and
//     was then fenced by a neighbour's AcquireEpoch), but only one of them
//     can write;
//   - at every sample, at most one member holds the role under the token
//     that Describe names (the current one);
//   - once things settle, exactly one member holds it, under the token
//     Describe names, and the observer's table shows that member and token.
func TestIntegrationOneHolderAtATime(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("leader")
	s := itSettings()
	s.Stagger = time.Millisecond
	ids := []codec.MemberID{"node-a", "node-b", "node-c"}
	nodes := map[codec.MemberID]*node{}
	for _, id := range ids {
		nodes[id] = e.start(id, []codec.Role{role}, s, nil)
	}

	// The sampler: members holding by their events, the coordinator's
	// token, members holding again; a member counts when it held the
	// current token in both readings. It also counts the samples in which
	// more than one member held the role by its own events (a race, or a
	// fenced holder that has not noticed yet): allowed, and reported.
	stop := make(chan struct{})
	var samples, overlaps int
	var samplerDone sync.WaitGroup
	samplerDone.Add(1)
	go func() {
		defer samplerDone.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			before := e.rec.holders(role)
			cur, ok, err := e.probe.Describe(context.Background(), role)
			if err != nil || !ok {
				continue
			}
			after := e.rec.holders(role)
			n := 0
			for m, tok := range before {
				if tok == cur && after[m] == cur {
					n++
				}
			}
			samples++
			if len(before) > 1 {
				overlaps++
			}
			if n > 1 {
				t.Errorf("%d members hold %s under the current token %s", n, role, cur)
			}
		}
	}()
	var stopOnce sync.Once
	stopSampler := func() {
		stopOnce.Do(func() {
			close(stop)
			samplerDone.Wait()
		})
	}
	t.Cleanup(stopSampler) // also when the test fails early

	const rounds = 8
	prev := codec.Token{}
	for i := range rounds {
		holder, tok := e.settled(role, 10*time.Second)
		assert.True(t, later(tok, prev), "round %d: a new term has a newer token (%s after %s)", i, tok, prev)
		prev = tok
		e.agree(role, holder, tok)
		if i == rounds-1 {
			break
		}
		require.NoError(t, nodes[holder].m.Resign(e.ctx(10*time.Second), role), "round %d: %s resigns", i, holder)
		// The next holder is a different term (a resigning member queues
		// again at the back, so it may come back, under a new token).
		await(t, 10*time.Second, "a new term after the resignation", func() bool {
			hs := e.rec.holders(role)
			if len(hs) != 1 {
				return false
			}
			for _, tk := range hs {
				return tk != tok
			}
			return false
		})
	}
	stopSampler()
	assert.Positive(t, samples, "the sampler ran")
	e.rec.checkFence(t)
	// Every member saw its own turns paired: Elected and Revoked alternate.
	for _, id := range ids {
		var open bool
		e.rec.mu.Lock()
		for _, ev := range e.rec.events {
			if ev.Member != id || ev.Role != role {
				continue
			}
			switch ev.Kind {
			case processor.Elected:
				assert.False(t, open, "%s: Elected twice without Revoked", id)
				open = true
			case processor.Revoked:
				assert.True(t, open, "%s: Revoked without Elected", id)
				open = false
			}
		}
		e.rec.mu.Unlock()
	}
	// How often two members held the role at once by their own events
	// (in the order the events were received): allowed, and reported.
	e.rec.mu.Lock()
	overlapping, cur := 0, map[codec.MemberID]bool{}
	for _, ev := range e.rec.events {
		switch ev.Kind {
		case processor.Elected:
			cur[ev.Member] = true
			if len(cur) > 1 {
				overlapping++
			}
		case processor.Revoked:
			delete(cur, ev.Member)
		}
	}
	e.rec.mu.Unlock()
	t.Logf("%d samples (%d with two members holding by their events), %d terms (%d began while another member still held by its events), %d tokens minted",
		samples, overlaps, len(e.rec.find(processor.Elected, role, nil)), overlapping, len(e.rec.acquires))
}

// A holder that crashes (its context ends with KeepOnExit: it writes
// nothing, its lease runs to its deadline) is replaced by its successor
// (the candidate of the highest split score), which challenges once its
// clock passes the deadline: never before the deadline, and within
// Stagger (+ slack) after it, because the crashed member named in the
// lease ranks last and the successor is rank 0.
// The new holder prunes the crashed member's registration. Then the new
// holder crashes too, and the last member takes over: the candidates never
// pile up.
func TestIntegrationCrashFailover(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("scheduler")
	s := itSettings()
	s.KeepOnExit = true
	a, b, _ := e.holderAndCandidate(role, s)
	c := e.candidate("node-c", role, s, nil)

	crash := func(dead, next *node, left []codec.MemberID) {
		t.Helper()
		crashed := time.Now()
		dead.stop(t)()
		last, ok := e.rec.lastWrite(role, dead.id)
		require.True(t, ok)
		deadline := time.UnixMilli(last.Lease.Deadline)
		assert.False(t, last.Lease.Released(), "a member leaving with KeepOnExit writes no release")

		el := awaitElected(t, e.rec, role, next.id, crashed, s.LeaseDuration+s.Stagger+slack)
		took := el.At.Sub(crashed)
		t.Logf("%s crashed; %s elected %v later (lease deadline %v after the crash)", dead.id, next.id, took.Round(time.Millisecond), deadline.Sub(crashed).Round(time.Millisecond))
		// Never before the crashed holder's deadline (one clock here).
		assert.GreaterOrEqual(t, el.At.UnixMilli(), last.Lease.Deadline, "the next holder challenged before the crashed holder's lease deadline")
		// Rank 0 challenges at the deadline: within Stagger + slack.
		assert.LessOrEqual(t, el.At.Sub(deadline), s.Stagger+slack, "the next holder took too long after the deadline")
		// The crashed holder's own deadline lies within a lease of the crash.
		assert.LessOrEqual(t, took, s.LeaseDuration+s.Stagger+slack)
		e.agree(role, next.id, el.Token)
		await(t, 5*time.Second, fmt.Sprintf("candidates %v after pruning %s", left, dead.id), func() bool {
			return slices.Equal(e.candidates(role), left)
		})
	}
	first, second := b, c
	if topScore(role, b.id, c.id) == c.id {
		first, second = c, b
	}
	crash(a, first, []codec.MemberID{"node-b", "node-c"})
	crash(first, second, []codec.MemberID{second.id})
	for _, id := range []codec.MemberID{a.id, first.id} {
		assert.Len(t, e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member == id }), 1, "%s held one term", id)
	}
	e.rec.checkFence(t)
}

// awaitElected waits up to d for member's Elected for role received after
// since.
func awaitElected(t testing.TB, rec *recorder, role codec.Role, member codec.MemberID, since time.Time, d time.Duration) stamped {
	t.Helper()
	return awaitEvent(t, rec, processor.Elected, role, member, since, d, fmt.Sprintf("%s elected for %s", member, role))
}

// awaitRevoked waits up to d for member's first Revoked for role (what
// says what is awaited).
func awaitRevoked(t testing.TB, rec *recorder, role codec.Role, member codec.MemberID, d time.Duration, what string) stamped {
	t.Helper()
	return awaitEvent(t, rec, processor.Revoked, role, member, time.Time{}, d, what)
}

// awaitEvent waits up to d for member's first event of kind for role
// received after since.
func awaitEvent(t testing.TB, rec *recorder, kind processor.EventKind, role codec.Role, member codec.MemberID, since time.Time, d time.Duration, what string) stamped {
	t.Helper()
	var ev stamped
	await(t, d, what, func() bool {
		evs := rec.find(kind, role, func(ev stamped) bool { return ev.Member == member && ev.Got.After(since) })
		if len(evs) == 0 {
			return false
		}
		ev = evs[0]
		return true
	})
	return ev
}

// A holder whose context ends normally resigns: it stops, writes the
// release under its token and deregisters, and the next candidate takes
// over at once, before the old lease's deadline (LeaseDuration -
// HeartbeatInterval at least after the leave began).
func TestIntegrationGracefulHandover(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("compactor")
	s := itSettings()
	a, b, _ := e.holderAndCandidate(role, s)
	e.awaitLive(role, a, b) // so the logged handover time is not node-b's view starting

	left := time.Now()
	live, ok := e.rec.lastWrite(role, a.id)
	require.True(t, ok)
	a.stop(t)()
	el := awaitElected(t, e.rec, role, b.id, left, s.LeaseDuration)
	t.Logf("handover took %v", el.Got.Sub(left))
	assert.Less(t, el.At.UnixMilli(), live.Lease.Deadline, "the next holder waited for the old lease's deadline")

	rev := e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == a.id })
	require.Len(t, rev, 1)
	assert.Equal(t, processor.ReasonContextEnded, rev[0].Reason)
	assert.False(t, rev[0].At.After(el.At), "the old holder stopped before the new one was elected")
	end, ok := e.rec.lastBeat(a.id)
	require.True(t, ok)
	assert.True(t, end.hb.End, "the leaving holder's last session record is its end, which releases its leases")
	assert.True(t, end.start.Before(el.Got), "the new term began after the session end was sent")
	e.agree(role, b.id, el.Token)
	assert.Equal(t, []codec.MemberID{"node-b"}, e.candidates(role), "the leaving member deregistered")
	e.rec.checkFence(t)
}

// An outsider's AcquireEpoch on the role's transactional id fences the
// holder: the member session's next round (DescribeTransactions) finds
// the token moved, the holder is revoked (fenced) within a HeartbeatInterval
// (+ slack), and its work's context is cancelled no later than the
// Revoked event. The role is taken again, under a token newer than the
// outsider's, once the holder has stopped vouching for it.
func TestIntegrationFencedByOutsideEpoch(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("billing")
	s := itSettings()
	type run struct {
		ctx context.Context
		tok codec.Token
	}
	var mu sync.Mutex
	var runs []run
	started := make(chan struct{}, 8)
	work := func(ctx context.Context, h processor.Held) error {
		mu.Lock()
		runs = append(runs, run{ctx, h.Token})
		mu.Unlock()
		started <- struct{}{}
		<-ctx.Done()
		return nil
	}
	// At the Revoked event (under the recorder's lock), the context of the
	// work under the revoked token must be done already; and so it must be
	// at any member's Elected under a later token. The fenced holder's
	// session cancels the work before its heartbeat stops vouching, which
	// is what lets a successor in; its own Revoked event may come later.
	var atRevoke, atNext []error
	e.rec.hook = func(ev processor.Event) {
		mu.Lock()
		defer mu.Unlock()
		if len(runs) == 0 {
			return
		}
		switch {
		case ev.Kind == processor.Revoked && ev.Member == "node-a":
			for _, r := range runs {
				if r.tok == ev.Token {
					atRevoke = append(atRevoke, r.ctx.Err())
				}
			}
		case ev.Kind == processor.Elected && later(ev.Token, runs[0].tok):
			atNext = append(atNext, runs[0].ctx.Err())
		}
	}
	a, tokA := e.holder("node-a", role, s, work)
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("work did not start")
	}
	mu.Lock()
	first := runs[0]
	mu.Unlock()
	require.Equal(t, tokA, first.tok)
	b := e.start("node-b", []codec.Role{role}, s, work)
	e.awaitCandidate(role, b.id)

	fencedAt := time.Now()
	tokX, err := e.probe.AcquireEpoch(e.ctx(10*time.Second), role)
	require.NoError(t, err)
	require.True(t, later(tokX, tokA))
	assert.Equal(t, tokX, e.describe(role))

	rev := awaitRevoked(t, e.rec, role, a.id, s.HeartbeatInterval+s.TransactionTimeout+slack, "node-a revoked")
	t.Logf("revoked %v after the outside AcquireEpoch", rev.Got.Sub(fencedAt))
	assert.Equal(t, processor.ReasonFenced, rev.Reason)
	assert.ErrorIs(t, rev.Err, fencing.ErrFenced)
	assert.Equal(t, tokA, rev.Token)
	select {
	case <-first.ctx.Done():
	default:
		t.Error("work's context is not cancelled after Revoked")
	}
	e.rec.mu.Lock()
	mu.Lock()
	assert.Equal(t, []error{context.Canceled}, atRevoke, "work's context at the Revoked event")
	mu.Unlock()
	e.rec.mu.Unlock()

	// The outsider wrote no lease. node-a, fenced, stops vouching for
	// the role (its next heartbeat excludes it), so the role is vacant
	// once node-a has stopped, and a member takes it under a newer token.
	holder, tok := e.soleHolder(role, s.LeaseDuration+s.Stagger+slack)
	assert.True(t, later(tok, tokX), "the next term's token %s is newer than the outsider's %s", tok, tokX)
	el := e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Token == tok })
	require.Len(t, el, 1)
	e.rec.mu.Lock()
	mu.Lock()
	assert.Equal(t, []error{context.Canceled}, atNext, "the fenced work's context at the next Elected")
	mu.Unlock()
	e.rec.mu.Unlock()
	e.agree(role, holder, tok)
	e.rec.checkFence(t)
}

// Work runs only while its member holds the role. Guaranteed locally, and
// asserted here:
//
//   - work starts after its member's Elected for the token it is given;
//   - its context is cancelled before the member reports Revoked (for any
//     reason): at the Revoked event, the context is done;
//   - a member never runs two works of a role at once: the next term's
//     work starts only after the previous one returned;
//   - on a resignation the member waits for work to return (up to its
//     local deadline) before it writes the release, and the next member
//     challenges only after reading the release: the old work has
//     returned before the new holder is elected, across members.
//
// Not guaranteed, and not asserted: on a fence or a crash, that the old
// work has stopped before another member's work starts. The old work's
// context is cancelled by HeartbeatDeadline after its last successful write
// at the latest, which is before the lease deadline when the clocks agree,
// but a work that ignores its context runs on; only the broker's fence
// (held.Token with every write) stops its writes.
func TestIntegrationWorkOnlyWhileHolding(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("indexer")
	s := itSettings()
	type run struct {
		member      codec.MemberID
		tok         codec.Token
		ctx         context.Context
		start, stop time.Time
	}
	var mu sync.Mutex
	var runs []*run
	work := func(member codec.MemberID) processor.Work {
		return func(ctx context.Context, h processor.Held) error {
			r := &run{member: member, tok: h.Token, ctx: ctx, start: time.Now()}
			assert.Equal(t, member, h.Member)
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			r.stop = time.Now()
			mu.Unlock()
			return nil
		}
	}
	var violations []string
	e.rec.hook = func(ev processor.Event) {
		if ev.Kind != processor.Revoked {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range runs {
			if r.member == ev.Member && r.tok == ev.Token && r.ctx.Err() == nil {
				violations = append(violations, fmt.Sprintf("%s's work under %s still running at Revoked (%s)", ev.Member, ev.Token, ev.Reason))
			}
		}
	}
	nodes := map[codec.MemberID]*node{}
	for _, id := range []codec.MemberID{"node-a", "node-b", "node-c"} {
		nodes[id] = e.start(id, []codec.Role{role}, s, work(id))
		e.soleHolder(role, 10*time.Second)
	}
	await(t, 5*time.Second, "three candidates", func() bool { return len(e.candidates(role)) == 3 })

	// Two resignations, then a fence.
	type term struct {
		member codec.MemberID
		tok    codec.Token
	}
	var resigned []term
	for range 2 {
		h, tok := e.soleHolder(role, 10*time.Second)
		// Resign once the term's work runs: a holding that ends before its
		// work could start gets no call (Work's doc), and this test checks
		// that the work returned before the next term (the race
		// detector's run resigned one before its work started).
		await(t, 5*time.Second, "the term's work started", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.ContainsFunc(runs, func(r *run) bool { return r.member == h && r.tok == tok })
		})
		require.NoError(t, nodes[h].m.Resign(e.ctx(10*time.Second), role))
		resigned = append(resigned, term{h, tok})
		await(t, 10*time.Second, "a new term", func() bool {
			hs := e.rec.holders(role)
			return len(hs) == 1 && hs[h] == codec.Token{}
		})
	}
	h, tok := e.soleHolder(role, 10*time.Second)
	tokX, err := e.probe.AcquireEpoch(e.ctx(10*time.Second), role)
	require.NoError(t, err)
	await(t, s.HeartbeatInterval+s.TransactionTimeout+slack, "the fenced holder revoked", func() bool {
		return len(e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == h && ev.Token == tok })) == 1
	})
	_, last := e.soleHolder(role, s.LeaseDuration+s.Stagger+slack)
	assert.True(t, later(last, tokX), "the term after the fence is newer than the outsider's token")
	// Wait for the last term's work to start, then stop everything.
	await(t, 5*time.Second, "the last term's work started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(runs, func(r *run) bool { return r.tok == last })
	})
	for _, n := range nodes {
		n.stop(t)()
	}

	mu.Lock()
	defer mu.Unlock()
	e.rec.mu.Lock()
	assert.Empty(t, violations)
	elected := map[term]stamped{}
	for _, ev := range e.rec.events {
		if ev.Kind == processor.Elected {
			elected[term{ev.Member, ev.Token}] = ev
		}
	}
	e.rec.mu.Unlock()
	// At most one run per term: a term lost before its run could start
	// (its member's previous run had not returned yet) gets none.
	require.LessOrEqual(t, len(runs), len(elected), "at most one run of work per term")
	byMember := map[codec.MemberID][]*run{}
	ran := map[term]bool{}
	for _, r := range runs {
		assert.False(t, ran[term{r.member, r.tok}], "%s's work under %s ran twice", r.member, r.tok)
		ran[term{r.member, r.tok}] = true
		el, ok := elected[term{r.member, r.tok}]
		if assert.True(t, ok, "%s's work under %s has no Elected", r.member, r.tok) {
			assert.False(t, r.start.Before(el.Got), "%s's work under %s started before its Elected", r.member, r.tok)
		}
		assert.False(t, r.stop.IsZero(), "%s's work under %s returned", r.member, r.tok)
		byMember[r.member] = append(byMember[r.member], r)
	}
	for m, rs := range byMember {
		for i := 1; i < len(rs); i++ {
			assert.True(t, rs[i].start.After(rs[i-1].stop), "%s ran two works at once", m)
		}
	}
	// After each resignation the old work had returned before the next
	// term was elected.
	for _, rt := range resigned {
		var old *run
		for _, r := range runs {
			if r.member == rt.member && r.tok == rt.tok {
				old = r
			}
		}
		require.NotNil(t, old)
		e.rec.mu.Lock()
		var nextEl *stamped
		for i, ev := range e.rec.events {
			if ev.Kind == processor.Elected && later(ev.Token, rt.tok) {
				nextEl = &e.rec.events[i]
				break
			}
		}
		e.rec.mu.Unlock()
		if assert.NotNil(t, nextEl) {
			assert.True(t, old.stop.Before(nextEl.At),
				"%s's work under %s returned at %s, after the next term was elected at %s", rt.member, rt.tok, old.stop.Format("15:04:05.000"), nextEl.At.Format("15:04:05.000"))
		}
	}
	e.rec.checkFence(t)
}

// A holder killed in the middle of a lease write leaves its transaction
// open, and read_committed readers of the partition (the view) stop at the
// transaction's first offset, for every role in the partition, until the
// coordinator aborts it after the transaction timeout. Here node-k holds
// role "killed", which shares a partition with role "busy" held by node-a,
// and dies (KeepOnExit) after beginning a lease write that it never ends.
// node-a goes on renewing "busy"; its renewals are hidden from the views
// meanwhile (checked while the transaction timeout has not passed), and
// show within the transaction timeout (+ slack) of the transaction's
// start. Because the timeout is below LeaseDuration - HeartbeatInterval,
// node-b (a candidate of "busy") never sees node-a's lease expire, and
// node-a is never revoked.
//
// The bound is kfake's, which aborts at the timeout exactly. Apache Kafka
// checks for timed-out transactions every
// transaction.abort.timed.out.transaction.cleanup.interval.ms (10s by
// default), so there the stall lasts up to the timeout plus that interval
// and exceeds the lease used here: the test needs the embedded cluster.
func TestIntegrationKilledMidTransactionDoesNotStallTheView(t *testing.T) {
	txnTimeout := 1500 * time.Millisecond
	e := newEnv(t, txnTimeout)
	e.c.RequireFake(t)
	s := processor.Settings{
		LeaseDuration:      3 * time.Second,
		HeartbeatInterval:  600 * time.Millisecond,
		HeartbeatDeadline:  2400 * time.Millisecond,
		RetryBackoff:       50 * time.Millisecond,
		Stagger:            200 * time.Millisecond,
		TransactionTimeout: txnTimeout,
	}
	busy := codec.Role("busy")
	// The killed member's role shares a partition with node-a's member
	// session, whose heartbeats renew node-a's lease of busy.
	p := codec.SessionPartition("node-a", 3)
	killed := roleIn("killed-%d", p, 3)

	a, tokA := e.holder("node-a", busy, s, nil)
	b := e.start("node-b", []codec.Role{busy}, s, nil)
	ks := s
	ks.KeepOnExit = true
	k, tokK := e.holder("node-k", killed, ks, nil)
	e.awaitCandidate(busy, b.id)

	// node-k dies in the middle of a lease write: its member is gone
	// (nothing written on the way out), and a transaction it began under
	// its token stays open: the record is produced, EndTxn never sent.
	k.stop(t)()
	l := codec.Lease{Member: k.id, Token: tokK, GrantedAt: time.Now().UnixMilli(), Deadline: time.Now().Add(s.LeaseDuration).UnixMilli()}
	began := time.Now()
	openAt := e.openLeaseWrite(k.tr, killed, p, l)
	// The renewal the view shows: node-a's lease, or the latest heartbeat
	// of the session it names.
	granted := func(st rolestate.State) int64 {
		if st.Lease == nil || st.Lease.Member != a.id {
			return 0
		}
		if st.Session != nil && !st.Session.Heartbeat.End && st.Session.Heartbeat.GrantedAt > st.Lease.GrantedAt {
			return st.Session.Heartbeat.GrantedAt
		}
		return st.Lease.GrantedAt
	}

	// While the transaction is open the views hold back node-a's renewals
	// (checked only if the timeout cannot have passed yet): once a second
	// renewal begun after it has committed, the first has had a heartbeat
	// interval to reach the views.
	poll(time.Until(began.Add(txnTimeout-50*time.Millisecond)), func() bool {
		e.rec.mu.Lock()
		defer e.rec.mu.Unlock()
		n := 0
		for _, bt := range e.rec.beats {
			if bt.hb.Member == a.id && !bt.hb.End && bt.start.After(openAt) {
				n++
			}
		}
		return n >= 2
	})
	st, err := e.obs.Role(e.ctx(5*time.Second), busy)
	require.NoError(t, err)
	checked := time.Now()
	if checked.Before(began.Add(txnTimeout - 50*time.Millisecond)) {
		w, ok := e.rec.lastWrite(busy, a.id)
		require.True(t, ok)
		assert.True(t, w.Start.After(openAt), "node-a renewed while the transaction was open")
		assert.LessOrEqual(t, granted(st), openAt.UnixMilli(), "the view shows a renewal written after the open transaction began")
	} else {
		t.Logf("the stall check ran %v after the transaction began; skipped", checked.Sub(began))
	}

	// The coordinator aborts at the timeout, and the views move on.
	var seen time.Time
	await(t, txnTimeout+slack+time.Second, "the view shows a renewal of node-a after the open transaction", func() bool {
		st, err := e.obs.Role(e.ctx(5*time.Second), busy)
		require.NoError(t, err)
		if granted(st) > openAt.UnixMilli() {
			seen = time.Now()
			return true
		}
		return false
	})
	t.Logf("the view was held back %v after the transaction opened (timeout %v)", seen.Sub(openAt).Round(time.Millisecond), txnTimeout)
	assert.LessOrEqual(t, seen.Sub(began), txnTimeout+slack, "the view was held back longer than the transaction timeout")
	tokNow, ok, err := e.probe.Describe(e.ctx(5*time.Second), killed)
	require.NoError(t, err)
	t.Logf("after the timeout abort the killed role's token is %s (was %s)", tokNow, tokK)
	assert.True(t, ok)

	// Once node-b's view is past the stall too, check that nothing
	// changed hands.
	await(t, 5*time.Second, "node-b's view shows a renewal of node-a after the open transaction", func() bool {
		st, err := b.src.Role(e.ctx(5*time.Second), busy)
		require.NoError(t, err)
		return granted(st) > openAt.UnixMilli()
	})
	assert.Equal(t, map[codec.MemberID]codec.Token{a.id: tokA}, e.rec.holders(busy), "node-a holds throughout")
	assert.Empty(t, e.rec.find(processor.Revoked, busy, nil), "node-a was never revoked")
	assert.Empty(t, e.rec.find(processor.Elected, busy, func(ev stamped) bool { return ev.Member == b.id }), "node-b never took the role")
	e.rec.checkFence(t)
}

// One member holds many roles; a second member campaigns for the same
// roles. Every role ends up with exactly one holder, under the token
// Describe names, as the observer's table shows it.
func TestIntegrationManyRoles(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	const n = 20
	roles := roleNames("shard-%02d", n)
	s := itSettings()
	a := e.start("node-a", roles, s, nil)
	await(t, 10*time.Second, "node-a holds every role", func() bool { return allHeld(e.rec, roles, a.id) })
	b := e.start("node-b", roles, s, nil)
	// node-a's own view must show node-b, or node-a (seeing no one else)
	// takes back a role it has just released.
	e.awaitSeenBy(a, roles, 10*time.Second, b.id)
	// Hand half of the roles to node-b.
	for _, r := range roles[:n/2] {
		require.NoError(t, a.m.Resign(e.ctx(10*time.Second), r))
	}
	for i, r := range roles {
		holder, tok := e.soleHolder(r, 10*time.Second)
		want := a.id
		if i < n/2 {
			want = b.id // node-a queued again behind node-b
		}
		assert.Equal(t, want, holder, "%s", r)
		e.agree(r, holder, tok)
	}
	e.rec.checkFence(t)
}

// openLeaseWrite begins a transaction under l's token through tr that
// produces l to role's partition p and is never ended, as a holder that
// died in the middle of a lease write leaves it (EndTxn is never sent). It
// returns when the record has been produced, with the time; the
// transaction's function returns when the test ends.
func (e *env) openLeaseWrite(tr fencing.FencedWriter, role codec.Role, p int32, l codec.Lease) time.Time {
	e.t.Helper()
	val, err := codec.EncodeRecord(codec.Record{Lease: &l})
	require.NoError(e.t, err)
	opened, release, txnDone := make(chan time.Time, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		txnDone <- tr.Transact(context.Background(), role, l.Token, func(tx *fencing.Txn) error {
			if _, err := tx.Produce(e.c.Config.Topic, p, codec.LeaseKey(role).Encode(), val); err != nil {
				return err
			}
			opened <- time.Now()
			<-release // dead: nothing more is sent until the test ends
			return errors.New("dead")
		})
	}()
	e.t.Cleanup(func() {
		close(release)
		<-txnDone
	})
	select {
	case at := <-opened:
		return at
	case err := <-txnDone:
		e.t.Fatalf("the transaction did not open: %v", err)
	case <-time.After(10 * time.Second):
		e.t.Fatal("the transaction did not open")
	}
	return time.Time{}
}
