package processor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// Forged releases: three members of a role; a stranger commits a
// release of the role every few hundred milliseconds, from an
// application's transactional id and from another role's (krole.other),
// each naming the stranger's own producer id and epoch (so the record
// batch matches the lease). None counts (the view skips a lease whose
// producer id the coordinator does not name for the role): over several
// lease durations the holder and its token do not change, and nobody else
// is elected. A release that counted would show the role vacant, and the
// candidates would challenge, fencing the live holder.
func TestIntegrationForgedReleasesCauseNoElections(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("forged-releases")
	s := itSettings()
	a, b, tok := e.holderAndCandidate(role, s)
	c := e.candidate("node-c", role, s, nil)
	e.awaitLive(role, a, b, c)

	forgers := []*forger{newForger(t, e, "app-orders"), newForger(t, e, e.c.Config.TransactionalID("other"))}
	until := time.Now().Add(3 * s.LeaseDuration)
	n := 0
	for time.Now().Before(until) {
		f := forgers[n%len(forgers)]
		f.commit(role, codec.ReleaseLease(a.id, f.tok))
		n++
		time.Sleep(s.HeartbeatInterval / 2) // the forger's pace, on purpose
	}
	// Every member's view has read every forged release; then two
	// heartbeat intervals on purpose, in which a challenge one provoked
	// would show.
	for _, m := range []*node{a, b, c} {
		require.NoError(t, m.src.WaitCaughtUp(e.ctx(10*time.Second)))
	}
	time.Sleep(2 * s.HeartbeatInterval)
	assert.Equal(t, map[codec.MemberID]codec.Token{a.id: tok}, e.rec.holders(role), "the holder keeps the role under its token")
	assert.Len(t, e.rec.find(processor.Elected, role, func(stamped) bool { return true }), 1, "no election after the first (%d forged releases)", n)
	assert.Equal(t, tok, e.describe(role))
	e.agree(role, a.id, tok)
	skipped := e.obs.Stats().Skipped["forged"]
	assert.GreaterOrEqual(t, skipped, int64(n), "each forged release is skipped and counted")
	e.rec.checkFence(t)
}

// A forged ghost lease: the holder dies (it leaves without a release);
// a stranger then commits, under the transactional id of another role
// (krole.other), one lease of the role naming a member "ghost" and a
// 10-minute span. It does not count: the candidate is elected within the
// crash failover's bound, and the table never names the ghost. A lease
// that counted would keep everyone from being elected while it ran.
func TestIntegrationForgedGhostLeaseDoesNotStopSuccession(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("forged-ghost")
	s := itSettings()
	s.KeepOnExit = true
	a, b, _ := e.holderAndCandidate(role, s)
	e.awaitLive(role, a, b)

	f := newForger(t, e, e.c.Config.TransactionalID("other"))
	crashed := time.Now()
	a.stop(t)()
	now := time.Now()
	ghost, err := codec.NewLease("ghost", f.tok, now.UnixMilli(), now.Add(10*time.Minute).UnixMilli())
	require.NoError(t, err)
	f.commit(role, ghost)

	el := awaitElected(t, e.rec, role, b.id, crashed, s.LeaseDuration+s.Stagger+slack)
	e.agree(role, b.id, el.Token)
	st := e.state(role)
	require.NotNil(t, st.Lease)
	assert.NotEqual(t, codec.MemberID("ghost"), st.Lease.Member)
	assert.GreaterOrEqual(t, e.obs.Stats().Skipped["forged"], int64(1), "the ghost lease is skipped and counted")
	e.rec.checkFence(t)
}
