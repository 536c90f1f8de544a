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

// forger is a stranger with Write on the role topic and on a
// transactional id of its own (not the role's): it commits leases of the
// role in transactions under that id, each naming its own producer id and
// epoch, so that the record batch matches the token the lease names.
type forger struct {
	t     *testing.T
	e     *env
	cl    *kgo.Client
	tok   codec.Token
	parts int32
}

func newForger(t *testing.T, e *env, txnID string) *forger {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.Config.Brokers...), kgo.TransactionalID(txnID),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxVersions(kversion.V3_9_0()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx := e.ctx(20 * time.Second)
	pid, epoch, err := cl.ProducerID(ctx)
	require.NoError(t, err)
	return &forger{t: t, e: e, cl: cl, tok: codec.Token{ProducerID: pid, Epoch: epoch}, parts: partitionsOf(t, e)}
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

// commit commits lease l of role in one transaction.
func (f *forger) commit(role codec.Role, l codec.Lease) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := codec.EncodeRecord(codec.Record{Lease: &l})
	require.NoError(f.t, err)
	require.NoError(f.t, f.cl.BeginTransaction())
	rec := &kgo.Record{Topic: f.e.c.Config.Topic, Partition: codec.Partition(role, f.parts), Key: codec.LeaseKey(role).Encode(), Value: b}
	require.NoError(f.t, f.cl.ProduceSync(ctx, rec).FirstErr())
	require.NoError(f.t, f.cl.EndTransaction(ctx, kgo.TryCommit))
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
	a, _, tok := e.holderAndCandidate(role, s)
	c := e.start("node-c", []codec.Role{role}, s, nil)
	e.awaitCandidate(role, c.id)
	time.Sleep(viewWarmup)

	forgers := []*forger{newForger(t, e, "app-orders"), newForger(t, e, e.c.Config.TransactionalID("other"))}
	until := time.Now().Add(3 * s.LeaseDuration)
	n := 0
	for time.Now().Before(until) {
		f := forgers[n%len(forgers)]
		f.commit(role, codec.ReleaseLease(a.id, f.tok))
		n++
		time.Sleep(s.RenewInterval / 2)
	}
	// A renewal after the last release: every forged release is behind it.
	time.Sleep(2 * s.RenewInterval)
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
	time.Sleep(viewWarmup)

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
