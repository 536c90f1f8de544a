package processor_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// txnIDExpiration is the brokers' transactional.id.expiration.ms while
// TestIntegrationTransactionalIDExpiry lets ids expire: longer than the
// holder's heartbeat interval, so its member session's transactional id,
// written every heartbeat interval, stays, and its role's transactional id,
// written only at its election (a holder writes its lease again only on
// RewriteLease and every processor.LeaseRewriteInterval), expires.
const txnIDExpiration = 1500 * time.Millisecond

// setTxnIDExpiration sets the brokers' transactional.id.expiration.ms to
// d, or back to the default (7 days) when d is 0.
func setTxnIDExpiration(t *testing.T, c *testcluster.Cluster, d time.Duration) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(c.Config.Brokers, c.Sarama(t))
	require.NoError(t, err)
	defer admin.Close()
	e := sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationDelete}
	if d > 0 {
		v := strconv.Itoa(int(d.Milliseconds()))
		e = sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}
	}
	require.NoError(t, admin.IncrementalAlterConfig(sarama.BrokerResource, "",
		map[string]sarama.IncrementalAlterConfigsEntry{"transactional.id.expiration.ms": e}, false))
}

// A role's transactional id expires (transactional.id.expiration.ms: an id
// idle that long, with no open transaction, is forgotten; kfake implements
// it, txns.go expireTransactionalIDs) under its holder: the holder renews
// its roles with its member session's heartbeats, under the session's own
// transactional id, and writes under the role's only at its election, on
// RewriteLease and hourly. (With the default expiration of 7 days the hourly
// rewrite keeps the role's id; here the test shortens the expiration
// while node-a holds.) Then:
//
//   - the holder's next session round, whose DescribeMany finds no
//     producer for the role's transactional id, ends its holding as a
//     fence: Revoked (fenced), not a lapse at its HeartbeatDeadline, and that
//     round's heartbeat, and each after it until the new lease, excludes
//     the role (a heartbeat vouching for the fenced lease would show a
//     fenced holder live);
//   - nobody took the role, so node-a takes its own lease back at once
//     (rule 5; TestExpiredTransactionalIDTakesTheRoleBackAtOnce pins the
//     rule, TestTakingTheRoleBackAndLosingTheRaceWaits its race with a
//     candidate queued behind);
//   - the new token is epoch 0 of the forgotten id. Apache Kafka and
//     Redpanda give it a new producer id; kfake reuses the old one (it
//     hashes the transactional id), so here it equals the old token.
//     Either way codec.Token.Newer does not call it newer: what orders the
//     holdings is the lease offset (rolestate: a role's lease is its latest
//     lease record in the role topic);
//   - the view shows node-a's new lease, at a higher offset than its old
//     one, and Describe names the new token; a member started afterwards,
//     on a view of its own, sees node-a holding and queues behind it.
//
// The expiration is short only from node-a's first holding to its
// revocation, and back to the default at once: the new holding's role id,
// idle after its election too, would otherwise expire in turn.
func TestIntegrationTransactionalIDExpiry(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	c := e.c
	c.RequireFake(t)

	role := codec.Role("expiring")
	// Heartbeats every 400ms (< txnIDExpiration: the session's id stays).
	s := itSettings()
	s.LeaseDuration = 6 * time.Second
	s.HeartbeatDeadline = 4800 * time.Millisecond
	require.NoError(t, s.Validate())

	a, tokA := e.holder("node-a", role, s, nil)
	aLease := e.state(role)
	require.NotNil(t, aLease.Lease)
	require.Equal(t, a.id, aLease.Lease.Member)
	shortened := time.Now()
	setTxnIDExpiration(t, c, txnIDExpiration)

	// node-a's session round after the expiry finds the role's id gone:
	// revoked, fenced.
	rev := awaitRevoked(t, e.rec, role, a.id, txnIDExpiration+s.HeartbeatDeadline+slack, "node-a revoked")
	setTxnIDExpiration(t, c, 0)
	assert.Equal(t, processor.ReasonFenced, rev.Reason, "the session's round ends the holding as a fence, not a lapse: %v", rev.Err)
	assert.True(t, fencing.IsFenced(rev.Err), "%v", rev.Err)
	assert.Equal(t, tokA, rev.Token)
	assert.True(t, rev.Got.After(shortened), "revoked once ids could expire")
	t.Logf("node-a: elected under %s, revoked %v after ids could expire", tokA, rev.Got.Sub(shortened).Round(time.Millisecond))

	// node-a takes the role back under epoch 0 of the forgotten
	// transactional id.
	el := awaitElected(t, e.rec, role, a.id, rev.Got, s.LeaseDuration+10*time.Second)
	tokA2 := el.Token
	t.Logf("old token %s, new token %s, elected again %v after the revocation", tokA, tokA2, el.Got.Sub(rev.Got).Round(time.Millisecond))
	assert.Equal(t, int16(0), tokA2.Epoch, "the forgotten transactional id starts again at epoch 0")
	// Apache Kafka and Redpanda give the new token a new producer id,
	// which Token.Newer does not order against the old one. kfake derives
	// the producer id from the transactional id (an FNV hash), so here the
	// new token has the old producer id: equal to the old token when that
	// was at epoch 0 too, older by Newer otherwise. Neither way does
	// Token.Newer say the new token is the newer one.
	assert.Equal(t, tokA.ProducerID, tokA2.ProducerID, "kfake: the producer id is the transactional id's hash")
	assert.False(t, tokA2.Newer(tokA), "the new token is not Newer than the old one")

	// What orders the two holdings is the lease offset: the view shows
	// node-a's new lease, written after its old one; Describe names the
	// new token. The fencing numbers, the offsets of the two holdings'
	// first leases, say so to targets outside Kafka.
	e.agree(role, a.id, tokA2)
	st := e.state(role)
	assert.Greater(t, st.LeaseOffset, aLease.LeaseOffset, "the new lease is later in the role topic")
	first := e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member == a.id })[0]
	assert.Equal(t, aLease.Fence(), first.Fence, "the first holding's number, as the view gives it")
	assert.Equal(t, rev.Fence, first.Fence, "Revoked carries the holding's number")
	assert.Greater(t, el.Fence, first.Fence, "taking the lease back is a new holding, with a greater number")
	assert.Equal(t, el.Fence, st.Fence(), "the view gives the new holding's number")
	h, ok := st.Holder(time.Now().UnixMilli())
	assert.True(t, ok)
	assert.Equal(t, a.id, h.Member, "the view's holder")

	// Between the revocation and the new lease write, node-a's heartbeats
	// excluded the role: none vouched for the fenced lease. (Each that
	// ended after the revocation was composed by the round that learned
	// of it, or a later one: rounds run one at a time.)
	e.rec.mu.Lock()
	beats := 0
	var newStart time.Time
	for _, w := range e.rec.writes {
		if w.Role == role && w.Member == a.id && w.Start.After(rev.Got) && newStart.IsZero() {
			newStart = w.Start
		}
	}
	for _, hb := range e.rec.beats {
		if hb.hb.Member == a.id && !hb.hb.End && hb.end.After(rev.Got) && hb.end.Before(newStart) {
			beats++
			assert.Contains(t, hb.hb.Excluded, role, "node-a's heartbeat after its loss excludes the role")
		}
	}
	e.rec.mu.Unlock()
	require.False(t, newStart.IsZero(), "node-a's new lease write is recorded")
	t.Logf("node-a: %d heartbeats ended between its loss and its new lease write, each excluding the role", beats)

	// A member started now, on a view of its own, sees node-a holding
	// under the new lease and queues behind it.
	b := e.start("node-b", []codec.Role{role}, s, nil)
	await(t, 10*time.Second, "node-b queued behind node-a", func() bool {
		return slices.Equal(e.candidates(role), []codec.MemberID{a.id, b.id})
	})
	await(t, 10*time.Second, "node-b sees node-a holding", func() bool {
		seen := e.rec.find(processor.HolderChanged, role, func(ev stamped) bool { return ev.Member == b.id })
		if len(seen) == 0 {
			return false
		}
		h := seen[len(seen)-1].Holder
		return h != nil && h.Member == a.id && h.Token == tokA2
	})
	assert.Equal(t, map[codec.MemberID]codec.Token{a.id: tokA2}, e.rec.holders(role), "node-a is the only holder")
}
