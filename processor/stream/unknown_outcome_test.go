package stream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// A write without an answer, through the stream: on 3
// brokers, with the role's transaction coordinator on one broker and the
// output partition's leader on another, the leader holds back the first
// batch's produce past the client's request timeout (the default, 10 s;
// the transaction timeout is 20 s, the one of a 40 s lease). The late
// produce reaches the leader while the next transaction's produce is out.
// The output must hold each input exactly once.
//
// Run returns ErrUnknownOutcome (the transport retired the token) and
// commits nothing more under it; the next holding (a new token, whose
// InitProducerId aborted the first transaction) processes the batch once.
// A stream that took the timeout for a retriable failure, aborted under
// the same epoch and processed the batch again under it would let the
// late batch land in that transaction: the output would hold every record
// twice.
func TestStreamWriteWithoutAnswerNeverShows(t *testing.T) {
	t.Parallel()
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 3, Partitions: 3})
	e := &env{t: t, c: c, nodes: 3}
	ctx := e.ctx()
	role := codec.Role("stalled-stream")
	input, output := e.topic("input", 1), e.topic("output", 1)
	coord := c.Fake.CoordinatorFor(c.Config.TransactionalID(string(role)))
	if c.Fake.LeaderFor(output, 0) == coord {
		require.NoError(t, c.Fake.MoveTopicPartition(output, 0, (coord+1)%3))
	}
	leader := c.Fake.LeaderFor(output, 0)
	require.NotEqual(t, coord, leader)
	group := c.Name("group")
	end := e.produce(input, 0, 3)

	cfg := c.Config
	cfg.ClientID = "holder"
	cfg.RequestTimeout = 0 // the default, 10 s
	cfg.TxnTimeout = 20 * time.Second
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	require.Equal(t, fencing.DefaultRequestTimeout, tr.Config().RequestTimeout)

	// run starts Run for tok until the group's offsets reach end.
	run := func(tok codec.Token, holder int) <-chan error {
		rctx, cancel := context.WithCancel(ctx)
		var calls atomic.Int64
		progress := map[int32]int64{}
		errc := make(chan error, 1)
		go func() {
			defer cancel()
			errc <- Run(rctx, Config{
				Transport: tr, Group: group, Input: input, Output: output, BatchSize: 64,
				Transform: transformFor(holder, &calls),
				OnCommit: func(cm Commit) {
					for p, off := range cm.Offsets {
						progress[p] = off
					}
					if done(progress, end) {
						cancel()
					}
				},
			}, role, tok)
		}()
		return errc
	}

	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	held := fn.Hold(faultnet.Rule{APIKey: 0 /* Produce */, Node: leader, ClientID: "holder", Count: 1})
	errc := run(tok, 0)
	require.NoError(t, held.Wait(ctx, 1), "the first batch's produce is held")
	next := fn.Hold(faultnet.Rule{APIKey: 0, Node: leader, ClientID: "holder", Count: 1})

	caught := make(chan error, 1)
	go func() { caught <- next.Wait(ctx, 1) }()
	select {
	case <-caught:
		// The same holding went on: the wrong outcome, which the
		// exactly-once check below catches.
	case err := <-errc:
		require.ErrorIs(t, err, fencing.ErrUnknownOutcome, "Run stops its holding")
		assert.False(t, fencing.IsFenced(err))
		tok2, err := tr.AcquireEpoch(ctx, role) // the next holding
		require.NoError(t, err)
		errc = run(tok2, 1)
		require.NoError(t, <-caught, "the next holding's produce reaches faultnet")
	}
	held.Release()
	require.NoError(t, held.WaitDelivered(ctx, 1), "the late batch reaches the leader")
	// One round trip more: kfake handles the requests of all its brokers
	// in one loop, so the late batch is handled before the next is
	// released.
	_, _, _ = tr.Describe(ctx, role)
	next.Release()
	require.NoError(t, <-errc, "the run reaches the end of the input")

	requireExactlyOnce(t, outputs(t, e.read(output, sarama.ReadCommitted)), 3)
	assert.Equal(t, end, e.committedOffsets(group, input))
}
