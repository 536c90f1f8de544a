package processor_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// txnIDExpiration is the brokers' transactional.id.expiration.ms in
// TestIntegrationTransactionalIDExpiry: shorter than the first holder's
// renew interval, so the role's transactional id expires between two of
// its renewals, and well above the next holder's, so its id stays.
const txnIDExpiration = 1500 * time.Millisecond

// A role's transactional id expires (transactional.id.expiration.ms: an id
// idle that long, with no open transaction, is forgotten; kfake implements
// it, txns.go expireTransactionalIDs) while its holder is idle between
// renewals. Then:
//
//   - the holder's next renewal, under the old token, is refused (kfake
//     answers INVALID_PRODUCER_ID_MAPPING; Redpanda may answer
//     TRANSACTIONAL_ID_NOT_FOUND or UNKNOWN_PRODUCER_ID; all read as
//     fenced) and its holding ends at once: Revoked (fenced) at that
//     renewal, before its RenewDeadline;
//   - the next holder's token is epoch 0 of the forgotten id. Apache Kafka
//     and Redpanda give it a new producer id; kfake reuses the old one
//     (it hashes the transactional id), so here it equals the old token.
//     Either way codec.Token.Newer does not call it newer: what orders the
//     holdings is the lease offset (rolestate: a role's lease is its latest
//     lease record in the role topic);
//   - the view shows the new holder's lease, at a higher offset than the
//     old holder's last one, the new holder holding and ranked first, and
//     Describe names the new token.
func TestIntegrationTransactionalIDExpiry(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{BrokerConfigs: map[string]string{
		"transactional.id.expiration.ms": strconv.Itoa(int(txnIDExpiration.Milliseconds())),
	}})
	c.RequireFake(t)
	c.Config.TxnTimeout = itTxnTimeout
	e := &env{t: t, c: c, rec: &recorder{}}
	e.probe = e.transport()
	e.obs = e.view()

	role := codec.Role("expiring")
	// node-a renews every 3s (> txnIDExpiration: its id expires between
	// renewals), node-b every 400ms (its id stays while it holds).
	s := itSettings()
	s.LeaseDuration = 6 * time.Second
	s.RenewInterval = 3 * time.Second
	s.RenewDeadline = 4800 * time.Millisecond
	require.NoError(t, s.Validate())
	sb := s
	sb.RenewInterval = 400 * time.Millisecond
	require.NoError(t, sb.Validate())

	a := e.start("node-a", []codec.Role{role}, s, nil)
	holder, tokA := e.soleHolder(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	b := e.start("node-b", []codec.Role{role}, sb, nil)
	e.awaitCandidate(role, b.id)

	// node-a's renewal after the expiry is refused: revoked, fenced.
	var rev stamped
	await(t, s.RenewDeadline+slack, "node-a revoked", func() bool {
		evs := e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == a.id })
		if len(evs) == 0 {
			return false
		}
		rev = evs[0]
		return true
	})
	assert.Equal(t, processor.ReasonFenced, rev.Reason, "the refused renewal ends the holding as a fence: %v", rev.Err)
	assert.True(t, fencing.IsFenced(rev.Err), "%v", rev.Err)
	assert.Equal(t, tokA, rev.Token)
	last, ok := e.rec.lastWrite(role, a.id)
	require.True(t, ok)
	assert.Equal(t, tokA, last.Token)
	assert.False(t, last.Lease.Released())
	t.Logf("node-a: elected under %s, revoked %v after its last accepted write ended", tokA, rev.Got.Sub(last.End).Round(time.Millisecond))
	assert.Less(t, rev.At.Sub(last.Start), s.RenewDeadline,
		"revoked at the refused renewal, not at the renew deadline after its last accepted write")
	assert.LessOrEqual(t, rev.Got.Sub(last.End), s.RenewInterval+s.TransactionTimeout+slack,
		"revoked at the first renewal after the expiry")
	aLease := e.state(role)
	require.NotNil(t, aLease.Lease)
	require.Equal(t, a.id, aLease.Lease.Member, "nobody wrote a lease after node-a's last")

	// The next holder: node-b, first in line, once node-a's lease has run
	// out; its token is epoch 0 of the forgotten transactional id.
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

	// node-a wrote nothing after its refused renewal; every write of
	// node-a the broker accepted ended before node-b's token was minted.
	last2, _ := e.rec.lastWrite(role, a.id)
	assert.Equal(t, last, last2, "no accepted write of node-a after the refused renewal")
	assert.True(t, last.End.Before(el.At), "node-a's last accepted write ended before node-b was elected")
}
