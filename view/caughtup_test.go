package view

import (
	"context"
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

// gokaRecovered waits (briefly) for goka's own notion of recovery, which
// the view's topic manager makes reachable.
func gokaRecovered(t *testing.T, v *View) {
	t.Helper()
	require.Eventually(t, func() bool {
		gv := v.glue.gv.Load()
		return gv != nil && gv.Recovered()
	}, 10*time.Second, 10*time.Millisecond, "goka's View.Recovered() never turned true")
}

func TestCaughtUpOnEmptyPartitions(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 3})
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	assert.True(t, v.CaughtUp())
	gokaRecovered(t, v)
	s := v.Stats()
	require.Len(t, s.Partitions, 3)
	for _, ps := range s.Partitions {
		assert.Equal(t, int64(0), ps.Next)
		assert.Equal(t, int64(0), ps.CaughtUpTo)
	}
	snap, err := v.Snapshot(testCtx(t))
	require.NoError(t, err)
	assert.Empty(t, snap)
}

func TestCaughtUpOnPartitionEndingInMarker(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	w := newWriter(t, c, 2)
	tp := w.txnProducer("w")
	now := time.Now()
	byPart := rolesInPartitions("role", 2, 1)
	r, q := byPart[0][0], byPart[1][0]
	w.register(r, "a")
	l := tp.sign(mkLease("a", 1, now, time.Minute))
	off := w.lease(tp, r, l, true) // offset 1, commit marker at 2
	w.lease(tp, r, mkLease("b", 2, now, time.Minute), false)

	// Started after the writes: partition 0 ends in an abort marker
	// (offsets 3 and 4), which a consumer is never handed.
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	gokaRecovered(t, v)
	got, held, err := v.Holder(testCtx(t), r, now)
	require.NoError(t, err)
	assert.True(t, held)
	assert.Equal(t, l, got)
	s := v.Stats()
	assert.Equal(t, off+1, s.Partitions[0].Next)
	assert.Equal(t, int64(5), s.Partitions[0].CaughtUpTo)
	assert.Equal(t, int64(0), s.Partitions[1].CaughtUpTo)

	// goka holds every partition back until all have recovered; the other
	// partition must keep following the topic.
	w.register(q, "x")
	caughtUp(t, v)
	cs, err := v.Candidates(testCtx(t), q)
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"x"}, members(cs))
	assert.Eventually(t, func() bool { return v.Stats().Partitions[0].HighWatermark == 5 }, 5*time.Second, 10*time.Millisecond,
		"the consumer reports the high watermark, markers included")
}

func TestCaughtUpWithOpenTransaction(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	tp := w.txnProducer("w") // transaction timeout 10s
	now := time.Now()
	w.register("r", "a")
	require.NoError(t, tp.BeginTxn())
	_, _, err := tp.SendMessage(leaseMsg(t, w, "r", mkLease("a", 1, now, time.Minute)))
	require.NoError(t, err)
	w.register("r", "b") // after the open transaction's first offset

	v, _ := runView(t, c.Config, Options{})
	// Caught up means read up to the last stable offset: well before the
	// transaction times out.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, v.WaitCaughtUp(ctx))
	gokaRecovered(t, v)
	st, err := v.Role(ctx, "r")
	require.NoError(t, err)
	assert.Nil(t, st.Lease, "an open transaction's lease does not show")
	assert.Equal(t, []codec.MemberID{"a"}, members(st.Candidates), "nothing past the last stable offset shows")
	assert.Equal(t, int64(1), v.Stats().Partitions[0].CaughtUpTo)

	require.NoError(t, tp.CommitTxn())
	caughtUp(t, v)
	st, err = v.Role(testCtx(t), "r")
	require.NoError(t, err)
	require.NotNil(t, st.Lease)
	assert.Equal(t, codec.MemberID("a"), st.Lease.Member)
	assert.Equal(t, []codec.MemberID{"a", "b"}, members(st.Candidates))
}

// TestProberLastRecord checks the probe on a partition that ends in a long
// run of aborted transactions (longer than the first probe window).
func TestProberLastRecord(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	tp := w.txnProducer("w")
	now := time.Now()
	w.register("r", "a")                                              // 0
	last := w.lease(tp, "r", mkLease("a", 1, now, time.Minute), true) // 1, marker 2
	for i := 0; i < 40; i++ {                                         // 3..82: data+abort marker
		w.lease(tp, "r", mkLease("b", 2, now, time.Minute), false)
	}
	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	client, err := sarama.NewClient(c.Config.Brokers, sc)
	require.NoError(t, err)
	defer client.Close()
	pr := &prober{client: client, topic: c.Config.Topic}
	ctx := testCtx(t)

	lsos, err := pr.listOffsets(ctx, []int32{0}, sarama.OffsetNewest)
	require.NoError(t, err)
	require.Equal(t, int64(83), lsos[0])
	got, err := pr.lastRecordBefore(ctx, 0, 0, lsos[0])
	require.NoError(t, err)
	assert.Equal(t, last, got)
	got, err = pr.lastRecordBefore(ctx, 0, last+1, lsos[0])
	require.NoError(t, err)
	assert.Equal(t, int64(-1), got, "only markers and aborted records above the floor")
	got, err = pr.lastRecordBefore(ctx, 0, 0, last)
	require.NoError(t, err)
	assert.Equal(t, int64(0), got)
	got, err = pr.lastRecordBefore(ctx, 0, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), got)
}

// TestCrashMidWriteHoldsTheViewBackOnlyUntilTheTransactionTimesOut: a
// holder dies inside its lease transaction. Until the coordinator aborts it
// (after the transaction timeout), records behind it are invisible but the
// view counts as caught up; afterwards they show, and the dead lease never
// does.
func TestCrashMidWriteHoldsTheViewBackOnlyUntilTheTransactionTimesOut(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	w.register("r", "a")
	dead := w.txnProducerTimeout("dead", time.Second)
	require.NoError(t, dead.BeginTxn())
	_, _, err := dead.SendMessage(leaseMsg(t, w, "r", mkLease("a", 1, time.Now(), time.Minute)))
	require.NoError(t, err)
	// The holder is gone: no commit, no abort.
	w.register("r", "b")

	ctx := testCtx(t)
	caughtUp(t, v)
	cs, err := v.Candidates(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"a"}, members(cs), "b waits behind the open transaction")

	require.Eventually(t, func() bool {
		if v.WaitCaughtUp(ctx) != nil {
			return false
		}
		cs, err := v.Candidates(ctx, "r")
		return err == nil && len(cs) == 2
	}, 20*time.Second, 50*time.Millisecond, "the coordinator's abort releases the records behind the transaction")
	st, err := v.Role(ctx, "r")
	require.NoError(t, err)
	assert.Nil(t, st.Lease, "the dead holder's lease never shows")
	assert.Equal(t, []codec.MemberID{"a", "b"}, members(st.Candidates))
}

// consumerState is what the view knows of partition p's consumers: how
// many goka started, whether goka's recovery phase has ended, where the
// consumer that follows the topic started (-1: not yet) and the highest
// offset it has handed the view (-1: none).
func consumerState(v *View, p int32) (consumers int, recovered bool, from, live int64) {
	gp := v.glue.state(p)
	return gp.consumers, gp.recovered, gp.from, v.progress.liveOf(p)
}

// TestFirstCatchUpLeavesTheConsumerFetching: goka runs a partition in two
// phases, recovery and catch-up, each with its own consumer, and a new
// consumer's first fetch comes late (sarama's batched new subscriptions
// for 100ms). A view that reported caught up once recovery had read the
// last record showed the records committed in its next 100-300ms that
// much late. The first catch-up must leave every partition that holds a record
// read by the one consumer that follows the topic for the rest of the Run,
// and that consumer must have handed the view a record, so it is
// subscribed and fetching.
func TestFirstCatchUpLeavesTheConsumerFetching(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 3})
	w := newWriter(t, c, 3)
	tp := w.txnProducer("w")
	now := time.Now()
	byPart := rolesInPartitions("role", 3, 1)
	for p := int32(0); p < 3; p++ {
		w.register(byPart[p][0], "a")
	}
	w.lease(tp, byPart[1][0], mkLease("a", 1, now, time.Minute), true)  // ends in a commit marker
	w.lease(tp, byPart[2][0], mkLease("b", 2, now, time.Minute), false) // ends in an abort marker

	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	for p := int32(0); p < 3; p++ {
		n, recovered, from, live := consumerState(v, p)
		assert.True(t, recovered, "partition %d: goka's recovery phase has ended", p)
		assert.Equal(t, 1, n, "partition %d: goka started one consumer, the one that follows the topic", p)
		assert.GreaterOrEqual(t, from, int64(0), "partition %d: the consumer that follows the topic has started", p)
		assert.GreaterOrEqual(t, live, from, "partition %d: that consumer has handed the view a record", p)
	}

	// What is written now reaches the view through the same consumers.
	ctx := testCtx(t)
	changes := v.Watch(ctx)
	for p := int32(0); p < 3; p++ {
		w.register(byPart[p][0], "z")
	}
	for i := 0; i < 3; i++ {
		select {
		case ch := <-changes:
			assert.Equal(t, []codec.MemberID{"z"}, ch.Joined)
		case <-ctx.Done():
			t.Fatal("no change delivered")
		}
	}
	for p := int32(0); p < 3; p++ {
		n, _, _, _ := consumerState(v, p)
		assert.Equal(t, 1, n, "partition %d: no consumer restarted", p)
	}
}

// TestFirstCatchUpAfterResumeReplaysOneRecord: a view resuming from its
// state dir, with nothing new in the topic, has nothing to read; its
// consumer starts at the last record it stored and hands it again, which
// proves the consumer is fetching, and which is not applied twice.
func TestFirstCatchUpAfterResumeReplaysOneRecord(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	w := newWriter(t, c, 2)
	tp := w.txnProducer("w")
	byPart := rolesInPartitions("role", 2, 1)
	r, q := byPart[0][0], byPart[1][0]
	w.register(r, "a")
	lastR := w.register(r, "b")
	w.register(q, "a")
	lastQ := w.lease(tp, q, mkLease("a", 1, time.Now(), time.Minute), true) // then a commit marker
	dir := t.TempDir()

	v1, stop1 := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v1)
	want, err := v1.Snapshot(testCtx(t))
	require.NoError(t, err)
	stop1()

	v2, _ := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v2)
	for p, last := range map[int32]int64{0: lastR, 1: lastQ} {
		n, _, from, live := consumerState(v2, p)
		assert.Equal(t, 1, n, "partition %d", p)
		assert.Equal(t, last, from, "partition %d: the consumer starts at the last stored record", p)
		assert.Equal(t, last, live, "partition %d: and has handed it again", p)
	}
	assert.Equal(t, int64(0), v2.Stats().Applied, "a replayed record is not applied")
	got, err := v2.Snapshot(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, unseen(want...), unseen(got...), "the same table (each lease stamped when restored)")

	w.register(r, "c")
	caughtUp(t, v2)
	cs, err := v2.Candidates(testCtx(t), r)
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"a", "b", "c"}, members(cs))
	assert.Equal(t, int64(1), v2.Stats().Applied)
}

// TestCatchUpIgnoresARecordAppliedAfterItsProbe: WaitCaughtUp probes the
// partition's end, and a record committed after that answer is applied
// before WaitCaughtUp looks at what the view has read. The partition did
// not go backwards (the record is past the probed end because it came
// later), so WaitCaughtUp returns at once rather than wait for a rebuild
// that never comes.
func TestCatchUpIgnoresARecordAppliedAfterItsProbe(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	c.RequireFake(t)
	w := newWriter(t, c, 1)
	w.register("db", "a") // offset 0: the end is 1
	v, _ := runView(t, c.Config, Options{HealthInterval: time.Hour})
	caughtUp(t, v)
	healthy(t, v) // the monitor's first probe is done; the next is an hour away

	var armed atomic.Bool
	armed.Store(true)
	c.Fake.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		lr := req.(*kmsg.ListOffsetsRequest)
		if lr.IsolationLevel != 1 || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		// Answer the end as it is now (1), after a record at offset 1
		// has been committed and applied.
		c.Fake.SleepControl(func() {
			w.register("db", "b")
			assert.Eventually(t, func() bool { return v.progress.lastOf(0) == 1 }, 20*time.Second, time.Millisecond)
		})
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		resp.Version = lr.Version
		for _, rt := range lr.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.Offset, sp.Timestamp, sp.LeaderEpoch = rp.Partition, 1, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, v.WaitCaughtUp(ctx))
	assert.False(t, armed.Load(), "the probe was answered with the earlier end")
	assert.True(t, v.Health().Healthy, "nothing went backwards")
}
