package fencing_test

// Tests of what real brokers answer where kfake answers otherwise. kfake's
// fault controls make it answer as Apache Kafka or Redpanda would; each
// test names the source it follows.

import (
	"context"
	"fmt"
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
)

// fenceAnswers are the answers of real brokers to a write under a token
// that is no longer current, at the request that gets them:
//   - INVALID_PRODUCER_EPOCH (47) to a stale produce: Apache Kafka
//     (core/src/main/scala/kafka/log/UnifiedLog.scala and
//     storage/.../ProducerAppendInfo.java, checkProducerEpoch) and Redpanda
//     (src/v/cluster/rm_stm.cc) answer it where kfake answers
//     INVALID_TXN_STATE; older coordinators answer it to EndTxn too.
//   - PRODUCER_FENCED (90) at the coordinator (TransactionCoordinator.scala).
//   - TRANSACTIONAL_ID_NOT_FOUND (105) and UNKNOWN_PRODUCER_ID (59):
//     Redpanda, once the transactional id has expired
//     (transactional.id.expiration.ms) and the role's next token has a new
//     producer id (src/v/kafka/server/handlers/*txn*, rm_stm.cc).
//
// Each must end the holding at once: ErrFenced, the token forgotten (the
// next call with it is ErrNotHeld, without a request), not a retry until
// the holder's heartbeat deadline.
var fenceAnswers = []*kerr.Error{kerr.InvalidProducerEpoch, kerr.ProducerFenced, kerr.TransactionalIDNotFound, kerr.UnknownProducerID}

func TestRealBrokersFenceAnswersEndTheHolding(t *testing.T) {
	e := onOneBroker(t)
	e.c.RequireFake(t)
	for _, code := range fenceAnswers {
		for _, at := range []kmsg.Key{kmsg.Produce, kmsg.AddPartitionsToTxn, kmsg.EndTxn} {
			t.Run(fmt.Sprintf("%s to %s", code.Message, at.Name()), func(t *testing.T) {
				ctx := e.ctx()
				role := codec.Role(fmt.Sprintf("fid-%d-%d", code.Code, at))
				tr := e.c.Transport(t)
				tok, err := tr.AcquireEpoch(ctx, role)
				require.NoError(t, err)
				l0 := lease(t, "n0", tok)
				require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l0)))

				f := kfake.Fault{Keys: []kmsg.Key{at}, Err: code, Count: 1}
				if at == kmsg.Produce {
					f.Topic = e.c.Config.Topic
				} else {
					f.TxnID = e.c.Config.TransactionalID(string(role))
				}
				h := e.c.Fake.Fault(f)
				err = leaseErr(tr.WriteLease(ctx, role, tok, lease(t, "n1", tok)))
				h.Remove()
				require.Error(t, err)
				assert.True(t, fencing.IsFenced(err), "%v must end the holding: got %v", code, err)
				assert.ErrorIs(t, err, sarama.KError(code.Code), "the cause names the broker's code")
				assert.Equal(t, 1, h.Hits(), "answered once, not retried")

				err = leaseErr(tr.WriteLease(ctx, role, tok, lease(t, "n2", tok)))
				assert.ErrorIs(t, err, fencing.ErrNotHeld, "the token is forgotten")

				tok2, err := tr.AcquireEpoch(ctx, role)
				require.NoError(t, err)
				l3 := lease(t, "n3", tok2)
				require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok2, l3)))
				recs, err := tr.ReadRoleRecords(ctx, role)
				require.NoError(t, err)
				assert.Equal(t, []codec.Lease{l0, l3}, leases(recs), "nothing of the refused write shows")
			})
		}
	}
}

// A takeover of a holder in the middle of its transaction: Apache Kafka's
// coordinator (core/src/main/scala/kafka/coordinator/transaction/
// TransactionCoordinator.scala, handleInitProducerId, state Ongoing)
// fences the epoch, aborts the open transaction and answers
// CONCURRENT_TRANSACTIONS until the abort markers are written; the client
// retries. The retry bumps again, so there the new token's epoch is the
// old one plus two (three with transaction version 2): epochs are not
// consecutive. kfake aborts at once and never answers
// CONCURRENT_TRANSACTIONS, so the answer is injected, and an injected
// answer bumps nothing: on kfake the new holder's token is the old one's
// epoch plus one. The gap is made before the takeover instead: a third
// transport's AcquireEpoch between the old holder's two, so the old
// holder's token is two past its previous one (epochs 0, then 2; the
// new holder gets 3). The new holder's AcquireEpoch must retry through
// the injected answers and succeed with a newer token; the old holder's
// writes are fenced and never show.
func TestTakeoverMidTransactionRetriesConcurrentTransactions(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		e.c.RequireFake(t)
		ctx := e.ctx()
		role := codec.Role("midtxn")
		a, b := e.c.Transport(t), e.c.Transport(t)
		_, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		topic, p := e.c.Config.Topic, codec.Partition(role, partitions)
		key := codec.LeaseKey(role).Encode()
		val := func(m codec.MemberID, tok codec.Token) []byte {
			v, err := codec.EncodeRecord(codec.Record{Lease: ptr(lease(t, m, tok))})
			require.NoError(t, err)
			return v
		}

		// A bump unseen by either holder (a broker-side abort, or a late
		// InitProducerId) before the takeover: the old holder's next token
		// is not its previous one plus one.
		gap := e.c.Transport(t)
		_, err = gap.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		tokA, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)

		const concurrent = 3
		var tokB codec.Token
		err = a.Transact(ctx, role, tokA, func(txA *fencing.Txn) error {
			_, err := txA.Produce(topic, p, key, val("node-a", tokA))
			require.NoError(t, err)
			h := e.c.Fake.Fault(kfake.Fault{
				Keys:  []kmsg.Key{kmsg.InitProducerID},
				TxnID: e.c.Config.TransactionalID(string(role)),
				Err:   kerr.ConcurrentTransactions,
				Count: concurrent,
			})
			defer h.Remove()
			tokB, err = b.AcquireEpoch(ctx, role)
			require.NoError(t, err, "CONCURRENT_TRANSACTIONS is retried")
			assert.Equal(t, concurrent, h.Hits())
			return nil
		})
		require.Error(t, err)
		assert.True(t, fencing.IsFenced(err), "the old holder's commit is fenced: %v", err)
		assert.True(t, tokB.Newer(tokA), "%s after %s", tokB, tokA)

		lb := lease(t, "node-b", tokB)
		require.NoError(t, leaseErr(b.WriteLease(ctx, role, tokB, lb)))
		recs, err := b.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{lb}, leases(recs), "nothing of the fenced holder shows")
	})
}

// Tokens across a producer-id change (the transactional id expired after
// transactional.id.expiration.ms, or the epoch was exhausted): Newer does
// not order them, either way, so the succession rules never treat the new
// holding's lease as proof that an old holder is fenced, nor the old as
// newer than the new; the broker's fence decides (the old token's write
// is answered with one of fenceAnswers, which ends its holding).
func TestTokensOfDifferentProducerIDsAreNotOrdered(t *testing.T) {
	old := codec.Token{ProducerID: 7, Epoch: 41}
	fresh := codec.Token{ProducerID: 9, Epoch: 0}
	assert.False(t, fresh.Newer(old))
	assert.False(t, old.Newer(fresh))
	assert.True(t, codec.Token{ProducerID: 7, Epoch: 43}.Newer(old), "a gap in epochs still orders")
}

// A transaction timeout longer than the broker's transaction.max.timeout.ms
// is refused by the coordinator at every InitProducerId; the transport
// refuses it at start, with both numbers, before any holding is tried.
// kfake reports transaction.max.timeout.ms (set through BrokerConfigs).
func TestTxnTimeoutAboveTheBrokersMaximumIsRefusedAtStart(t *testing.T) {
	if testcluster.External() {
		t.Skip("sets a broker setting of the embedded cluster")
	}
	c := testcluster.Start(t, testcluster.Options{BrokerConfigs: map[string]string{fencing.BrokerMaxTxnTimeout: "3000"}})
	cfg := c.Config
	cfg.TxnTimeout = 5 * time.Second
	tr, err := fencing.NewBrokerTransport(cfg)
	if err == nil {
		_ = tr.Close()
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, fencing.ErrBrokerSettings)
	var bse *fencing.BrokerSettingsError
	require.ErrorAs(t, err, &bse)
	assert.True(t, bse.Refused)
	assert.Equal(t, 3*time.Second, bse.BrokerValue)
	assert.Contains(t, err.Error(), "transaction.max.timeout.ms=3000")
	assert.Contains(t, err.Error(), "5s")

	cfg.TxnTimeout = 2 * time.Second
	tr, err = fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	defer tr.Close()
	got, err := tr.StartTxnSettings()
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, got.MaxTxnTimeout)
	_, err = tr.AcquireEpoch(context.Background(), "under-the-max")
	require.NoError(t, err)
}

// answerBrokerConfigs makes the embedded cluster answer DescribeConfigs of
// a broker as Apache Kafka does, with the given settings (kfake does not
// know transaction.abort.timed.out.transaction.cleanup.interval.ms). It
// returns a func that replaces the settings.
func answerBrokerConfigs(c *testcluster.Cluster, initial map[string]string) (set func(map[string]string)) {
	var cur atomic.Pointer[map[string]string]
	cur.Store(&initial)
	c.Fake.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		req := kreq.(*kmsg.DescribeConfigsRequest)
		res := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		settings := *cur.Load()
		for _, rr := range req.Resources {
			if rr.ResourceType != kmsg.ConfigResourceTypeBroker {
				return nil, nil, false
			}
			r := kmsg.NewDescribeConfigsResponseResource()
			r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
			for _, name := range rr.ConfigNames {
				if v, ok := settings[name]; ok {
					rc := kmsg.NewDescribeConfigsResponseResourceConfig()
					rc.Name, rc.Value = name, kmsg.StringPtr(v)
					r.Configs = append(r.Configs, rc)
				}
			}
			res.Resources = append(res.Resources, r)
		}
		return res, nil, true
	})
	return func(m map[string]string) { cur.Store(&m) }
}

// The stall rule against the broker's abort interval: a stock Apache
// Kafka (10 s) breaks it with a 10 s lease, renew 2 s and transaction
// timeout 5 s (processor's defaults, which stay: members on a view do not
// challenge behind another producer's open transaction, see
// processor/settings.go), and holds with a 20 s lease and heartbeat 4 s
// or with a lowered interval; a broker that does not report the interval (kfake,
// Redpanda) is assumed to have the 10 s default, and the warning says so.
func TestBrokerAbortIntervalIsCheckedAgainstTheTimings(t *testing.T) {
	if testcluster.External() {
		t.Skip("makes the embedded cluster answer as Apache Kafka does")
	}
	c := testcluster.Start(t, testcluster.Options{})
	bare := c.Transport(t)
	unreported, err := bare.StartTxnSettings()
	require.NoError(t, err)
	assert.Equal(t, 15*time.Minute, unreported.MaxTxnTimeout, "kfake reports the maximum")
	assert.Zero(t, unreported.AbortInterval, "kfake does not report the interval")
	err = unreported.CheckTimings(5*time.Second, 10*time.Second, 2*time.Second)
	var bse *fencing.BrokerSettingsError
	require.ErrorAs(t, err, &bse)
	assert.True(t, bse.Assumed)
	assert.False(t, bse.Refused)

	set := answerBrokerConfigs(c, map[string]string{fencing.BrokerMaxTxnTimeout: "900000", fencing.BrokerAbortInterval: "10000"})
	got, err := c.Transport(t).StartTxnSettings()
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, got.AbortInterval)
	assert.Equal(t, 15*time.Minute, got.MaxTxnTimeout)

	err = got.CheckTimings(5*time.Second, 10*time.Second, 2*time.Second)
	require.ErrorAs(t, err, &bse)
	assert.False(t, bse.Refused, "a warning")
	assert.False(t, bse.Assumed)
	assert.ErrorIs(t, err, fencing.ErrBrokerSettings)
	assert.Contains(t, err.Error(), "transaction.abort.timed.out.transaction.cleanup.interval.ms=10000")
	assert.Contains(t, err.Error(), "15s")

	assert.NoError(t, got.CheckTimings(5*time.Second, 20*time.Second, 4*time.Second))

	set(map[string]string{fencing.BrokerAbortInterval: "1000"})
	lowered, err := c.Transport(t).StartTxnSettings()
	require.NoError(t, err)
	assert.NoError(t, lowered.CheckTimings(5*time.Second, 10*time.Second, 2*time.Second), "a lowered interval lets the short lease hold")
}
