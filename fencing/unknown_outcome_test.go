package fencing_test

import (
	"context"
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

const produceKey = 0 // kmsg.Produce

// A write without an answer, for a fenced Writer: on 3
// brokers, with the role's transaction coordinator on one broker and the
// output partition's leader on another, the leader holds back the produce
// of X1 past the client's request timeout (the default, 10 s); the
// transaction timeout is 20 s (the one of a 40 s lease), so the
// transaction is still open when the client gives up. The client then
// makes its next write, and X1 reaches the leader while that write's
// transaction is under way. A read_committed reader (sarama's consumer,
// not krole's read path) must never see X1.
//
// The write of X1 returns ErrUnknownOutcome, the token is retired (the
// next write under it is ErrNotHeld and sends nothing), and the holder
// writes X2 under a new token, whose InitProducerId aborted X1's
// transaction; the late X1 is refused as a stale epoch. A transport that
// took the timeout for a plain failure, aborted under the same epoch and
// began the next transaction under it would let X1 land in that
// transaction: the reader would see [X1 X2].
func TestWriteWithoutAnswerNeverShows(t *testing.T) {
	t.Parallel()
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 3, Partitions: partitions})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	role := codec.Role("stalled-writer")
	out, leader := stalledArrangement(t, c, role)

	cfg := c.Config
	cfg.ClientID = "holder"
	cfg.RequestTimeout = 0 // the default, 10 s
	cfg.TxnTimeout = 20 * time.Second
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	require.Equal(t, fencing.DefaultRequestTimeout, tr.Config().RequestTimeout)

	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	msg := func(v string) fencing.Message {
		return fencing.Message{Topic: out, Partition: 0, Value: []byte(v)}
	}
	held := fn.Hold(faultnet.Rule{APIKey: produceKey, Node: leader, ClientID: "holder", Count: 1})
	err = tr.Writer(role, tok).Write(ctx, msg("X1"))
	require.Error(t, err, "the client gives up on X1")
	require.Equal(t, 1, held.Count(), "X1's produce was held")
	assert.ErrorIs(t, err, fencing.ErrUnknownOutcome)
	assert.False(t, fencing.IsFenced(err))

	// The next write: X2. While its produce is out, X1 arrives.
	next := fn.Hold(faultnet.Rule{APIKey: produceKey, Node: leader, ClientID: "holder", Count: 1})
	write := func(tok codec.Token) (caught bool, errc <-chan error) {
		ch := make(chan error, 1)
		go func() { ch <- tr.Writer(role, tok).Write(ctx, msg("X2")) }()
		wait := make(chan error, 1)
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { wait <- next.Wait(wctx, 1) }()
		select {
		case <-wait:
			return true, ch
		case err := <-ch:
			ch <- err
			return false, ch
		}
	}
	caught, errc := write(tok)
	if !caught {
		err := <-errc
		require.ErrorIs(t, err, fencing.ErrNotHeld, "the retired token sends nothing")
		assert.ErrorIs(t, err, fencing.ErrRetired, "a retirement, told apart from a token forgotten after a fence")
		assert.Contains(t, err.Error(), "retired after an unknown outcome")
		tok2, err := tr.AcquireEpoch(ctx, role) // the holder's next holding
		require.NoError(t, err)
		caught, errc = write(tok2)
		require.True(t, caught, "X2's produce reaches faultnet")
	}
	held.Release()
	require.NoError(t, held.WaitDelivered(ctx, 1), "X1 reaches the leader")
	// One round trip more: kfake handles the requests of all its brokers
	// in one loop, so X1 is handled before X2 is released.
	_, _, _ = tr.Describe(ctx, role)
	next.Release()
	require.NoError(t, <-errc, "X2 commits")

	got := values(c.ReadAll(t, out, sarama.ReadCommitted, 20*time.Second))
	assert.Equal(t, []string{"X2"}, got, "a write that returned an error never becomes visible")
}

// stalledArrangement creates a one-partition output topic and places its
// leader on another broker than role's transaction coordinator; it returns
// the topic and the leader's node.
func stalledArrangement(t *testing.T, c *testcluster.Cluster, role codec.Role) (string, int32) {
	t.Helper()
	out := c.Topic(t, c.Name("out"), 1, 10*time.Second)
	coord := c.Fake.CoordinatorFor(c.Config.TransactionalID(string(role)))
	if c.Fake.LeaderFor(out, 0) == coord {
		require.NoError(t, c.Fake.MoveTopicPartition(out, 0, (coord+1)%3))
	}
	leader := c.Fake.LeaderFor(out, 0)
	require.NotEqual(t, coord, leader)
	return out, leader
}

const endTxnKey = 26 // kmsg.EndTxn

// A commit without an answer is sent again under the same epoch until it
// is answered: the write returns nil and its record shows once. The token
// is retired all the same: the first commit may still arrive, and would
// commit what the token's next transaction had written so far (EndTxn
// below v5 names no transaction); here it arrives in the middle of one.
// When no answer comes before ctx ends, the write returns
// ErrUnknownOutcome, meaning "may have committed": the token is retired,
// and the commit, delivered late, does make the record visible.
func TestCommitWithoutAnswer(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1, Partitions: partitions})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := c.Config
	cfg.ClientID = "committer"
	cfg.RequestTimeout = 500 * time.Millisecond
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	out := c.Topic(t, c.Name("out"), 1, 10*time.Second)
	role := codec.Role("committer")
	msg := func(v string) fencing.Message { return fencing.Message{Topic: out, Partition: 0, Value: []byte(v)} }
	writer := func() *fencing.Writer {
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		return tr.Writer(role, tok)
	}

	t.Run("answered on a resend", func(t *testing.T) {
		w := writer()
		held := fn.Hold(faultnet.Rule{APIKey: endTxnKey, Node: faultnet.AnyNode, ClientID: "committer", Count: 1})
		require.NoError(t, w.Write(ctx, msg("C1")), "the resent commit is answered")
		assert.Equal(t, 1, held.Count(), "the first commit was held")
		released := false
		release := func() {
			if !released {
				released = true
				held.Release()
				require.NoError(t, held.WaitDelivered(ctx, 1))
				_, _, _ = tr.Describe(ctx, role) // one round trip more: kfake has handled it
			}
		}
		err := w.Transact(ctx, func(tx *fencing.Txn) error {
			if err := tx.Write(msg("C2a")); err != nil {
				return err
			}
			release() // the first commit arrives with C2a's transaction open
			return tx.Write(msg("C2b"))
		})
		release()
		require.ErrorIs(t, err, fencing.ErrNotHeld, "the token is retired")
		assert.Equal(t, []string{"C1"}, values(c.ReadAll(t, out, sarama.ReadCommitted, 10*time.Second)),
			"nothing of a call that returned an error shows")
	})

	t.Run("never answered", func(t *testing.T) {
		w := writer()
		held := fn.Hold(faultnet.Rule{APIKey: endTxnKey, Node: faultnet.AnyNode, ClientID: "committer"})
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		err := w.Write(wctx, msg("C3"))
		require.ErrorIs(t, err, fencing.ErrUnknownOutcome)
		assert.Contains(t, err.Error(), "may have committed")
		assert.ErrorIs(t, w.Write(ctx, msg("C4")), fencing.ErrNotHeld, "the token is retired")
		held.Release()
		require.NoError(t, held.WaitDelivered(ctx, 1))
		require.Eventually(t, func() bool {
			return assert.ObjectsAreEqual([]string{"C1", "C3"}, values(c.ReadAll(t, out, sarama.ReadCommitted, 10*time.Second)))
		}, 10*time.Second, 20*time.Millisecond, "the late commit commits: it may have committed, and it did")
	})
}
