package fencing_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// faultyTransport is a transport whose retries give up quickly, so a test
// can run them out.
func (e *env) faultyTransport() *fencing.BrokerTransport {
	e.t.Helper()
	e.c.RequireFake(e.t)
	cfg := e.c.Config
	cfg.RequestTimeout = 300 * time.Millisecond
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { assert.NoError(e.t, tr.Close()) })
	return tr
}

// A produce that the leader appends but answers REQUEST_TIMED_OUT is sent
// again with the same sequence number, and the broker deduplicates it: the
// lease shows once, and later writes of the epoch go on.
func TestProduceRetryIsDeduplicated(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("dedup")
		tr := e.faultyTransport()
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		l0, l1, l2 := lease(t, "n0", tok), lease(t, "n1", tok), lease(t, "n2", tok)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l0)))

		h := e.c.Fake.Fault(kfakeFault(e.c.Config.Topic, kerr.RequestTimedOut, 1))
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l1)))
		assert.Equal(t, 1, h.Hits(), "the fault answered one produce")
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l2)))

		recs, err := tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{l0, l1, l2}, leases(recs))
	})
}

// When the leader answers every produce of a transaction
// REQUEST_TIMED_OUT (it may have appended the batch), the write fails with
// ErrProducer and the transaction is aborted; the next transaction of the
// epoch finds the sequence number the broker expects. A write that
// pipelined its commit behind the produce (the coordinator is the
// partition's leader) may have committed the batch: its outcome is
// unknown and the token is retired.
func TestAmbiguousProduceAnswerKeepsTheSequence(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("sequence")
		tr := e.faultyTransport()
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		l0, l1, l2, l3 := lease(t, "n0", tok), lease(t, "n1", tok), lease(t, "n2", tok), lease(t, "n3", tok)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l0)))

		h := e.c.Fake.Fault(kfakeFault(e.c.Config.Topic, kerr.RequestTimedOut, -1))
		err = leaseErr(tr.WriteLease(ctx, role, tok, l1))
		h.Remove()
		require.Error(t, err)
		if tr.Pipelining() && e.nodes == 1 {
			assert.ErrorIs(t, err, fencing.ErrUnknownOutcome)
			require.ErrorIs(t, leaseErr(tr.WriteLease(ctx, role, tok, l2)), fencing.ErrNotHeld, "the token is retired")
			return
		}
		assert.ErrorIs(t, err, fencing.ErrProducer)
		assert.False(t, fencing.IsFenced(err))

		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l2)), "the next write finds the sequence")
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l3)))
		recs, err := tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{l0, l2, l3}, leases(recs), "the failed write was aborted")
	})
}

// A produce whose connection breaks before an answer has an unknown
// outcome: the write returns ErrUnknownOutcome, the token is retired (the
// next write gets ErrNotHeld, saying so, and sends nothing), and what the
// write sent never shows: the next token's AcquireEpoch aborts it.
func TestLostProduceAnswerRetiresTheToken(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("retire")
		tr := e.faultyTransport()
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		e.place(role)
		l0, l1 := lease(t, "n0", tok), lease(t, "n1", tok)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l0)))

		var active, lost, reacquired atomic.Bool
		active.Store(true)
		var after atomic.Int32 // transactional requests after the lost produce, before the next AcquireEpoch
		e.c.Fake.Control(func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			e.c.Fake.KeepControl()
			switch kreq.(type) {
			case *kmsg.EndTxnRequest, *kmsg.AddPartitionsToTxnRequest, *kmsg.ProduceRequest:
				if lost.Load() && !reacquired.Load() {
					after.Add(1)
				}
			}
			return nil, nil, false
		})
		e.c.Fake.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			if !active.Load() {
				e.c.Fake.DropControl()
				return nil, nil, false
			}
			e.c.Fake.KeepControl()
			lost.Store(true)
			return nil, errors.New("injected: connection closed"), true
		})
		err = leaseErr(tr.WriteLease(ctx, role, tok, l1))
		active.Store(false)
		require.Error(t, err)
		assert.ErrorIs(t, err, fencing.ErrUnknownOutcome)
		assert.False(t, fencing.IsFenced(err))

		err = leaseErr(tr.WriteLease(ctx, role, tok, lease(t, "n2", tok)))
		require.ErrorIs(t, err, fencing.ErrNotHeld)
		assert.Contains(t, err.Error(), "retired after an unknown outcome")
		assert.Zero(t, after.Load(), "nothing is sent under a retired token, not even an abort")

		reacquired.Store(true)
		tok2, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		l3 := lease(t, "n3", tok2)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok2, l3)))
		recs, err := tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{l0, l3}, leases(recs), "the write without an answer never shows")
	})
}

func kfakeFault(topic string, code *kerr.Error, count int) kfake.Fault {
	return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: code, Count: count}
}
