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
		require.NoError(t, tr.WriteLease(ctx, role, tok, l0))

		h := e.c.Fake.Fault(kfakeFault(e.c.Config.Topic, kerr.RequestTimedOut, 1))
		require.NoError(t, tr.WriteLease(ctx, role, tok, l1))
		assert.Equal(t, 1, h.Hits(), "the fault answered one produce")
		require.NoError(t, tr.WriteLease(ctx, role, tok, l2))

		recs, err := tr.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		assert.Equal(t, []codec.Lease{l0, l1, l2}, leases(recs))
	})
}

// When no produce of a transaction gets a definite answer, the write fails
// with ErrProducer and the transaction is aborted; the next transaction of
// the epoch finds the sequence number the broker expects, whether the lost
// batch was appended or not.
func TestLostProduceAnswerKeepsTheSequence(t *testing.T) {
	for _, tc := range []struct {
		name     string
		appended bool
	}{
		{"appended, answered REQUEST_TIMED_OUT", true},
		{"connection closed before the append", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onEachCluster(t, func(t *testing.T, e *env) {
				ctx := e.ctx()
				role := codec.Role("sequence")
				tr := e.faultyTransport()
				tok, err := tr.AcquireEpoch(ctx, role)
				require.NoError(t, err)
				e.place(role)
				l0, l1, l2, l3 := lease(t, "n0", tok), lease(t, "n1", tok), lease(t, "n2", tok), lease(t, "n3", tok)
				require.NoError(t, tr.WriteLease(ctx, role, tok, l0))

				var stop func()
				if tc.appended {
					h := e.c.Fake.Fault(kfakeFault(e.c.Config.Topic, kerr.RequestTimedOut, -1))
					stop = h.Remove
				} else {
					var active atomic.Bool
					active.Store(true)
					e.c.Fake.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
						if !active.Load() {
							e.c.Fake.DropControl()
							return nil, nil, false
						}
						e.c.Fake.KeepControl()
						return nil, errors.New("injected: connection closed"), true
					})
					stop = func() { active.Store(false) }
				}
				err = tr.WriteLease(ctx, role, tok, l1)
				stop()
				require.Error(t, err)
				assert.ErrorIs(t, err, fencing.ErrProducer)
				assert.False(t, fencing.IsFenced(err))

				require.NoError(t, tr.WriteLease(ctx, role, tok, l2), "the next write finds the sequence")
				require.NoError(t, tr.WriteLease(ctx, role, tok, l3))
				recs, err := tr.ReadRoleRecords(ctx, role)
				require.NoError(t, err)
				assert.Equal(t, []codec.Lease{l0, l2, l3}, leases(recs), "the failed write was aborted")
			})
		})
	}
}

func kfakeFault(topic string, code *kerr.Error, count int) kfake.Fault {
	return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: code, Count: count}
}
