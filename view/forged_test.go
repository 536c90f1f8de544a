package view

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// stranger is a client with Write on the role topic and nothing else that
// krole gives its members: franz-go, plain appends (idempotent or not) and
// transactions under a transactional id of its own.
func stranger(t *testing.T, c *testcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(c.Config.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxVersions(kversion.V3_9_0())}, opts...)
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func leaseRecord(t *testing.T, w *writer, role codec.Role, l codec.Lease) *kgo.Record {
	t.Helper()
	b, err := codec.EncodeRecord(codec.Record{Lease: &l})
	require.NoError(t, err)
	return &kgo.Record{Topic: w.cfg.Topic, Partition: w.part(role), Key: codec.LeaseKey(role).Encode(), Value: b}
}

// TestForgedLeasesAreSkipped: a lease or release counts only when it was
// written in a transaction by the producer id and epoch it names, and that
// producer id is the one the role's transactional id has at the
// coordinator. A
// stranger's plain appends (a lease naming another member, a higher epoch
// and a far deadline; a release of the holder's own token; a lease under
// the stranger's own idempotent producer id), and its transactional write
// under another transactional id naming the holder's token, are skipped
// and counted as forged; the holder's leases still apply.
func TestForgedLeasesAreSkipped(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	w := newWriter(t, c, 2)
	role := codec.Role("scheduler")
	holder := w.txnProducer(string(role))
	v, _ := runView(t, c.Config, Options{})
	ctx := testCtx(t)
	now := time.Now()
	tok := holder.token

	w.register(role, "a")
	w.register(role, "b")
	held := holder.sign(mkLease("a", 0, now, time.Minute))
	w.lease(holder, role, held, true)
	caughtUp(t, v)
	changes := v.Watch(ctx, role)

	// A plain append (no producer id at all) of a lease naming another
	// member, a higher epoch and a deadline an hour ahead.
	plain := stranger(t, c, kgo.DisableIdempotentWrite())
	forged, err := codec.NewLease("mallory", codec.Token{ProducerID: tok.ProducerID, Epoch: tok.Epoch + 5}, now.UnixMilli(), now.Add(time.Hour).UnixMilli())
	require.NoError(t, err)
	require.NoError(t, plain.ProduceSync(ctx, leaseRecord(t, w, role, forged)).FirstErr())
	// A forged release: the holder's own token, granted_at 0.
	release, err := codec.NewLease("a", tok, 0, 1)
	require.NoError(t, err)
	require.NoError(t, plain.ProduceSync(ctx, leaseRecord(t, w, role, release)).FirstErr())

	// An idempotent plain append naming its own producer id and epoch: a
	// real batch producer, but not a transaction.
	idem := stranger(t, c)
	pid, epoch, err := idem.ProducerID(ctx)
	require.NoError(t, err)
	own, err := codec.NewLease("mallory", codec.Token{ProducerID: pid, Epoch: epoch}, now.UnixMilli(), now.Add(time.Hour).UnixMilli())
	require.NoError(t, err)
	require.NoError(t, idem.ProduceSync(ctx, leaseRecord(t, w, role, own)).FirstErr())

	// A committed transaction under another transactional id, naming the
	// holder's token.
	txn := stranger(t, c, kgo.TransactionalID(c.Config.TransactionalID("stranger")))
	require.NoError(t, txn.BeginTransaction())
	stolen, err := codec.NewLease("mallory", tok, now.UnixMilli(), now.Add(time.Hour).UnixMilli())
	require.NoError(t, err)
	require.NoError(t, txn.ProduceSync(ctx, leaseRecord(t, w, role, stolen)).FirstErr())
	require.NoError(t, txn.EndTransaction(ctx, kgo.TryCommit))

	// Committed transactions under the stranger's own transactional ids,
	// each lease naming the stranger's own producer id and epoch, so its
	// batch is consistent: under an unrelated transactional id (an
	// application's) and under another role's (krole.other, which any
	// member of that role may use); a lease and a release under each.
	// Only the producer id of krole.scheduler counts.
	for _, txnID := range []string{"app-orders", c.Config.TransactionalID("other")} {
		fc := stranger(t, c, kgo.TransactionalID(txnID))
		require.NoError(t, fc.BeginTransaction())
		fpid, fepoch, err := fc.ProducerID(ctx)
		require.NoError(t, err)
		ftok := codec.Token{ProducerID: fpid, Epoch: fepoch}
		require.NotEqual(t, tok.ProducerID, fpid)
		ghost, err := codec.NewLease("ghost", ftok, now.UnixMilli(), now.Add(10*time.Minute).UnixMilli())
		require.NoError(t, err)
		require.NoError(t, fc.ProduceSync(ctx, leaseRecord(t, w, role, ghost)).FirstErr())
		require.NoError(t, fc.EndTransaction(ctx, kgo.TryCommit))
		require.NoError(t, fc.BeginTransaction())
		require.NoError(t, fc.ProduceSync(ctx, leaseRecord(t, w, role, codec.ReleaseLease("a", ftok))).FirstErr())
		require.NoError(t, fc.EndTransaction(ctx, kgo.TryCommit))
	}

	caughtUp(t, v)
	got, ok, err := v.Holder(ctx, role, time.Time{})
	require.NoError(t, err)
	assert.True(t, ok, "the holder still holds")
	assert.Equal(t, held, got)
	assert.Equal(t, int64(8), v.Stats().Skipped[SkipForged])
	conf, err := v.Confirm(ctx, role)
	require.NoError(t, err)
	require.NotNil(t, conf.State.Lease)
	assert.Equal(t, held, *conf.State.Lease, "a confirmation shows the holder's lease, not a forged one")

	// The transport's read path (krole records, a TransportSource) applies
	// the same rule: the holder's lease is the role's latest.
	tr := c.Transport(t)
	recs, err := tr.ReadRoleRecords(ctx, role)
	require.NoError(t, err)
	st := rolestate.Fold(role, recs)
	require.NotNil(t, st.Lease)
	assert.Equal(t, held, *st.Lease, "ReadRoleRecords drops the forged leases")
	assert.Equal(t, uint64(8), tr.ForgedLeasesSkipped())

	// The real holder's renewal still applies, and it is the first change a
	// subscriber sees: no forged lease got into the table.
	renewed := holder.sign(mkLease("a", 0, now, 2*time.Minute))
	w.lease(holder, role, renewed, true)
	caughtUp(t, v)
	got, _, err = v.Holder(ctx, role, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, renewed, got)
	select {
	case ch := <-changes:
		assert.True(t, ch.LeaseRenewed, "the first change is the renewal: %+v", ch)
		assert.Equal(t, held, *ch.Before.Lease)
		assert.Equal(t, renewed, *ch.After.Lease)
	case <-time.After(10 * time.Second):
		t.Fatal("the renewal was not delivered")
	}
	cs, err := v.Candidates(ctx, role)
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"a", "b"}, members(cs), "registrations are plain appends and still count")
}

// TestCheckAuthor: the rule itself, batch by batch, and the producer id
// checked against the role's own.
func TestCheckAuthor(t *testing.T) {
	tok := codec.Token{ProducerID: 9, Epoch: 3}
	l, err := codec.NewLease("a", tok, 1, 2)
	require.NoError(t, err)
	a := rolestate.NewAuthors()
	a.Own("r", 9)
	a.Learn("r", 11, 9)
	v := &View{verify: newVerifier(nil, a)}
	l11, err := codec.NewLease("a", codec.Token{ProducerID: 11, Epoch: 0}, 1, 2)
	require.NoError(t, err)
	l12, err := codec.NewLease("a", codec.Token{ProducerID: 12, Epoch: 0}, 1, 2)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		rec  codec.Record
		b    batchInfo
		ok   bool
		hold bool
	}{
		{"its own transaction", codec.Record{Lease: &l}, batchInfo{9, 3, true}, true, false},
		{"a transaction under another transactional id", codec.Record{Lease: &l11}, batchInfo{11, 0, true}, false, false},
		{"a producer id not verified yet waits", codec.Record{Lease: &l12}, batchInfo{12, 0, true}, true, true},
		{"plain append", codec.Record{Lease: &l}, batchInfo{-1, -1, false}, false, false},
		{"idempotent append with the same producer", codec.Record{Lease: &l}, batchInfo{9, 3, false}, false, false},
		{"older epoch", codec.Record{Lease: &l}, batchInfo{9, 2, true}, false, false},
		{"newer epoch", codec.Record{Lease: &l}, batchInfo{9, 4, true}, false, false},
		{"another producer", codec.Record{Lease: &l}, batchInfo{10, 3, true}, false, false},
		{"tombstone in a transaction", codec.Record{}, batchInfo{9, 3, true}, false, false},
	} {
		reason, err, hold := v.checkAuthor("r", tc.rec, tc.b)
		assert.Equal(t, tc.hold, hold, tc.name)
		if tc.ok {
			assert.Empty(t, reason, tc.name)
			assert.NoError(t, err, tc.name)
		} else {
			assert.Equal(t, SkipForged, reason, tc.name)
			assert.Error(t, err, tc.name)
		}
	}
}

// TestUnverifiedLeaseWaitsOutsideTheTable: while the coordinator does not
// answer for a lease's producer id, the lease does not show (the role
// looks as before it: no holder), a confirmation of the role waits for the
// verdict rather than answer without it, and the record-apply loop goes
// on (a registration after it applies). A Run that ends first leaves the
// lease in the state dir for the next Run, which verifies and applies it.
func TestUnverifiedLeaseWaitsOutsideTheTable(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	dir := t.TempDir()
	stuck := func(ctx context.Context, role codec.Role) (codec.Token, bool, error) {
		<-ctx.Done()
		return codec.Token{}, false, ctx.Err()
	}
	v1, stop1 := runView(t, c.Config, Options{StateDir: dir, Authors: rolestate.NewAuthors(), Describe: stuck})
	caughtUp(t, v1)
	l := m.Lease("db", "m1", time.Hour)
	m.Register("db", "m2")
	ctx := testCtx(t)
	require.Eventually(t, func() bool {
		cs, err := v1.Candidates(ctx, "db")
		return err == nil && len(cs) == 1
	}, 10*time.Second, 5*time.Millisecond, "the registration after the lease applies")
	_, held, err := v1.Holder(ctx, "db", time.Time{})
	require.NoError(t, err)
	assert.False(t, held, "an unverified lease does not show")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = v1.Confirm(short, "db")
	cancel()
	assert.ErrorIs(t, err, ErrNotCaughtUp, "a confirmation waits for the verdict")
	stop1()

	v2, _ := runView(t, c.Config, Options{StateDir: dir, Authors: rolestate.NewAuthors()})
	caughtUp(t, v2)
	got, held, err := v2.Holder(ctx, "db", time.Time{})
	require.NoError(t, err)
	assert.True(t, held, "verified by the next Run")
	assert.Equal(t, l, got)
	conf, err := v2.Confirm(ctx, "db")
	require.NoError(t, err)
	assert.Equal(t, l, *conf.State.Lease)
}
