package processor_test

import (
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
// holder's renew interval, so its member session's transactional id,
// written every renew interval, stays, and its role's transactional id,
// written only at its election (a holder writes its lease again only on
// RenewNow and every processor.LeaseRewriteInterval), expires.
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
// RenewNow and hourly. (With the default expiration of 7 days the hourly
// rewrite keeps the role's id; here the test shortens the expiration
// while node-a holds.) Then:
//
//   - the holder's next session round, whose DescribeMany finds no token
//     for the role at its coordinator, ends its holding as a fence:
//     Revoked (fenced), not a lapse at its RenewDeadline;
//   - the next holder's token is epoch 0 of the forgotten id. Apache Kafka
//     and Redpanda give it a new producer id; kfake reuses the old one
//     (it hashes the transactional id), so here it equals the old token.
//     Either way codec.Token.Newer does not call it newer: what orders the
//     holdings is the lease offset (rolestate: a role's lease is its latest
//     lease record in the role topic);
//   - the view shows the new holder's lease, at a higher offset than the
//     old holder's last one, the new holder holding and ranked first, and
//     Describe names the new token.
//
// The expiration is short only from node-a's holding to its revocation,
// and back to the default before node-b starts: node-b's role id, idle
// after its election too, would otherwise expire under it, whenever the
// checks after its election took longer than the expiration (as they can
// on a loaded machine), and the test would see node-b fenced in turn.
func TestIntegrationTransactionalIDExpiry(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	c.Config.TxnTimeout = itTxnTimeout
	e := &env{t: t, c: c, rec: &recorder{}}
	e.probe = e.transport()
	e.obs = e.view()

	role := codec.Role("expiring")
	// Heartbeats every 400ms (< txnIDExpiration: the session's id stays);
	// a lease of 6s, so that node-a, once fenced, does not challenge again
	// (for a lease duration, see "The rules") before node-b, started
	// after the loss, has taken the role.
	s := itSettings()
	s.LeaseDuration = 6 * time.Second
	s.RenewDeadline = 4800 * time.Millisecond
	require.NoError(t, s.Validate())

	a := e.start("node-a", []codec.Role{role}, s, nil)
	holder, tokA := e.soleHolder(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	shortened := time.Now()
	setTxnIDExpiration(t, c, txnIDExpiration)

	// node-a's session round after the expiry finds the role's token gone:
	// revoked, fenced.
	var rev stamped
	await(t, txnIDExpiration+s.RenewDeadline+slack, "node-a revoked", func() bool {
		evs := e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == a.id })
		if len(evs) == 0 {
			return false
		}
		rev = evs[0]
		return true
	})
	setTxnIDExpiration(t, c, 0)
	assert.Equal(t, processor.ReasonFenced, rev.Reason, "the session's round ends the holding as a fence, not a lapse: %v", rev.Err)
	assert.True(t, fencing.IsFenced(rev.Err), "%v", rev.Err)
	assert.Equal(t, tokA, rev.Token)
	assert.True(t, rev.Got.After(shortened), "revoked once ids could expire")
	// node-a's last renewal: its election's lease write, or the last
	// heartbeat of its session that vouched for the role.
	last, ok := e.rec.lastWrite(role, a.id)
	require.True(t, ok)
	aWrites := 0
	e.rec.mu.Lock()
	for _, w := range e.rec.writes {
		if w.Role == role && w.Member == a.id {
			aWrites++
		}
	}
	e.rec.mu.Unlock()
	assert.Equal(t, tokA, last.Token)
	assert.False(t, last.Lease.Released())
	t.Logf("node-a: elected under %s, revoked %v after ids could expire", tokA, rev.Got.Sub(shortened).Round(time.Millisecond))
	aLease := e.state(role)
	require.NotNil(t, aLease.Lease)
	require.Equal(t, a.id, aLease.Lease.Member, "nobody wrote a lease after node-a's last")
	b := e.start("node-b", []codec.Role{role}, s, nil)

	// The next holder: node-b (node-a, fenced, waits); its token is epoch
	// 0 of the forgotten transactional id.
	el := awaitElected(t, e.rec, role, b.id, rev.Got, s.LeaseDuration+s.Stagger+10*time.Second)
	tokB := el.Token
	t.Logf("old token %s, new token %s", tokA, tokB)
	assert.Equal(t, int16(0), tokB.Epoch, "the forgotten transactional id starts again at epoch 0")
	// Apache Kafka and Redpanda give the new token a new producer id,
	// which Token.Newer does not order against the old one. kfake derives
	// the producer id from the transactional id (an FNV hash), so here the
	// new token has the old producer id: equal to the old token when that
	// was at epoch 0 too, older by Newer otherwise. Neither way does
	// Token.Newer say the new token is the newer one.
	assert.Equal(t, tokA.ProducerID, tokB.ProducerID, "kfake: the producer id is the transactional id's hash")
	assert.False(t, tokB.Newer(tokA), "the new token is not Newer than the old one")

	// What orders the two holdings is the lease offset: the view shows
	// node-b's lease, written after node-a's last one, and node-b holding
	// and ranked first; Describe names node-b's token.
	e.agree(role, b.id, tokB)
	st := e.state(role)
	assert.Greater(t, st.LeaseOffset, aLease.LeaseOffset, "the new holder's lease is later in the role topic")
	h, ok := st.Holder(time.Now().UnixMilli())
	assert.True(t, ok)
	assert.Equal(t, b.id, h.Member, "the view's holder")
	// node-a, fenced, did not challenge in its turn: the winner prunes it
	// and it registers again at the back (asynchronously, after the
	// election), so the holder comes to rank first.
	await(t, 10*time.Second, "node-b, the holder, ranks first", func() bool {
		cs := e.candidates(role)
		return len(cs) > 0 && cs[0] == b.id
	})
	assert.Equal(t, map[codec.MemberID]codec.Token{b.id: tokB}, e.rec.holders(role), "node-b is the only holder")

	// node-a renewed nothing after its loss: it wrote no lease, and each
	// heartbeat of its session that began after the revocation and ended
	// before node-b's lease write began excluded the role (once node-b's
	// lease shows, the role's lease is node-b's, and node-a's heartbeats
	// stop excluding it: lastWrite, which would count them as renewals of
	// node-a's lease, is not asked again). node-a's last renewal ended
	// before node-b's token was minted.
	e.rec.mu.Lock()
	writes, beats := 0, 0
	var bStart time.Time
	for _, w := range e.rec.writes {
		if w.Role == role && w.Member == a.id {
			writes++
		}
		if w.Role == role && w.Member == b.id && w.Token == tokB && bStart.IsZero() {
			bStart = w.Start
		}
	}
	for _, hb := range e.rec.beats {
		if hb.hb.Member == a.id && !hb.hb.End && hb.start.After(rev.Got) && hb.end.Before(bStart) {
			beats++
			assert.Contains(t, hb.hb.Excluded, role, "node-a's heartbeat after its loss excludes the role")
		}
	}
	e.rec.mu.Unlock()
	require.False(t, bStart.IsZero(), "node-b's lease write is recorded")
	assert.Equal(t, aWrites, writes, "no lease write of node-a after its loss")
	t.Logf("node-a: %d heartbeats between its loss and node-b's lease write, each excluding the role", beats)
	assert.True(t, last.End.Before(el.At), "node-a's last renewal ended before node-b was elected")
}
