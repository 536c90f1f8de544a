package fencing_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// A handover on Apache Kafka: the successor's InitProducerId comes right
// after the holder's release commit, while the coordinator still writes
// the release's markers (PrepareCommit), and is answered
// CONCURRENT_TRANSACTIONS until they are written. kfake writes its
// markers before it answers EndTxn, so the coordinator is made to answer
// as Kafka's does (devcluster's CommitLikeKafka): here, the first
// `concurrent` InitProducerId or AddPartitionsToTxn requests after each
// commit. The successor's AcquireEpoch must retry through them, soon
// (fencing.ConcurrentRetryWaits: a millisecond each, where the usual
// backoff is 10 ms and doubling), and get a newer token; the released
// holder is fenced; the successor's lease transaction, itself answered
// CONCURRENT_TRANSACTIONS at its AddPartitionsToTxn right after its own
// commit in the same way, succeeds.
func TestInitProducerIDRightAfterACommitRetriesSoon(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		e.c.RequireFake(t)
		ctx := e.ctx()
		role := codec.Role("kafkalike")
		e.place(role)
		a, b := e.c.Transport(t), e.c.Transport(t)
		tokA, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)

		const concurrent = 4
		var faulted atomic.Int64
		remove := e.c.Fake.CommitLikeKafka(e.c.Config.TransactionalID(string(role)),
			func(answered int, _ time.Duration) bool {
				if answered < concurrent {
					faulted.Add(1)
					return true
				}
				return false
			})
		defer remove()

		release, err := codec.NewLease("node-a", tokA, 0, 1)
		require.NoError(t, err)
		require.NoError(t, leaseErr(a.WriteLease(ctx, role, tokA, release)), "the first transaction after InitProducerId meets no commit")
		tokB, err := b.AcquireEpoch(ctx, role)
		require.NoError(t, err, "CONCURRENT_TRANSACTIONS right after the release is retried")
		assert.True(t, tokB.Newer(tokA), "%s after %s", tokB, tokA)

		lb := lease(t, "node-b", tokB)
		require.NoError(t, leaseErr(b.WriteLease(ctx, role, tokB, lb)))
		lb2 := lease(t, "node-b", tokB)
		require.NoError(t, leaseErr(b.WriteLease(ctx, role, tokB, lb2)), "a renewal right after the commit: AddPartitionsToTxn retried")
		err = leaseErr(a.WriteLease(ctx, role, tokA, lease(t, "node-a", tokA)))
		require.Error(t, err)
		assert.True(t, fencing.IsFenced(err) || isNotHeld(err), "the released holder is fenced: %v", err)

		assert.EqualValues(t, 3*concurrent, faulted.Load(),
			"answered CONCURRENT_TRANSACTIONS: b's InitProducerId, b's renewal, a's write after b's commit")

		recs, err := b.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{release, lb, lb2}, leases(recs))
	})
}

// A release, then another transport's AcquireEpoch, on a coordinator that
// completes each commit (writes its markers) 2 ms after its answer, as a
// local Apache Kafka broker may (CommitLikeKafka). What the retry's pace
// costs a handover on Kafka; on kfake alone there is no wait.
func BenchmarkAcquireEpochRightAfterACommit(b *testing.B) {
	c := testcluster.Start(b, testcluster.Options{Partitions: partitions})
	if c.Fake == nil {
		b.Skip("needs the embedded cluster")
	}
	role := codec.Role("kafkalike-bench")
	remove := c.Fake.CommitLikeKafka(c.Config.TransactionalID(string(role)),
		func(_ int, since time.Duration) bool { return since < 2*time.Millisecond })
	defer remove()
	x, y := c.Transport(b), c.Transport(b)
	ctx := context.Background()
	tok, err := x.AcquireEpoch(ctx, role)
	require.NoError(b, err)
	holder, next := x, y
	b.ResetTimer()
	for range b.N {
		rel, err := codec.NewLease("bench", tok, 0, 1)
		require.NoError(b, err)
		require.NoError(b, leaseErr(holder.WriteLease(ctx, role, tok, rel)))
		tok, err = next.AcquireEpoch(ctx, role)
		require.NoError(b, err)
		holder, next = next, holder
	}
}

func isNotHeld(err error) bool { return errors.Is(err, fencing.ErrNotHeld) }

// The retries of CONCURRENT_TRANSACTIONS begin soon and stay bounded:
// the first waits are a millisecond (not the usual 10 ms backoff), at
// most ten of them, then the usual backoff, doubling.
func TestConcurrentTransactionsRetryPace(t *testing.T) {
	waits := fencing.ConcurrentRetryWaits(14)
	require.Len(t, waits, 14)
	for i, w := range waits[:10] {
		assert.Equal(t, time.Millisecond, w, "retry %d", i+1)
	}
	assert.Equal(t, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}, waits[10:])
}
