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
// This file is their kit; the tests are in the *_integration_test.go
// files. Run them with `go test -run Integration ./processor/`;
// KROLE_TEST_LOG=1 logs the members' transitions.

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

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

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

// ---------------------------------------------------------------------------
// Succession.

// topScore returns the member of ms with the highest split score for r:
// the successor of a holder of r that died.
func topScore(r codec.Role, ms ...codec.MemberID) codec.MemberID {
	best := ms[0]
	for _, m := range ms[1:] {
		if processor.SplitScore(r, m) > processor.SplitScore(r, best) {
			best = m
		}
	}
	return best
}

// ---------------------------------------------------------------------------
// Groups.

// groupRoles names n roles of a group: shard-0 .. shard-(n-1).
func groupRoles(n int) []codec.Role {
	out := make([]codec.Role, n)
	for i := range out {
		out[i] = codec.Role(fmt.Sprintf("shard-%d", i))
	}
	return out
}

// inGroup makes the member a member of g.
func inGroup(g processor.Group) nodeOption {
	return withOptions(func(o *processor.Options) { o.Group = &g })
}

// awaitCounts waits until every role has one holder and the members
// hold want of them each.
func (e *env) awaitCounts(roles []codec.Role, want map[codec.MemberID]int, d time.Duration) {
	e.t.Helper()
	var got map[codec.MemberID]int
	await(e.t, d, fmt.Sprintf("holdings %v", want), func() bool {
		var ok bool
		got, ok = e.rec.counts(roles)
		return ok && fmt.Sprint(got) == fmt.Sprint(want)
	})
}

// since counts the recorded events of kind after t, by member.
func (r *recorder) since(kind processor.EventKind, t time.Time, ok func(stamped) bool) map[codec.MemberID]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[codec.MemberID]int{}
	for _, e := range r.events {
		if e.Kind == kind && e.Got.After(t) && (ok == nil || ok(e)) {
			out[e.Member]++
		}
	}
	return out
}

// groupOfThree starts node-a in the group "shards" of roles and waits
// until it holds every role; then node-b, and node-c on settings sc, and
// waits until each of the three holds a third. opts apply to all three.
func (e *env) groupOfThree(roles []codec.Role, s, sc processor.Settings, opts ...nodeOption) (a, b, c *node) {
	e.t.Helper()
	in := append([]nodeOption{inGroup(processor.Group{Name: "shards"})}, opts...)
	a = e.start("node-a", roles, s, nil, in...)
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": len(roles)}, 20*time.Second)
	b = e.start("node-b", roles, s, nil, in...)
	c = e.start("node-c", roles, sc, nil, in...)
	third := len(roles) / 3
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": third, "node-b": third, "node-c": third}, 20*time.Second)
	return a, b, c
}

// ---------------------------------------------------------------------------
// Instances of one member id.

// startErr starts a member as start does, but hands Run's error to the
// test instead of asserting it is nil.
// Its events are not recorded.
func (e *env) startErr(id codec.MemberID, roles []codec.Role, s processor.Settings) (*node, <-chan error) {
	e.t.Helper()
	errc := make(chan error, 1)
	n := e.start(id, roles, s, nil, runErrTo(errc),
		withOptions(func(o *processor.Options) { o.OnEvent, o.Logger = nil, testLog(string(id)+"-2") }))
	return n, errc
}

// diedHolding starts member id, alone, on role with settings s and
// KeepOnExit, waits until it holds the role, and stops it: it leaves
// without releasing or deregistering anything, as a SIGKILL would, its
// last heartbeats the member id's latest session records. It returns the
// stopped node and its token.
func (e *env) diedHolding(id codec.MemberID, role codec.Role, s processor.Settings) (*node, codec.Token) {
	e.t.Helper()
	s.KeepOnExit = true
	n := e.start(id, []codec.Role{role}, s, nil)
	_, tok := e.settled(role, 10*time.Second)
	n.stop(e.t)()
	return n, tok
}

// awaitNewerToken waits until role's coordinator names a token Newer than
// tok (what), and returns it.
func (e *env) awaitNewerToken(role codec.Role, tok codec.Token, what string) codec.Token {
	e.t.Helper()
	var held codec.Token
	await(e.t, 20*time.Second, what, func() bool {
		cur, _, err := e.probe.Describe(e.ctx(10*time.Second), role)
		held = cur
		return err == nil && cur.Newer(tok)
	})
	return held
}

// requireRunning fails the test when the member whose Run reports to
// errc has stopped.
func requireRunning(t *testing.T, errc <-chan error) {
	t.Helper()
	select {
	case err := <-errc:
		t.Fatalf("the restarted member stopped: %v", err)
	default:
	}
}

// ---------------------------------------------------------------------------
// Partitions of the network (faultnet).

// clientIDOf is the client id of a member's transport and view in these
// tests, as election and krole run name them by default.
func clientIDOf(id codec.MemberID) string { return "krole-" + string(id) }

// newPartitionEnv is newEnv on three brokers with faultnet in front of
// them and role's transaction coordinator and partition leader apart.
func newPartitionEnv(t *testing.T, role codec.Role) *env {
	t.Helper()
	return newEnv(t, itTxnTimeout, withFaults(), withBrokers(3), withApart(role))
}

// cut partitions member id off the cluster and returns the heal function;
// the partition heals at the end of the test at the latest.
func cut(t *testing.T, fn *faultnet.Net, id codec.MemberID) func() {
	t.Helper()
	heal := fn.Partition(clientIDOf(id))
	t.Cleanup(heal)
	return heal
}

// afterRenewal waits until member has just renewed (a successful write
// ended within the last HeartbeatInterval/4) and returns that write, so that a
// cut made now comes before its next renewal begins.
func afterRenewal(t *testing.T, e *env, role codec.Role, member codec.MemberID, s processor.Settings) write {
	t.Helper()
	var w write
	prev, _ := e.rec.lastWrite(role, member)
	await(t, 5*time.Second, member.String()+" renews", func() bool {
		var ok bool
		w, ok = e.rec.lastWrite(role, member)
		return ok && w.End.After(prev.End) && time.Since(w.End) < s.HeartbeatInterval/4
	})
	return w
}

// ---------------------------------------------------------------------------
// The role topic, read and written by another client.

// partitionsOf returns the number of partitions of the role topic.
func partitionsOf(t *testing.T, e *env) int32 {
	t.Helper()
	sc, err := e.c.Config.Sarama()
	require.NoError(t, err)
	client, err := sarama.NewClient(e.c.Config.Brokers, sc)
	require.NoError(t, err)
	defer client.Close()
	parts, err := client.Partitions(e.c.Config.Topic)
	require.NoError(t, err)
	return int32(len(parts))
}

// eachLease reads the role topic from the start through another client
// (franz-go, read_committed) up to its end when called, and calls f with
// every lease record (releases included), each role's in offset order.
func eachLease(t *testing.T, e *env, f func(role codec.Role, off int64, l codec.Lease)) {
	t.Helper()
	eachRecord(t, e, func(k codec.Key, off int64, r codec.Record) {
		if k.Kind == codec.KindLease && r.Lease != nil {
			f(k.Role, off, *r.Lease)
		}
	})
}

// eachRecord is eachLease for every krole record, each partition's in
// offset order.
func eachRecord(t *testing.T, e *env, f func(k codec.Key, off int64, r codec.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.Config.Brokers...), kgo.ConsumeTopics(e.c.Config.Topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A plain record at the end of every partition: read up to it, and
	// everything committed before it has been read.
	parts := partitionsOf(t, e)
	ends := map[int32]int64{}
	w, err := kgo.NewClient(kgo.SeedBrokers(e.c.Config.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer w.Close()
	for p := range parts {
		r, err := w.ProduceSync(ctx, &kgo.Record{Topic: e.c.Config.Topic, Partition: p, Key: []byte("end-of-test")}).First()
		require.NoError(t, err)
		ends[p] = r.Offset
	}
	seen := map[int32]bool{}
	for len(seen) < len(ends) {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading the role topic back")
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset >= ends[rec.Partition] {
				seen[rec.Partition] = true
			}
			k, err := codec.DecodeKey(rec.Key)
			if err != nil || rec.Value == nil {
				return
			}
			if v, err := codec.DecodeRecord(rec.Value); err == nil {
				f(k, rec.Offset, v)
			}
		})
	}
}

// forger is a stranger with Write on the role topic and, when it has
// one, on a transactional id of its own (not the role's): it commits
// records in transactions under that id, each batch naming its own
// producer id and epoch (tok), or appends them plainly when it has none.
type forger struct {
	t     *testing.T
	e     *env
	cl    *kgo.Client
	txn   bool
	tok   codec.Token
	parts int32
}

// newForger is a forger under txnID ("": a plain producer).
func newForger(t *testing.T, e *env, txnID string) *forger {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(e.c.Config.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}
	if txnID != "" {
		opts = append(opts, kgo.TransactionalID(txnID), kgo.MaxVersions(kversion.V3_9_0()))
	}
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	f := &forger{t: t, e: e, cl: cl, txn: txnID != "", parts: partitionsOf(t, e)}
	if f.txn {
		pid, epoch, err := cl.ProducerID(e.ctx(20 * time.Second))
		require.NoError(t, err)
		f.tok = codec.Token{ProducerID: pid, Epoch: epoch}
	}
	return f
}

// commit commits lease l of role.
func (f *forger) commit(role codec.Role, l codec.Lease) {
	f.t.Helper()
	f.write(codec.Partition(role, f.parts), codec.LeaseKey(role).Encode(), codec.Record{Lease: &l})
}

// write commits r under key to partition p, in one transaction when f has
// a transactional id.
func (f *forger) write(p int32, key []byte, r codec.Record) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := codec.EncodeRecord(r)
	require.NoError(f.t, err)
	if f.txn {
		require.NoError(f.t, f.cl.BeginTransaction())
	}
	require.NoError(f.t, f.cl.ProduceSync(ctx, &kgo.Record{Topic: f.e.c.Config.Topic, Partition: p, Key: key, Value: b}).FirstErr())
	if f.txn {
		require.NoError(f.t, f.cl.EndTransaction(ctx, kgo.TryCommit))
	}
}
