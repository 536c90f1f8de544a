package view

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// newTestConsumer returns the view's consumer on c, closed when the test
// ends.
func newTestConsumer(t *testing.T, c *testcluster.Cluster, backwards func(*OffsetsWentBackwardsError)) *fetchConsumer {
	t.Helper()
	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	sc.Consumer.MaxWaitTime = fetchMaxWait
	client, err := sarama.NewClient(c.Config.Brokers, sc)
	require.NoError(t, err)
	cons := newFetchConsumer(client, sc, backwards)
	t.Cleanup(func() {
		require.NoError(t, cons.Close())
		_ = client.Close()
	})
	return cons
}

func recvMsg(t *testing.T, pc sarama.PartitionConsumer) *sarama.ConsumerMessage {
	t.Helper()
	select {
	case m, ok := <-pc.Messages():
		require.True(t, ok, "Messages closed")
		return m
	case err := <-pc.Errors():
		t.Fatalf("error instead of a record: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no record")
	}
	return nil
}

func batchHeader(t *testing.T, m *sarama.ConsumerMessage) batchInfo {
	t.Helper()
	require.Len(t, m.Headers, 1, "exactly one header: the batch header")
	require.Equal(t, BatchHeader, string(m.Headers[0].Key))
	b, ok := decodeBatchInfo(m.Headers[0].Value)
	require.True(t, ok)
	return b
}

// TestConsumerReadsCommittedWithBatchHeaders: the view's consumer hands
// over what a read_committed consumer is handed, and nothing else: no
// transaction markers, no aborted records (also when an aborted
// transaction interleaves with a committed one of another producer), and
// each record with its batch's producer id, epoch and transactional flag.
// A header a writer put on a record is dropped, even one named like the
// batch header.
func TestConsumerReadsCommittedWithBatchHeaders(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	a, b := w.txnProducer("a"), w.txnProducer("b")
	forged := &sarama.ProducerMessage{Topic: c.Config.Topic, Key: sarama.StringEncoder("forged"), Value: sarama.StringEncoder("x"),
		Headers: []sarama.RecordHeader{{Key: []byte(BatchHeader), Value: encodeBatchInfo(&sarama.RecordBatch{ProducerID: a.token.ProducerID, IsTransactional: true})[0].Value}}}
	_, plainOff, err := w.plain.SendMessage(forged) // 0
	require.NoError(t, err)
	aborted := w.lease(a, "r", mkLease("a", 0, time.Now(), time.Hour), false) // 1, abort marker 2
	require.NoError(t, a.BeginTxn())
	require.NoError(t, b.BeginTxn())
	_, a1, err := a.SendMessage(leaseMsg(t, w, "r", mkLease("a", 0, time.Now(), time.Hour))) // 3
	require.NoError(t, err)
	_, b1, err := b.SendMessage(leaseMsg(t, w, "q", mkLease("b", 0, time.Now(), time.Hour))) // 4
	require.NoError(t, err)
	_, a2, err := a.SendMessage(leaseMsg(t, w, "r", mkLease("a", 0, time.Now(), time.Hour))) // 5
	require.NoError(t, err)
	require.NoError(t, b.CommitTxn())
	require.NoError(t, a.AbortTxn())
	last := w.register("r", "z")

	cons := newTestConsumer(t, c, nil)
	pc, err := cons.ConsumePartition(c.Config.Topic, 0, sarama.OffsetOldest)
	require.NoError(t, err)
	var got []int64
	var heads []batchInfo
	for len(got) == 0 || got[len(got)-1] != last {
		m := recvMsg(t, pc)
		got = append(got, m.Offset)
		heads = append(heads, batchHeader(t, m))
	}
	assert.Equal(t, []int64{plainOff, b1, last}, got, "aborted %d, %d, %d and the markers are not handed over", aborted, a1, a2)
	assert.Equal(t, batchInfo{producerID: -1, epoch: -1}, heads[0], "a plain append; the writer's header is gone")
	assert.Equal(t, batchInfo{producerID: b.token.ProducerID, epoch: b.token.Epoch, transactional: true}, heads[1])
	assert.False(t, heads[2].transactional)
	assert.Equal(t, int64(last+1), pc.HighWaterMarkOffset())
	_, err = cons.ConsumePartition(c.Config.Topic, 0, 0)
	assert.Error(t, err, "one consumer per partition")
	require.NoError(t, pc.Close())
	_, open := <-pc.Messages()
	assert.False(t, open, "Close closes Messages")
}

// TestConsumerFollowsALeaderMove: the partition's leader moves to another
// broker; the consumer refreshes the metadata, reconnects to the new
// leader and hands over the next record, without an error on Errors.
func TestConsumerFollowsALeaderMove(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 2, Partitions: 1})
	c.RequireFake(t)
	w := newWriter(t, c, 1)
	first := w.register("r", "a")
	cons := newTestConsumer(t, c, nil)
	pc, err := cons.ConsumePartition(c.Config.Topic, 0, sarama.OffsetOldest)
	require.NoError(t, err)
	assert.Equal(t, first, recvMsg(t, pc).Offset)

	leader, err := cons.client.Leader(c.Config.Topic, 0)
	require.NoError(t, err)
	to := int32(1 - leader.ID())
	require.NoError(t, c.Fake.MoveTopicPartition(c.Config.Topic, 0, to))
	next := w.register("r", "b")
	assert.Equal(t, next, recvMsg(t, pc).Offset)
	assert.Empty(t, pc.Errors(), "a leader move is handled, not reported")
	now, err := cons.client.Leader(c.Config.Topic, 0)
	require.NoError(t, err)
	assert.Equal(t, to, now.ID())
}

// TestConsumerReportsRepeatedFailures: a partition whose fetches keep
// failing (here NOT_LEADER_OR_FOLLOWER, answered by the cluster's fault
// control) gets an error on Errors after fetchFailuresReported failures in
// a row, as goka expects, and the consumer goes on fetching: once the
// fault ends it hands over the record.
func TestConsumerReportsRepeatedFailures(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	c.RequireFake(t)
	w := newWriter(t, c, 1)
	off := w.register("r", "a")
	var failing atomic.Int32
	failing.Store(fetchFailuresReported)
	c.Fake.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		if failing.Add(-1) < 0 {
			return nil, nil, false
		}
		req := kreq.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kmsgNotLeader
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				sp.RecordBatches = []byte{}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	cons := newTestConsumer(t, c, nil)
	pc, err := cons.ConsumePartition(c.Config.Topic, 0, 0)
	require.NoError(t, err)
	select {
	case e := <-pc.Errors():
		assert.ErrorIs(t, e.Err, sarama.ErrNotLeaderForPartition)
		assert.Equal(t, int32(0), e.Partition)
	case <-time.After(10 * time.Second):
		t.Fatal("no error reported")
	}
	assert.Equal(t, off, recvMsg(t, pc).Offset)
}

// kmsgNotLeader is NOT_LEADER_OR_FOLLOWER.
const kmsgNotLeader = 6

// TestConsumerOutOfRange: below the log start (records deleted), the
// consumer moves on to the log start; past the partition's end (the topic
// recreated), it reports an *OffsetsWentBackwardsError on Errors and to
// its backwards hook, and stops fetching.
func TestConsumerOutOfRange(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	for _, m := range []codec.MemberID{"a", "b", "c"} {
		w.register("r", m)
	}
	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	admin, err := sarama.NewClusterAdmin(c.Config.Brokers, sc)
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.DeleteRecords(c.Config.Topic, map[int32]int64{0: 2}))

	var hook atomic.Pointer[OffsetsWentBackwardsError]
	cons := newTestConsumer(t, c, func(e *OffsetsWentBackwardsError) { hook.Store(e) })
	pc, err := cons.ConsumePartition(c.Config.Topic, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), recvMsg(t, pc).Offset, "the consumer moves on to the log start")

	pc2, err := cons.ConsumePartition(c.Config.Topic, 0, 0)
	assert.Error(t, err, "still one consumer per partition")
	assert.Nil(t, pc2)
	require.NoError(t, pc.Close())

	pc, err = cons.ConsumePartition(c.Config.Topic, 0, 7) // past the end (3)
	require.NoError(t, err)
	select {
	case e := <-pc.Errors():
		var back *OffsetsWentBackwardsError
		require.True(t, errors.As(e.Err, &back), "%v", e.Err)
		assert.Equal(t, int64(7), back.Offset)
		assert.Equal(t, int64(3), back.End)
		assert.Equal(t, back, hook.Load())
	case <-time.After(10 * time.Second):
		t.Fatal("no error reported")
	}
	select {
	case _, ok := <-pc.Messages():
		t.Fatalf("a record or a closed Messages before AsyncClose (open %v)", ok)
	default:
	}
	pc.AsyncClose()
	for range pc.Messages() {
	}
	for range pc.Errors() {
	}
}

// TestConsumerPartitionFreeOnceDrained: goka ends a partition consumer with
// AsyncClose, drains Messages and Errors until both are closed, and at once
// consumes the same partition again (recovery, then catch-up). Once both
// channels are closed the partition must be free, as in sarama's consumer:
// a map entry that outlived the channels would fail goka's catch-up with
// "already being consumed".
func TestConsumerPartitionFreeOnceDrained(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	w.register("r", "a")
	cons := newTestConsumer(t, c, nil)
	for i := range 200 {
		pc, err := cons.ConsumePartition(c.Config.Topic, 0, 0)
		require.NoError(t, err, "round %d: the previous consumer was drained", i)
		if i%2 == 0 {
			recvMsg(t, pc)
		}
		pc.AsyncClose()
		for range pc.Messages() {
		}
		for range pc.Errors() {
		}
	}
}
