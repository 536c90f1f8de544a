package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

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
