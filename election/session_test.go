package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

func TestMain(m *testing.M) {
	testcluster.VerifyNoLeaks(m)
}

// Short timings: a lease of 2s, so a transaction timeout of 1s.
var testSettings = processor.Settings{LeaseDuration: 2 * time.Second, HeartbeatInterval: 400 * time.Millisecond, Stagger: 300 * time.Millisecond}

const waitFor = 20 * time.Second

// recorder keeps what the callbacks of a Session saw, in order.
type recorder struct {
	mu   sync.Mutex
	seen []string // "ready", or the event's String()
	evs  []processor.Event
	ch   chan processor.Event
}

func newRecorder() *recorder { return &recorder{ch: make(chan processor.Event, 64)} }

func (r *recorder) onReady() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, "ready")
}

func (r *recorder) onEvent(e processor.Event) {
	r.mu.Lock()
	r.seen = append(r.seen, e.Kind.String())
	r.evs = append(r.evs, e)
	r.mu.Unlock()
	select {
	case r.ch <- e:
	default:
	}
}

func (r *recorder) waitKind(t *testing.T, k processor.EventKind) processor.Event {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case e := <-r.ch:
			if e.Kind == k {
				return e
			}
		case <-deadline:
			t.Fatalf("no %v event", k)
		}
	}
}

func (r *recorder) snapshot() ([]string, []processor.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...), append([]processor.Event(nil), r.evs...)
}

func config(c *testcluster.Cluster, member codec.MemberID, role codec.Role, rec *recorder) Config {
	return Config{Cluster: c.Config, Member: member, Roles: []codec.Role{role}, Settings: testSettings,
		OnEvent: rec.onEvent, OnReady: rec.onReady}
}

// readRole reads role's records through a transport of the test's own.
func readRole(t *testing.T, c *testcluster.Cluster, role codec.Role) rolestate.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// As a member reads it: the lease's member session joined.
	st, err := testcluster.ReadRole(ctx, c.Transport(t), role)
	require.NoError(t, err)
	return st
}

// released reports whether st's lease no longer holds the role: a
// release, or its member session's end (or a heartbeat excluding it).
func released(st rolestate.State) bool {
	return st.Lease != nil && (st.Lease.Released() || st.SessionVouch() == rolestate.Dropped)
}

// One Session runs a member: the transaction timeout is derived from the
// settings; OnReady comes before the first event; the work writes under
// the holding's token through Writer; the lookups answer through View.
// When ctx ends, Run returns nil only after the work has returned, the
// member has resigned and deregistered (so the transport was still open
// then), and the transport is closed.
func TestSessionRunsTheMemberAndStopsInOrder(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	out := c.Topic(t, c.Name("out"), 1, waitFor)
	const role = codec.Role("controller")
	rec := newRecorder()
	cfg := config(c, "node-1", role, rec)
	cfg.Cluster.TxnTimeout = 5 * time.Second // not read: derived from the settings
	sess, err := New(cfg)
	require.NoError(t, err)
	defer sess.Close()
	assert.Equal(t, time.Second, sess.Transport().TxnTimeout(), "the transaction timeout is Settings.TransactionTimeout")
	assert.Equal(t, testSettings.WithDefaults(), sess.Member().Settings())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wrote := make(chan codec.Token, 1)
	var workDone atomic.Bool
	runDone := make(chan error, 1)
	go func() {
		runDone <- sess.Run(ctx, func(ctx context.Context, held processor.Held) error {
			defer workDone.Store(true)
			err := sess.Writer(held).Write(ctx, fencing.Message{Topic: out, Partition: 0, Key: []byte("k"), Value: []byte(held.Token.String())})
			if err != nil {
				return err
			}
			wrote <- held.Token
			<-ctx.Done()
			return nil
		})
	}()

	e := rec.waitKind(t, processor.Elected)
	var tok codec.Token
	select {
	case tok = <-wrote:
	case err := <-runDone:
		t.Fatalf("Run returned %v", err)
	case <-time.After(waitFor):
		t.Fatal("the work did not write")
	}
	assert.Equal(t, e.Token, tok)
	require.NoError(t, sess.View().WaitCaughtUp(ctx)) // the view follows the topic with a lag
	l, held, err := sess.View().Holder(ctx, role, time.Time{})
	require.NoError(t, err)
	assert.True(t, held)
	assert.Equal(t, codec.MemberID("node-1"), l.Member)
	desc, ok, err := c.Transport(t).Describe(ctx, role)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, tok, desc, "the broker says the session's token holds the role")

	cancel()
	select {
	case err := <-runDone:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Run did not return")
	}
	assert.True(t, workDone.Load(), "Run returned after the work")
	seen, _ := rec.snapshot()
	require.NotEmpty(t, seen)
	assert.Equal(t, "ready", seen[0], "OnReady comes before every event: %v", seen)

	// The member left while the transport was open: the release and the
	// deregistration are in the role topic.
	st := readRole(t, c, role)
	require.NotNil(t, st.Lease)
	assert.True(t, released(st), "the member resigned on the way out")
	assert.Equal(t, tok, st.Lease.Token)
	assert.Empty(t, st.Candidates, "the member deregistered on the way out")
	// Then the transport was closed.
	_, _, err = sess.Transport().Describe(context.Background(), role)
	assert.Error(t, err, "the transport is closed when Run returns")

	msgs := c.ReadAll(t, out, sarama.ReadCommitted, waitFor)
	require.Len(t, msgs, 1)
	assert.Equal(t, tok.String(), string(msgs[0].Value))

	assert.ErrorIs(t, sess.Run(context.Background(), nil), ErrAlreadyRun)
	assert.NoError(t, sess.Close())
}

// A view that cannot start (the role topic is missing) ends Run with a
// ViewError that has not caught up, wrapping the cause; the member never
// started.
func TestSessionViewFailsAtStart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	rec := newRecorder()
	cfg := config(c, "node-1", "controller", rec)
	cfg.Cluster.Topic = c.Name("missing")
	cfg.OnFatal = func(ve *ViewError) {
		assert.False(t, ve.CaughtUp)
		rec.mu.Lock()
		rec.seen = append(rec.seen, "fatal")
		rec.mu.Unlock()
	}
	sess, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var worked atomic.Bool
	err = sess.Run(ctx, func(context.Context, processor.Held) error { worked.Store(true); return nil })
	var ve *ViewError
	require.ErrorAs(t, err, &ve)
	assert.False(t, ve.CaughtUp)
	assert.ErrorIs(t, err, sarama.ErrUnknownTopicOrPartition)
	require.NoError(t, ctx.Err(), "Run returned because the view failed, not because ctx ended")
	seen, _ := rec.snapshot()
	assert.Equal(t, []string{"fatal"}, seen, "neither OnReady nor any event")
	assert.False(t, worked.Load())
}

// failingView is the view with a fatal error on demand.
type failingView struct {
	viewRunner
	fail chan error
}

func (f *failingView) Run(ctx context.Context) error {
	vctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.viewRunner.Run(vctx) }()
	select {
	case err := <-f.fail:
		cancel()
		<-done
		return err
	case err := <-done:
		cancel()
		return err
	}
}

// A fatal error of the view after the start ends the member as if ctx had
// ended: its work is cancelled and returns, it resigns, and Run returns
// the error as a ViewError that had caught up.
func TestSessionViewFailureEndsTheMember(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	const role = codec.Role("controller")
	rec := newRecorder()
	cfg := config(c, "node-1", role, rec)
	var fatals []*ViewError
	cfg.OnFatal = func(ve *ViewError) {
		fatals = append(fatals, ve)
		rec.mu.Lock()
		rec.seen = append(rec.seen, "fatal")
		rec.mu.Unlock()
	}
	sess, err := New(cfg)
	require.NoError(t, err)
	fv := &failingView{viewRunner: sess.vr, fail: make(chan error, 1)}
	sess.vr = fv

	var workDone atomic.Bool
	runDone := make(chan error, 1)
	go func() {
		runDone <- sess.Run(context.Background(), func(ctx context.Context, _ processor.Held) error {
			<-ctx.Done()
			workDone.Store(true)
			return nil
		})
	}()
	elected := rec.waitKind(t, processor.Elected)
	boom := errors.New("boom")
	fv.fail <- boom
	select {
	case err := <-runDone:
		var ve *ViewError
		require.ErrorAs(t, err, &ve)
		assert.True(t, ve.CaughtUp)
		assert.ErrorIs(t, err, boom)
	case <-time.After(waitFor):
		t.Fatal("Run did not return after the view failed")
	}
	assert.True(t, workDone.Load(), "the work was cancelled and returned before Run did")
	seen, evs := rec.snapshot()
	require.Len(t, fatals, 1)
	assert.True(t, fatals[0].CaughtUp)
	assert.ErrorIs(t, fatals[0], boom)
	assert.Equal(t, []string{"fatal", "revoked"}, seen[len(seen)-2:], "OnFatal comes before the member leaves: %v", seen)
	last := evs[len(evs)-1]
	for i := len(evs) - 1; i >= 0 && last.Kind != processor.Revoked; i-- {
		last = evs[i]
	}
	require.Equal(t, processor.Revoked, last.Kind, "events: %v", evs)
	assert.Equal(t, processor.ReasonContextEnded, last.Reason)
	assert.Equal(t, elected.Token, last.Token)
	// The release went out through the transport, still open then.
	st := readRole(t, c, role)
	require.NotNil(t, st.Lease)
	assert.True(t, released(st), "the member resigned: %+v", st.Lease)
}

func TestNewValidates(t *testing.T) {
	good := Config{Cluster: fencing.Config{Brokers: []string{"127.0.0.1:1"}}, Member: "a", Roles: []codec.Role{"r"}}
	for name, tc := range map[string]struct {
		edit func(*Config)
		is   error
		msg  string // in the error, when set
	}{
		// Refused before it connects (no broker answers at good's address).
		"a role twice":         {func(c *Config) { c.Roles = []codec.Role{"r", "s", "r"} }, nil, "role r given twice"},
		"bad member":           {func(c *Config) { c.Member = "a b" }, codec.ErrInvalid, ""},
		"no roles":             {func(c *Config) { c.Roles = nil }, nil, ""},
		"bad role":             {func(c *Config) { c.Roles = []codec.Role{"a/b"} }, codec.ErrInvalid, ""},
		"impossible settings":  {func(c *Config) { c.Settings.HeartbeatInterval = time.Minute }, processor.ErrInvalidSettings, ""},
		"group without member": {func(c *Config) { c.Member, c.Roles, c.Group = "", nil, &processor.Group{Name: "g"} }, nil, "Config.Group \"g\" without a Config.Member"},
		"bad group name":       {func(c *Config) { c.Group = &processor.Group{Name: "a/b"} }, codec.ErrInvalid, "Config.Group"},
		"negative limit":       {func(c *Config) { c.Group = &processor.Group{Name: "g", Limit: -1} }, nil, "limit -1"},
		"too heavy":            {func(c *Config) { c.Group = &processor.Group{Name: "g", Weight: codec.MaxWeight + 1} }, nil, "weight 1001"},
		"no broker answers":    {func(*Config) {}, fencing.ErrClient, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			s, err := New(cfg)
			require.Error(t, err)
			assert.Nil(t, s)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is, fmt.Sprint(err))
			}
			if tc.msg != "" {
				assert.Contains(t, err.Error(), tc.msg)
				assert.NotErrorIs(t, err, fencing.ErrClient, "refused before connecting")
			}
		})
	}
}

// election.New checks the settings before it connects, with the one list
// processor.New checks them with: both refuse the same settings with the
// same error, and so does a session without a member, which makes no
// processor.Member.
func TestNewRefusesTheSettingsProcessorNewRefuses(t *testing.T) {
	for _, s := range []processor.Settings{
		{HeartbeatInterval: time.Minute},
		{LeaseDuration: time.Millisecond},
		{LeaseDuration: time.Hour},
		{Stagger: -time.Second},
		{HeartbeatDeadline: 11 * time.Second},
		{RetryBackoff: 3 * time.Second},
		{TransactionTimeout: 8 * time.Second},
	} {
		_, want := processor.ValidateMember("a", []codec.Role{"r"}, s)
		require.ErrorIs(t, want, processor.ErrInvalidSettings, "%+v", s)
		member := Config{Cluster: fencing.Config{Brokers: []string{"127.0.0.1:1"}}, Member: "a", Roles: []codec.Role{"r"}, Settings: s}
		reader := Config{Cluster: member.Cluster, Settings: s}
		for _, cfg := range []Config{member, reader} {
			sess, err := New(cfg)
			assert.Nil(t, sess)
			assert.EqualError(t, err, want.Error(), "member %q", cfg.Member)
		}
	}
}

// A Session closed without being run releases its connection and does
// not run afterwards.
func TestCloseWithoutRun(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	sess, err := New(config(c, "node-1", "controller", newRecorder()))
	require.NoError(t, err)
	require.NoError(t, sess.Close())
	assert.ErrorIs(t, sess.Run(context.Background(), nil), ErrAlreadyRun)
	_, _, err = sess.Transport().Describe(context.Background(), "controller")
	assert.Error(t, err, "closed")
}

// A first catch-up whose probe fails (every ListOffsets answered
// NOT_LEADER_OR_FOLLOWER, as during a leader election of the role topic's
// partition) is tried again: Run neither returns nor starts the member
// while it fails, and once the brokers answer again the session catches
// up, calls OnReady and the member takes the role.
func TestSessionRetriesAFailedFirstCatchUp(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	c.RequireFake(t)
	h := c.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Err: kerr.NotLeaderForPartition, Count: -1})
	rec := newRecorder()
	cfg := config(c, "node-1", "controller", rec)
	sess, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sess.Run(ctx, nil) }()

	// One probe tries three times; wait for a second probe's attempts.
	require.Eventually(t, func() bool { return h.Hits() >= 7 }, waitFor, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned while the probe failed: %v", err)
	default:
	}
	seen, _ := rec.snapshot()
	assert.Empty(t, seen, "not ready, no member events, while the probe fails")

	h.Remove()
	rec.waitKind(t, processor.Elected) // the member starts once the catch-up succeeds
	seen, _ = rec.snapshot()
	assert.Equal(t, "ready", seen[0])
	cancel()
	require.NoError(t, <-done)
}
