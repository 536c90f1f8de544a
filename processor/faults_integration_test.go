package processor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// offsetClock is the system clock set off by a fixed offset: a machine
// whose wall clock is wrong. Its timers run at the system clock's rate.
type offsetClock struct{ off time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.off) }
func (c offsetClock) NewTimer(d time.Duration) processor.Timer {
	return processor.SystemClock().NewTimer(d)
}
func (c offsetClock) AfterFunc(d time.Duration, f func()) processor.Timer {
	return processor.SystemClock().AfterFunc(d, f)
}

// Members whose wall clocks are a minute apart either way: the candidate
// judges the holder's lease on its own clock, from when it observed each
// renewal, so it neither challenges the healthy holder early (a holder
// behind writes deadlines that are already past on the candidate's clock)
// nor waits more than one lease after the holder dies (a holder ahead
// writes deadlines a minute into the candidate's future).
func TestIntegrationClockSkewNeitherEarlyNorLate(t *testing.T) {
	for _, c := range []struct {
		name              string
		holder, candidate time.Duration
	}{
		{"holder ahead", time.Minute, -time.Minute},
		{"holder behind", -time.Minute, time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, itTxnTimeout)
			role := codec.Role("skewed")
			s := itSettings()
			s.KeepOnExit = true
			a, _ := e.holder("node-a", role, s, nil, onClock(offsetClock{c.holder}))
			b := e.start("node-b", []codec.Role{role}, s, nil, onClock(offsetClock{c.candidate}))
			e.awaitCandidate(role, b.id)

			// Healthy: node-a renews; node-b must not take the role
			// during three leases (a window on purpose).
			time.Sleep(3 * s.LeaseDuration)
			assert.Empty(t, e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member == b.id }),
				"node-b challenged a healthy holder")
			assert.Empty(t, e.rec.find(processor.Revoked, role, nil), "node-a lost the role while healthy")

			// node-a dies: node-b takes over within a lease (+ Stagger and
			// slack) of its last renewal.
			crashed := time.Now()
			a.stop(t)()
			last, ok := e.rec.lastWrite(role, a.id)
			require.True(t, ok)
			el := awaitElected(t, e.rec, role, b.id, crashed, s.LeaseDuration+s.Stagger+slack)
			t.Logf("node-b elected %v after the crash, %v after node-a's last renewal began",
				el.Got.Sub(crashed).Round(time.Millisecond), el.Got.Sub(last.Start).Round(time.Millisecond))
			assert.LessOrEqual(t, el.Got.Sub(last.Start), s.LeaseDuration+s.Stagger+slack, "node-b waited more than a lease")
			assert.GreaterOrEqual(t, el.Got.Sub(last.Start), s.LeaseDuration, "node-b challenged before a lease had passed since the last renewal began")
			e.agree(role, b.id, el.Token)
			e.rec.checkFence(t)
		})
	}
}

// No election storm behind a frozen partition: the holder of role A
// crashed in the middle of a lease write under a long transaction
// timeout, so its open transaction holds back read_committed readers of
// its partition. Role B, in the same partition with a 2s lease, is
// healthy: its holder's renewals commit but no view shows them until the
// transaction times out. B's candidate finds B's lease expired on its
// clock, but its confirmation shows the partition held back by a producer
// other than B's: it waits.
// The freeze causes at most one handover of B (none is expected).
func TestIntegrationFrozenPartitionCausesNoElectionStorm(t *testing.T) {
	const freeze = 10 * time.Second // A's transaction timeout: five of B's leases
	e := newEnv(t, itTxnTimeout)
	e.c.RequireFake(t) // kfake aborts at the timeout exactly (Apache Kafka up to 10s later)
	s := itSettings()
	roleB := codec.Role("steady")
	parts := int32(3) // testcluster's default
	p := codec.Partition(roleB, parts)
	roleA := roleIn("crashed-%d", p, parts)

	a, tokB := e.holder("node-a", roleB, s, nil)
	b := e.start("node-b", []codec.Role{roleB}, s, nil)
	e.awaitCandidate(roleB, b.id)

	// A's holder, with a transport of its own and a long transaction
	// timeout, takes A and dies in the middle of a lease write: the record
	// is produced, EndTxn is never sent.
	cfgA := e.c.Config
	cfgA.TxnTimeout = freeze
	trA, err := fencing.NewBrokerTransport(cfgA)
	require.NoError(t, err)
	t.Cleanup(func() { _ = trA.Close() })
	tokA, err := trA.AcquireEpoch(e.ctx(10*time.Second), roleA)
	require.NoError(t, err)
	require.NotEqual(t, tokA.ProducerID, tokB.ProducerID)
	l := codec.Lease{Member: "node-x", Token: tokA, GrantedAt: time.Now().UnixMilli(), Deadline: time.Now().Add(freeze).UnixMilli()}
	openAt := e.openLeaseWrite(trA, roleA, p, l)

	// Through the freeze and a few leases after it: a window on purpose,
	// in which a storm would show.
	time.Sleep(freeze + 3*s.LeaseDuration)
	elected := e.rec.find(processor.Elected, roleB, func(ev stamped) bool { return ev.Got.After(openAt) })
	revoked := e.rec.find(processor.Revoked, roleB, nil)
	t.Logf("during and after the freeze: %d elections of %s, %d revocations", len(elected), roleB, len(revoked))
	assert.LessOrEqual(t, len(elected), 1, "an election storm: %d handovers of %s", len(elected), roleB)
	assert.Empty(t, revoked, "node-a lost %s while healthy", roleB)
	holder, tok := e.settled(roleB, 10*time.Second)
	assert.Equal(t, a.id, holder)
	e.agree(roleB, holder, tok)
	e.rec.checkFence(t)
}

// staleSource is a member's source whose view stops moving while frozen
// (a lagging view, or one cut off from the cluster): Role answers the
// state of when it froze and Follow sends nothing, while Confirm still
// asks the partition's leader.
type staleSource struct {
	*view.View
	mu     sync.Mutex
	frozen *rolestate.State
}

func (s *staleSource) freeze(st rolestate.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = &st
}

func (s *staleSource) thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = nil
}

func (s *staleSource) isFrozen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frozen != nil
}

func (s *staleSource) Role(ctx context.Context, role codec.Role) (rolestate.State, error) {
	s.mu.Lock()
	f := s.frozen
	s.mu.Unlock()
	if f != nil {
		return f.Clone(), nil
	}
	return s.View.Role(ctx, role)
}

func (s *staleSource) Follow(ctx context.Context, role codec.Role) <-chan rolestate.State {
	in := s.View.Follow(ctx, role)
	out := make(chan rolestate.State)
	go func() {
		defer close(out)
		for st := range in {
			if s.isFrozen() {
				continue
			}
			select {
			case out <- st:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

// A candidate whose view stops moving (it lags, or is cut off) sees the
// holder's lease expire on its clock. Before it challenges it confirms
// with the partition's leader, finds the renewals it missed, each a lease
// record it has not seen expire, and does not fence the healthy holder.
func TestIntegrationLaggingViewDoesNotFenceAHealthyHolder(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("lagged")
	s := itSettings()
	a, tokA := e.holder("node-a", role, s, nil)

	var src *staleSource
	e.candidate("node-b", role, s, nil, sourceFrom(func(v *view.View) processor.Source {
		src = &staleSource{View: v}
		return src
	}))
	var st rolestate.State
	await(t, 5*time.Second, "node-b's own view shows its registration", func() bool {
		var err error
		st, err = src.View.Role(e.ctx(5*time.Second), role)
		require.NoError(t, err)
		return st.Rank("node-b") >= 0
	})
	src.freeze(st)

	time.Sleep(4 * s.LeaseDuration) // on purpose: the frozen view sees the lease expire
	assert.Empty(t, e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member == "node-b" }),
		"node-b challenged a healthy holder from its stale view")
	assert.Empty(t, e.rec.find(processor.Revoked, role, nil), "node-a lost the role while healthy")
	src.thaw()
	assert.Equal(t, map[codec.MemberID]codec.Token{a.id: tokA}, e.rec.holders(role))
	assert.Equal(t, tokA, e.describe(role))
	e.rec.checkFence(t)
}
