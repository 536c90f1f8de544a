package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

const partitions = 3

// arrangement is a cluster shape the suite runs on.
type arrangement struct {
	name  string
	nodes int
}

var arrangements = []arrangement{
	{"one broker", 1},
	{"three brokers, coordinator apart from leader", 3},
}

// env is one test's cluster.
type env struct {
	t     *testing.T
	c     *testcluster.Cluster
	nodes int
}

// onEachCluster runs fn once per arrangement, each on a fresh cluster.
func onEachCluster(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, a := range arrangements {
		t.Run(a.name, func(t *testing.T) {
			if a.nodes > 1 && testcluster.External() {
				t.Skip("the three-broker arrangement places the transaction coordinator and the partition leader on different brokers, " +
					"which needs the embedded cluster's control hooks; KROLE_BROKERS names an outside cluster")
			}
			c := testcluster.Start(t, testcluster.Options{Nodes: a.nodes, Partitions: partitions})
			fn(t, &env{t: t, c: c, nodes: a.nodes})
		})
	}
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// place makes the role's transaction coordinator and its partition leader
// different brokers on a multi-broker cluster, and checks that they are.
func (e *env) place(role codec.Role) {
	e.t.Helper()
	if e.nodes < 2 {
		return
	}
	require.NotNil(e.t, e.c.Fake, "placing brokers needs the embedded cluster")
	txnID := e.c.Config.TransactionalID(string(role))
	p := codec.Partition(role, partitions)
	coord := e.c.Fake.CoordinatorFor(txnID)
	if e.c.Fake.LeaderFor(e.c.Config.Topic, p) == coord {
		other := (coord + 1) % int32(e.nodes)
		require.NoError(e.t, e.c.Fake.MoveTopicPartition(e.c.Config.Topic, p, other))
	}
	require.NotEqual(e.t, coord, e.c.Fake.LeaderFor(e.c.Config.Topic, p),
		"role %s: coordinator and leader of partition %d should differ", role, p)
}

func lease(t *testing.T, member codec.MemberID, tok codec.Token) codec.Lease {
	t.Helper()
	now := time.Now().UnixMilli()
	l, err := codec.NewLease(member, tok, now, now+30_000)
	require.NoError(t, err)
	return l
}

// leaseErr is the error of a WriteLease, for tests that do not look at
// the offset.
func leaseErr(_ int64, err error) error { return err }

// leases returns the leases among recs, in order.
func leases(recs []fencing.RoleRecord) []codec.Lease {
	var out []codec.Lease
	for _, r := range recs {
		if r.Record.Lease != nil {
			out = append(out, *r.Record.Lease)
		}
	}
	return out
}

func requireOffsetOrder(t *testing.T, recs []fencing.RoleRecord) {
	t.Helper()
	for i := 1; i < len(recs); i++ {
		require.Less(t, recs[i-1].Offset, recs[i].Offset, "records out of offset order at %d", i)
	}
}

// WriteLease returns the offset of the lease record it wrote, in both
// pipelining modes; the next holder's first lease, written after its
// AcquireEpoch, lies above every lease of the earlier token; a refused
// write returns -1.
func TestWriteLeaseReturnsTheRecordsOffset(t *testing.T) {
	for _, mode := range []string{fencing.PipelineOff, fencing.PipelineOn} {
		t.Run(mode, func(t *testing.T) {
			ctx := (&env{t: t}).ctx()
			c := testcluster.Start(t, testcluster.Options{Partitions: partitions})
			role := codec.Role("numbered")
			a, b := pipedTransport(t, c, "a", mode), pipedTransport(t, c, "b", mode)
			_, err := a.Register(ctx, role, "node-a")
			require.NoError(t, err)
			tokA, err := a.AcquireEpoch(ctx, role)
			require.NoError(t, err)
			l1, l2 := lease(t, "node-a", tokA), lease(t, "node-a", tokA)
			l2.Fence = 1
			off1, err := a.WriteLease(ctx, role, tokA, l1)
			require.NoError(t, err)
			off2, err := a.WriteLease(ctx, role, tokA, l2)
			require.NoError(t, err)
			tokB, err := b.AcquireEpoch(ctx, role)
			require.NoError(t, err)
			off, err := a.WriteLease(ctx, role, tokA, lease(t, "node-a", tokA))
			require.True(t, fencing.IsFenced(err), "got %v", err)
			assert.Equal(t, int64(-1), off)
			lb := lease(t, "node-b", tokB)
			offB, err := b.WriteLease(ctx, role, tokB, lb)
			require.NoError(t, err)

			recs, err := b.ReadRoleRecords(ctx, role)
			require.NoError(t, err)
			require.Equal(t, []codec.Lease{l1, l2, lb}, leases(recs))
			var got []int64
			for _, r := range recs {
				if r.Record.Lease != nil {
					got = append(got, r.Offset)
				}
			}
			assert.Equal(t, []int64{off1, off2, offB}, got)
			assert.Greater(t, off1, int64(0), "the registration precedes the first lease")
			assert.Greater(t, offB, off2)
		})
	}
}

// A second AcquireEpoch, by another transport, fences the first holder:
// its lease write is refused with ErrFenced and the exact message, and the
// new holder's write goes through.
func TestAcquireEpochFencesTheEarlierHolder(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("scheduler")
		a, b := e.c.Transport(e.t), e.c.Transport(e.t)
		tokA, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		l1 := lease(t, "node-a", tokA)
		require.NoError(t, leaseErr(a.WriteLease(ctx, role, tokA, l1)))

		tokB, err := b.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		assert.True(t, tokB.Newer(tokA), "token %s should be newer than %s", tokB, tokA)

		err = leaseErr(a.WriteLease(ctx, role, tokA, lease(t, "node-a", tokA)))
		require.Error(t, err)
		assert.True(t, errors.Is(err, fencing.ErrFenced), "got %v", err)
		assert.True(t, fencing.IsFenced(err))
		assert.Equal(t, "fenced: another member holds role scheduler", err.Error())
		var fe *fencing.Error
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, role, fe.Role)

		l2 := lease(t, "node-b", tokB)
		require.NoError(t, leaseErr(b.WriteLease(ctx, role, tokB, l2)))

		// The fenced token is forgotten: no request, ErrNotHeld.
		err = leaseErr(a.WriteLease(ctx, role, tokA, lease(t, "node-a", tokA)))
		assert.ErrorIs(t, err, fencing.ErrNotHeld)

		recs, err := b.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{l1, l2}, leases(recs))
		requireOffsetOrder(t, recs)
	})
}

// A holder's transaction that is open when a later member acquires the
// role is aborted by that InitProducerId: its commit is fenced and its
// record never shows.
func TestAcquireEpochAbortsTheOpenTransactionOfTheEarlierHolder(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("compactor")
		a, b := e.c.Transport(e.t), e.c.Transport(e.t)
		tokA, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		val, err := codec.EncodeRecord(codec.Record{Lease: ptr(lease(t, "node-a", tokA))})
		require.NoError(t, err)
		p := codec.Partition(role, partitions)

		var tokB codec.Token
		err = a.Transact(ctx, role, tokA, func(tx *fencing.Txn) error {
			if _, err := tx.Produce(e.c.Config.Topic, p, codec.LeaseKey(role).Encode(), val); err != nil {
				return err
			}
			var err error
			tokB, err = b.AcquireEpoch(ctx, role)
			return err
		})
		require.Error(t, err)
		assert.True(t, fencing.IsFenced(err), "got %v", err)

		recs, err := b.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Empty(t, recs, "the fenced holder's open transaction must be aborted")

		l := lease(t, "node-b", tokB)
		require.NoError(t, leaseErr(b.WriteLease(ctx, role, tokB, l)))
		recs, err = a.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{l}, leases(recs))
	})
}

// Describe reports the newest token, and ok=false for a role never held.
func TestDescribeReportsTheNewestToken(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("billing")
		a, b, third := e.c.Transport(e.t), e.c.Transport(e.t), e.c.Transport(e.t)

		_, ok, err := third.Describe(ctx, "never-held")
		require.NoError(t, err)
		assert.False(t, ok)

		tok1, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		got, ok, err := third.Describe(ctx, role)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, tok1, got)

		require.NoError(t, leaseErr(a.WriteLease(ctx, role, tok1, lease(t, "node-a", tok1))))
		tok2, err := b.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		require.NotEqual(t, tok1, tok2)
		got, ok, err = third.Describe(ctx, role)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, tok2, got)

		// A commit does not move the epoch (pre-KIP-890 EndTxn).
		require.NoError(t, leaseErr(b.WriteLease(ctx, role, tok2, lease(t, "node-b", tok2))))
		got, _, err = third.Describe(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, tok2, got)
	})
}

// An aborted transaction never shows in ReadRoleRecords; committed ones
// do, in order, and the sequence numbers of one epoch carry on across
// commits and aborts.
func TestAbortedLeaseWritesNeverShow(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("indexer")
		tr := e.c.Transport(e.t)
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)

		recs, err := tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err, "an empty partition ends the read")
		assert.Empty(t, recs)

		topic, p := e.c.Config.Topic, codec.Partition(role, partitions)
		var want []codec.Lease
		boom := errors.New("boom")
		for i := range 4 {
			l := lease(t, codec.MemberID(fmt.Sprintf("node-%d", i)), tok)
			require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l)))
			want = append(want, l)

			aborted := lease(t, "aborted", tok)
			val, err := codec.EncodeRecord(codec.Record{Lease: &aborted})
			require.NoError(t, err)
			err = tr.Transact(ctx, role, tok, func(tx *fencing.Txn) error {
				off, err := tx.Produce(topic, p, codec.LeaseKey(role).Encode(), val)
				require.NoError(t, err)
				require.GreaterOrEqual(t, off, int64(0))
				return boom
			})
			require.ErrorIs(t, err, boom, "Transact returns the function's error")
		}

		// Two records in one committed transaction.
		l1, l2 := lease(t, "pair-1", tok), lease(t, "pair-2", tok)
		var offs []int64
		require.NoError(t, tr.Transact(ctx, role, tok, func(tx *fencing.Txn) error {
			for _, l := range []codec.Lease{l1, l2} {
				val, err := codec.EncodeRecord(codec.Record{Lease: &l})
				if err != nil {
					return err
				}
				off, err := tx.Produce(topic, p, codec.LeaseKey(role).Encode(), val)
				if err != nil {
					return err
				}
				offs = append(offs, off)
			}
			return nil
		}))
		want = append(want, l1, l2)

		recs, err = tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, want, leases(recs))
		requireOffsetOrder(t, recs)
		require.Len(t, recs, len(want))
		assert.Equal(t, offs, []int64{recs[len(recs)-2].Offset, recs[len(recs)-1].Offset})
		for _, r := range recs {
			assert.Equal(t, codec.LeaseKey(role), r.Key)
		}
	})
}

// A transaction whose ctx ends is aborted in the background; the token's
// next write waits for that abort and succeeds, and the abandoned record
// never shows.
func TestTransactAbandonedByItsContextIsAborted(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("mailer")
		tr := e.c.Transport(e.t)
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		topic, p := e.c.Config.Topic, codec.Partition(role, partitions)
		gone := lease(t, "gone", tok)
		val, err := codec.EncodeRecord(codec.Record{Lease: &gone})
		require.NoError(t, err)

		cctx, cancel := context.WithCancel(ctx)
		err = tr.Transact(cctx, role, tok, func(tx *fencing.Txn) error {
			_, err := tx.Produce(topic, p, codec.LeaseKey(role).Encode(), val)
			require.NoError(t, err)
			cancel()
			return nil
		})
		require.Error(t, err)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, fencing.ErrProducer)

		l := lease(t, "kept", tok)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l)))
		recs, err := tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{l}, leases(recs))

		// A ctx that has ended before the call sends nothing.
		_, err = tr.AcquireEpoch(cctx, role)
		assert.ErrorIs(t, err, context.Canceled)
		got, _, err := tr.Describe(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, tok, got, "a cancelled AcquireEpoch must not mint a token")
	})
}

// Registrations rank in join order by offset; registering again moves a
// member last; Deregister appends a tombstone.
func TestRegistrationsRankByOffset(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("gateway")
		e.place(role)
		tr := e.c.Transport(e.t)
		before := time.Now().UnixMilli()
		members := []codec.MemberID{"m1", "m2", "m3"}
		offs := map[codec.MemberID]int64{}
		var last int64 = -1
		for _, m := range members {
			off, err := tr.Register(ctx, role, m)
			require.NoError(t, err)
			require.Greater(t, off, last, "join order")
			offs[m], last = off, off
		}
		again, err := tr.Register(ctx, role, "m1")
		require.NoError(t, err)
		assert.Greater(t, again, offs["m3"], "re-registration moves m1 last")
		require.NoError(t, tr.Deregister(ctx, role, "m2"))
		after := time.Now().UnixMilli()

		recs, err := tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		require.Len(t, recs, 5)
		requireOffsetOrder(t, recs)
		wantMembers := []codec.MemberID{"m1", "m2", "m3", "m1"}
		for i, m := range wantMembers {
			r := recs[i]
			assert.Equal(t, codec.RegistrationKey(role, m), r.Key)
			require.NotNil(t, r.Record.Registration, "record %d", i)
			assert.Equal(t, m, r.Record.Registration.Member)
			assert.GreaterOrEqual(t, r.Record.Registration.RegisteredAt, before)
			assert.LessOrEqual(t, r.Record.Registration.RegisteredAt, after)
		}
		assert.Equal(t, offs["m1"], recs[0].Offset)
		assert.Equal(t, again, recs[3].Offset)
		tomb := recs[4]
		assert.Equal(t, codec.RegistrationKey(role, "m2"), tomb.Key)
		assert.True(t, tomb.Record.Tombstone(), "Deregister writes a tombstone")
	})
}

// A token this transport did not mint most recently for the role is
// ErrNotHeld, and nothing is written.
func TestWriteLeaseWithATokenNotHeld(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("reporter")
		a, b := e.c.Transport(e.t), e.c.Transport(e.t)
		tokA0, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		tokA, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		require.True(t, tokA.Newer(tokA0))
		e.place(role)

		for name, tc := range map[string]struct {
			tr  *fencing.BrokerTransport
			tok codec.Token
		}{
			"another transport's token": {b, tokA},
			"a token never minted":      {a, codec.Token{ProducerID: tokA.ProducerID + 1, Epoch: tokA.Epoch}},
			"a token of another role":   {a, codec.Token{ProducerID: 7, Epoch: 0}},
			"an older token of its own": {a, tokA0},
		} {
			err := leaseErr(tc.tr.WriteLease(ctx, role, tc.tok, lease(t, "x", tc.tok)))
			assert.ErrorIs(t, err, fencing.ErrNotHeld, name)
			assert.False(t, fencing.IsFenced(err), name)
			err = tc.tr.Transact(ctx, role, tc.tok, func(*fencing.Txn) error {
				t.Errorf("%s: the function must not run", name)
				return nil
			})
			assert.ErrorIs(t, err, fencing.ErrNotHeld, name)
		}

		// A newer own token supersedes the older one.
		tokA2, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		err = leaseErr(a.WriteLease(ctx, role, tokA, lease(t, "x", tokA)))
		assert.ErrorIs(t, err, fencing.ErrNotHeld)
		require.NoError(t, leaseErr(a.WriteLease(ctx, role, tokA2, lease(t, "x", tokA2))))

		recs, err := a.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Len(t, leases(recs), 1, "only the held token wrote")
	})
}

// Two roles that share a partition never see each other's records, nor
// records of another application in it; a record of the role that does
// not decode is ErrRecord.
func TestRolesSharingAPartitionNeverMix(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		r1, r2, r3 := rolesSharingAPartition(t, 3)
		require.Equal(t, codec.Partition(r1, partitions), codec.Partition(r2, partitions))
		e.place(r1)
		e.place(r2)
		tr := e.c.Transport(e.t)
		t1, err := tr.AcquireEpoch(ctx, r1)
		require.NoError(t, err)
		t2, err := tr.AcquireEpoch(ctx, r2)
		require.NoError(t, err)

		p := codec.Partition(r1, partitions)
		raw := rawProducer(t, e)
		send := func(key, value []byte) {
			t.Helper()
			_, _, err := raw.SendMessage(&sarama.ProducerMessage{Topic: e.c.Config.Topic, Partition: p,
				Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(value)})
			require.NoError(t, err)
		}

		var l1s, l2s []codec.Lease
		for i := range 3 {
			_, err := tr.Register(ctx, r1, codec.MemberID(fmt.Sprintf("a%d", i)))
			require.NoError(t, err)
			l2 := lease(t, codec.MemberID(fmt.Sprintf("b%d", i)), t2)
			require.NoError(t, leaseErr(tr.WriteLease(ctx, r2, t2, l2)))
			l2s = append(l2s, l2)
			send([]byte("orders/42"), []byte(`{"not":"krole"}`))
			l1 := lease(t, codec.MemberID(fmt.Sprintf("a%d", i)), t1)
			require.NoError(t, leaseErr(tr.WriteLease(ctx, r1, t1, l1)))
			l1s = append(l1s, l1)
			_, err = tr.Register(ctx, r2, codec.MemberID(fmt.Sprintf("b%d", i)))
			require.NoError(t, err)
		}
		// A malformed value under a key of a third role in the partition.
		send(codec.LeaseKey(r3).Encode(), []byte("garbage"))

		for _, tc := range []struct {
			role   codec.Role
			leases []codec.Lease
			prefix string
		}{{r1, l1s, "a"}, {r2, l2s, "b"}} {
			recs, err := tr.ReadRoleRecords(ctx, tc.role)
			require.NoError(t, err, "records of other roles and applications are skipped, even malformed ones")
			require.Len(t, recs, 6)
			requireOffsetOrder(t, recs)
			for _, r := range recs {
				assert.Equal(t, tc.role, r.Key.Role)
				if r.Record.Registration != nil {
					assert.Equal(t, tc.prefix, string(r.Record.Registration.Member)[:1])
				}
			}
			assert.Equal(t, tc.leases, leases(recs))
		}

		_, err = tr.ReadRoleRecords(ctx, r3)
		require.Error(t, err)
		assert.ErrorIs(t, err, fencing.ErrRecord)
		assert.ErrorIs(t, err, codec.ErrMalformed)
	})
}

// Transact commits consumer offsets with the transaction, and an aborted
// or fenced transaction's offsets never land.
func TestTransactCommitsOffsets(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("pipeline")
		group := e.c.Config.TxnPrefix + "group"
		input := e.c.Config.Topic
		a, b := e.c.Transport(e.t), e.c.Transport(e.t)
		tok, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)

		commit := func(tr *fencing.BrokerTransport, tok codec.Token, off int64, fail error) error {
			return tr.Transact(ctx, role, tok, func(tx *fencing.Txn) error {
				assert.Equal(t, role, tx.Role())
				assert.Equal(t, tok, tx.Token())
				if err := tx.CommitOffsets(group, map[string]map[int32]int64{input: {0: off, 1: off + 1}}); err != nil {
					return err
				}
				return fail
			})
		}
		require.NoError(t, commit(a, tok, 42, nil))
		assert.Equal(t, map[int32]int64{0: 42, 1: 43}, committedOffsets(t, e, group, input))

		boom := errors.New("boom")
		require.ErrorIs(t, commit(a, tok, 99, boom), boom)
		assert.Equal(t, map[int32]int64{0: 42, 1: 43}, committedOffsets(t, e, group, input), "aborted offsets never land")

		tokB, err := b.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		err = commit(a, tok, 77, nil)
		assert.True(t, fencing.IsFenced(err), "got %v", err)
		assert.Equal(t, map[int32]int64{0: 42, 1: 43}, committedOffsets(t, e, group, input), "fenced offsets never land")

		require.NoError(t, commit(b, tokB, 50, nil))
		assert.Equal(t, map[int32]int64{0: 50, 1: 51}, committedOffsets(t, e, group, input))
	})
}

// An unreachable cluster fails NewBrokerTransport with ErrClient, saying
// which address did not answer, within a bounded time.
func TestNewBrokerTransportUnreachable(t *testing.T) {
	type result struct {
		tr  *fencing.BrokerTransport
		err error
	}
	done := make(chan result, 1)
	go func() {
		tr, err := fencing.NewBrokerTransport(fencing.Config{Brokers: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
		done <- result{tr, err}
	}()
	select {
	case r := <-done:
		require.Error(t, r.err)
		assert.Nil(t, r.tr)
		assert.ErrorIs(t, r.err, fencing.ErrClient)
		assert.Contains(t, r.err.Error(), "no broker answered at 127.0.0.1:1")
		var fe *fencing.Error
		require.ErrorAs(t, r.err, &fe)
		assert.Empty(t, fe.Role)
	case <-time.After(30 * time.Second):
		t.Fatal("NewBrokerTransport did not give up on an unreachable cluster")
	}
}

func TestNewBrokerTransportRejectsAnInvalidConfig(t *testing.T) {
	_, err := fencing.NewBrokerTransport(fencing.Config{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no brokers")
}

func TestConfigReturnsTheEffectiveConfig(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	cfg := c.Config
	cfg.TxnTimeout = 0
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	defer tr.Close()
	assert.Equal(t, fencing.DefaultTxnTimeout, tr.Config().TxnTimeout)
	assert.Equal(t, c.Config.Topic, tr.Config().Topic)
	assert.Equal(t, c.Config.TxnPrefix, tr.Config().TxnPrefix)
}

func TestInvalidNamesAreRefusedBeforeAnyRequest(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	tr, err := fencing.NewBrokerTransport(c.Config)
	require.NoError(t, err)
	defer tr.Close()
	ctx := context.Background()
	_, err = tr.AcquireEpoch(ctx, "bad/role")
	assert.ErrorIs(t, err, codec.ErrInvalid)
	assert.ErrorIs(t, err, fencing.ErrProducer)
	_, err = tr.Register(ctx, "role", "bad member")
	assert.ErrorIs(t, err, codec.ErrInvalid)
	_, _, err = tr.Describe(ctx, "")
	assert.ErrorIs(t, err, fencing.ErrAdmin)
	_, err = tr.ReadRoleRecords(ctx, "a/b")
	assert.ErrorIs(t, err, fencing.ErrClient)
}

// ---- helpers ----

func ptr[T any](v T) *T { return &v }

// rolesSharingAPartition returns n role names with the same partition.
func rolesSharingAPartition(t *testing.T, n int) (codec.Role, codec.Role, codec.Role) {
	t.Helper()
	byPartition := map[int32][]codec.Role{}
	for i := 0; i < 1000; i++ {
		r := codec.Role(fmt.Sprintf("role-%d", i))
		p := codec.Partition(r, partitions)
		byPartition[p] = append(byPartition[p], r)
		if len(byPartition[p]) == n {
			rs := byPartition[p]
			return rs[0], rs[1], rs[2]
		}
	}
	t.Fatal("no roles share a partition")
	return "", "", ""
}

func rawProducer(t *testing.T, e *env) sarama.SyncProducer {
	t.Helper()
	sc, err := e.c.Config.Sarama()
	require.NoError(t, err)
	p, err := sarama.NewSyncProducer(e.c.Config.Brokers, sc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func committedOffsets(t *testing.T, e *env, group, topic string) map[int32]int64 {
	t.Helper()
	sc, err := e.c.Config.Sarama()
	require.NoError(t, err)
	admin, err := sarama.NewClusterAdmin(e.c.Config.Brokers, sc)
	require.NoError(t, err)
	defer admin.Close()
	res, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
	require.NoError(t, err)
	out := map[int32]int64{}
	for p, blk := range res.Blocks[topic] {
		require.Equal(t, sarama.ErrNoError, blk.Err)
		if blk.Offset >= 0 {
			out[p] = blk.Offset
		}
	}
	return out
}

// A holder fenced in the middle of its transaction is refused at its next
// produce. While the new holder's transaction on the partition is open, the
// partition leader knows the new epoch and refuses the stale produce with
// INVALID_PRODUCER_EPOCH, which Produce reports as fenced. Otherwise kfake
// answers the stale produce INVALID_TXN_STATE (the partition left the
// aborted transaction), which Produce reports as ErrProducer, and the abort
// that follows is refused with PRODUCER_FENCED: Transact reports fenced.
// Apache Kafka and Redpanda answer that produce INVALID_PRODUCER_EPOCH
// (the abort markers carry the bumped epoch: ProducerAppendInfo.java,
// checkProducerEpoch; redpanda src/v/cluster/rm_stm.cc): the test accepts
// both, and the "as real brokers answer" case makes kfake answer 47 there
// (a fault on that produce), which must be fenced.
func TestFencedInTheMiddleOfATransaction(t *testing.T) {
	for _, tc := range []struct {
		newHolderOpen, realAnswer bool
	}{{true, false}, {false, false}, {false, true}} {
		newHolderOpen := tc.newHolderOpen
		name := fmt.Sprintf("new holder's transaction open: %v", newHolderOpen)
		if tc.realAnswer {
			name += ", as real brokers answer"
		}
		t.Run(name, func(t *testing.T) {
			onEachCluster(t, func(t *testing.T, e *env) {
				ctx := e.ctx()
				role := codec.Role("ledger")
				a, b := e.c.Transport(e.t), e.c.Transport(e.t)
				tokA, err := a.AcquireEpoch(ctx, role)
				require.NoError(t, err)
				e.place(role)
				topic, p := e.c.Config.Topic, codec.Partition(role, partitions)
				key := codec.LeaseKey(role).Encode()
				val := func(m codec.MemberID, tok codec.Token) []byte {
					v, err := codec.EncodeRecord(codec.Record{Lease: ptr(lease(t, m, tok))})
					require.NoError(t, err)
					return v
				}
				var produceErr error
				err = a.Transact(ctx, role, tokA, func(txA *fencing.Txn) error {
					_, err := txA.Produce(topic, p, key, val("node-a", tokA))
					require.NoError(t, err)
					tokB, err := b.AcquireEpoch(ctx, role)
					require.NoError(t, err)
					if !newHolderOpen {
						if tc.realAnswer {
							e.c.RequireFake(t)
							h := e.c.Fake.Fault(kfakeFault(topic, kerr.InvalidProducerEpoch, 1))
							defer h.Remove()
						}
						_, produceErr = txA.Produce(topic, p, key, val("node-a", tokA))
						return produceErr
					}
					require.NoError(t, b.Transact(ctx, role, tokB, func(txB *fencing.Txn) error {
						_, err := txB.Produce(topic, p, key, val("node-b", tokB))
						require.NoError(t, err)
						_, produceErr = txA.Produce(topic, p, key, val("node-a", tokA))
						return nil
					}))
					return produceErr
				})
				require.Error(t, produceErr)
				t.Logf("produce: %v", errors.Unwrap(produceErr))
				if newHolderOpen {
					assert.True(t, fencing.IsFenced(produceErr), "the leader refuses the stale epoch: %v", errors.Unwrap(produceErr))
					assert.ErrorIs(t, produceErr, sarama.ErrInvalidProducerEpoch)
				} else if tc.realAnswer || !fencing.IsFenced(produceErr) {
					if tc.realAnswer {
						assert.True(t, fencing.IsFenced(produceErr), "INVALID_PRODUCER_EPOCH is a fence: %v", errors.Unwrap(produceErr))
						assert.ErrorIs(t, produceErr, sarama.ErrInvalidProducerEpoch)
					} else { // kfake's own answer
						assert.ErrorIs(t, produceErr, fencing.ErrProducer)
						assert.ErrorIs(t, produceErr, sarama.ErrInvalidTxnState)
					}
				}
				assert.True(t, fencing.IsFenced(err), "got %v (cause %v)", err, errors.Unwrap(err))

				recs, err := b.ReadRoleRecords(ctx, role)
				require.NoError(t, err)
				for _, l := range leases(recs) {
					assert.Equal(t, codec.MemberID("node-b"), l.Member, "nothing of the fenced holder shows")
				}
				assert.Len(t, leases(recs), map[bool]int{true: 1, false: 0}[newHolderOpen])
			})
		})
	}
}

// ReadRoleRecords stops at the last stable offset: a transaction still
// open hides itself and every record after it, and the read returns at
// once; after the commit all of them show, in offset order.
func TestReadRoleRecordsStopsAtTheLastStableOffset(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("stable")
		holder, other := e.c.Transport(e.t), e.c.Transport(e.t)
		tok, err := holder.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		before, err := other.Register(ctx, role, "early")
		require.NoError(t, err)

		l := lease(t, "holder", tok)
		val, err := codec.EncodeRecord(codec.Record{Lease: &l})
		require.NoError(t, err)
		var after int64
		require.NoError(t, holder.Transact(ctx, role, tok, func(tx *fencing.Txn) error {
			if _, err := tx.Produce(e.c.Config.Topic, codec.Partition(role, partitions), codec.LeaseKey(role).Encode(), val); err != nil {
				return err
			}
			var err error
			after, err = other.Register(ctx, role, "late")
			require.NoError(t, err)
			recs, err := other.ReadRoleRecords(ctx, role)
			require.NoError(t, err)
			require.Len(t, recs, 1, "only what precedes the open transaction")
			assert.Equal(t, before, recs[0].Offset)
			return nil
		}))

		recs, err := other.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		require.Len(t, recs, 3)
		assert.Equal(t, before, recs[0].Offset)
		assert.Equal(t, []codec.Lease{l}, leases(recs))
		assert.Equal(t, after, recs[2].Offset)
		assert.Equal(t, codec.RegistrationKey(role, "late"), recs[2].Key)
	})
}

// A function that panics inside Transact: the panic goes on to the caller,
// the transaction is aborted, and the token's next write goes through.
func TestTransactPanicAbortsTheTransaction(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("panicky")
		tr := e.c.Transport(e.t)
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		gone := lease(t, "gone", tok)
		val, err := codec.EncodeRecord(codec.Record{Lease: &gone})
		require.NoError(t, err)
		require.PanicsWithValue(t, "boom", func() {
			_ = tr.Transact(ctx, role, tok, func(tx *fencing.Txn) error {
				_, err := tx.Produce(e.c.Config.Topic, codec.Partition(role, partitions), codec.LeaseKey(role).Encode(), val)
				require.NoError(t, err)
				panic("boom")
			})
		})
		l := lease(t, "kept", tok)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l)))
		recs, err := tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{l}, leases(recs))
	})
}
