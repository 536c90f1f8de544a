package election

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// offsetClock is the system clock set d ahead (behind when d < 0), as on
// a machine whose wall clock is off: its timers are the system's.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }
func (offsetClock) NewTimer(d time.Duration) processor.Timer {
	return processor.SystemClock().NewTimer(d)
}
func (offsetClock) AfterFunc(d time.Duration, f func()) processor.Timer {
	return processor.SystemClock().AfterFunc(d, f)
}

// manualClock reads a time that moves only when the test advances it; its
// timers are the system's, so the member still wakes, but everything it
// judges by Now (and the view's stamps) stands still.
type manualClock struct{ ns atomic.Int64 }

func newManualClock(t time.Time) *manualClock {
	c := &manualClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *manualClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (*manualClock) NewTimer(d time.Duration) processor.Timer {
	return processor.SystemClock().NewTimer(d)
}
func (*manualClock) AfterFunc(d time.Duration, f func()) processor.Timer {
	return processor.SystemClock().AfterFunc(d, f)
}

// runSession runs s until the test ends; the returned function ends its
// Run and waits for it.
func runSession(t *testing.T, s *Session) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err)
			case <-time.After(waitFor):
				t.Errorf("Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// A Session with Config.Clock set an hour ahead stamps its leases and its
// events with that clock, and its view stamps what it applies with it;
// OnMinted reports the token before any lease under it is written.
func TestSessionClockStampsLeases(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	role := codec.Role("clocked")
	rec := newRecorder()
	cfg := config(c, "ahead", role, rec)
	const skew = time.Hour
	cfg.Clock = offsetClock{skew}
	var (
		mu     sync.Mutex
		minted []codec.Token
	)
	cfg.OnMinted = func(r codec.Role, tok codec.Token) {
		assert.Equal(t, role, r)
		// Nothing is written under the token yet.
		st := readRole(t, c, role)
		if st.Lease != nil {
			assert.NotEqual(t, tok, st.Lease.Token, "a lease under the token before OnMinted returned")
		}
		mu.Lock()
		minted = append(minted, tok)
		mu.Unlock()
	}
	s, err := New(cfg)
	require.NoError(t, err)
	before := time.Now()
	runSession(t, s)
	e := rec.waitKind(t, processor.Elected)

	mu.Lock()
	assert.Equal(t, []codec.Token{e.Token}, minted, "the one token minted is the one elected")
	mu.Unlock()
	assert.False(t, e.At.Before(before.Add(skew)), "the event is stamped by the session's clock")
	st := readRole(t, c, role)
	read := time.Now()
	require.NotNil(t, st.Lease)
	assert.Equal(t, e.Token, st.Lease.Token)
	// The lease read was granted after the session started and before the
	// read returned. GrantedAt is in whole milliseconds (truncated, so the
	// order of the instants is kept, not made strict): a renewal granted in
	// the millisecond the read returned is equal to it, not less.
	assert.GreaterOrEqual(t, st.Lease.GrantedAt, before.Add(skew).UnixMilli(), "GrantedAt is the session's clock")
	assert.LessOrEqual(t, st.Lease.GrantedAt, read.Add(skew).UnixMilli(), "GrantedAt is the session's clock")
	assert.Equal(t, testSettings.LeaseDuration, rolestate.LeaseSpan(*st.Lease))

	// The view follows the topic with a fetch's lag: wait until it holds
	// everything committed so far, the elected lease included.
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.View().WaitCaughtUp(wctx))
	vs, err := s.View().Role(context.Background(), role)
	require.NoError(t, err)
	require.NotNil(t, vs.Lease)
	// The view saw the lease after the session started and before this
	// lookup; without the skew both bounds would fail by an hour.
	assert.False(t, vs.LeaseSeenAt.Before(before.Add(skew)), "the view stamps by the session's clock")
	assert.False(t, vs.LeaseSeenAt.After(time.Now().Add(skew)), "the view stamps by the session's clock")
	h, err := mustElection(t, s, role).Leader(context.Background())
	require.NoError(t, err)
	assert.Equal(t, codec.MemberID("ahead"), h.Member)
}

func mustElection(t *testing.T, s *Session, role codec.Role) *Election {
	t.Helper()
	e, err := s.Election(role)
	require.NoError(t, err)
	return e
}

// A holder whose clock runs 30 s ahead (or behind) of an observer's is
// the leader, through Election.Leader, for its lease's span from when the
// observer's view saw its last renewal: not 30 s more (its deadline is 30
// s in the observer's future) nor 30 s less (its deadline is already past
// when the observer reads it).
func TestElectionLeaderJudgesFromWhenSeen(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			role := codec.Role("skew" + skew.String())
			ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
			defer cancel()

			keep := testSettings
			keep.KeepOnExit = true // the holder dies without a release
			a, err := New(Config{Cluster: c.Config, Member: "a", Roles: []codec.Role{role}, Settings: keep, Clock: offsetClock{skew}})
			require.NoError(t, err)
			stopA := runSession(t, a)
			_, err = mustElection(t, a, role).Campaign(ctx, "")
			require.NoError(t, err)

			clk := newManualClock(time.Now())
			b, err := New(Config{Cluster: c.Config, Member: "b", Roles: []codec.Role{role}, Settings: testSettings, Clock: clk})
			require.NoError(t, err)
			runSession(t, b)
			eb := mustElection(t, b, role)
			leader := func() codec.MemberID {
				h, err := eb.Leader(ctx)
				if err != nil {
					require.ErrorIs(t, err, ErrNoLeader)
				}
				return h.Member
			}
			require.Eventually(t, func() bool { return leader() == "a" }, waitFor, 10*time.Millisecond,
				"the observer sees the holder as the leader")

			// The holder dies; the observer's view reads its last renewal.
			stopA()
			_, err = b.View().Confirm(ctx, role)
			require.NoError(t, err)
			st, err := b.View().Role(ctx, role)
			require.NoError(t, err)
			require.NotNil(t, st.Lease)
			require.Equal(t, codec.MemberID("a"), st.Lease.Member)
			require.Equal(t, clk.Now(), st.LeaseSeenAt, "stamped by the observer's clock")
			span := rolestate.LeaseSpan(*st.Lease)
			require.Equal(t, testSettings.LeaseDuration, span)

			assert.Equal(t, codec.MemberID("a"), leader(), "just seen")
			clk.Advance(span - time.Millisecond)
			assert.Equal(t, codec.MemberID("a"), leader(), "a millisecond before its span from when seen")
			clk.Advance(time.Millisecond)
			assert.NotEqual(t, codec.MemberID("a"), leader(), "its span from when seen has passed")
		})
	}
}

// One role's registration in flight does not hold back another role's
// (the chaos member runs 20 roles on one Session): the lock that keeps a
// role's last registration carrying its latest value is per role.
func TestRegistrationsOfRolesDoNotWaitForEachOther(t *testing.T) {
	v := &values{def: "x"}
	inA, releaseA := make(chan struct{}), make(chan struct{})
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		_, _ = v.register("a", func(string) (int64, error) {
			close(inA)
			<-releaseA
			return 0, nil
		})
	}()
	<-inA
	doneB := make(chan string, 1)
	go func() {
		_, _ = v.register("b", func(value string) (int64, error) { doneB <- value; return 1, nil })
	}()
	select {
	case got := <-doneB:
		assert.Equal(t, "x", got)
	case <-time.After(waitFor):
		t.Fatal("role b's registration waited for role a's")
	}
	close(releaseA)
	<-doneA
}
