package fencing_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// A deposed holder's writes are refused, and never visible to a
// read_committed reader: a write begun after the newer AcquireEpoch is
// refused before it reaches the log, and a transaction that was open when
// the newer holder acquired is aborted (its record is in the log, which a
// read_uncommitted reader shows, but read_committed readers never see it).
// The newer holder's writes go through.
func TestWriterDeposedHolderIsRefused(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("publisher")
		topic := e.dataTopic(3)
		a, b, c := e.c.Transport(e.t), e.c.Transport(e.t), e.c.Transport(e.t)
		msg := func(v string) fencing.Message {
			return fencing.Message{Topic: topic, Partition: fencing.PartitionByKey, Key: []byte("k-" + v), Value: []byte(v)}
		}

		tokA, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		wA := a.Writer(role, tokA)
		assert.Equal(t, role, wA.Role())
		assert.Equal(t, tokA, wA.Token())
		require.NoError(t, leaseErr(a.WriteLease(ctx, role, tokA, lease(t, "node-a", tokA))), "lease and data writes share the token")
		require.NoError(t, wA.Write(ctx, msg("a1")))

		tokB, err := b.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		wB := b.Writer(role, tokB)

		err = wA.Write(ctx, msg("a2-refused"))
		require.Error(t, err)
		assert.True(t, fencing.IsFenced(err), "got %v", err)
		assert.ErrorIs(t, err, fencing.ErrFenced)
		err = wA.Write(ctx, msg("a3-refused"))
		assert.ErrorIs(t, err, fencing.ErrNotHeld, "the fenced token is forgotten")

		require.NoError(t, wB.Write(ctx, msg("b1")))

		// B is deposed in the middle of a transaction: C's AcquireEpoch
		// aborts it, and B's commit is refused.
		var tokC codec.Token
		err = wB.Transact(ctx, func(tx *fencing.Txn) error {
			if err := tx.Write(msg("b2-aborted")); err != nil {
				return err
			}
			var err error
			tokC, err = c.AcquireEpoch(ctx, role)
			require.NoError(t, err)
			return nil
		})
		require.Error(t, err)
		assert.True(t, fencing.IsFenced(err), "got %v", err)
		require.NoError(t, c.Writer(role, tokC).Write(ctx, msg("c1")))

		held, ok, err := a.Describe(ctx, role)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, tokC, held)

		committed := values(e.read(topic, sarama.ReadCommitted))
		assert.ElementsMatch(t, []string{"a1", "b1", "c1"}, committed)
		uncommitted := values(e.read(topic, sarama.ReadUncommitted))
		assert.Contains(t, uncommitted, "b2-aborted", "the aborted record is in the log: only isolation hides it")
		assert.NotContains(t, uncommitted, "a2-refused", "a write begun after the fence never reaches the log")
		assert.NotContains(t, uncommitted, "a3-refused")
	})
}

// KeyPartition places keys exactly as sarama's default hash partitioner
// does, for every partition count.
func TestKeyPartitionMatchesSaramasHashPartitioner(t *testing.T) {
	for _, n := range []int32{1, 2, 3, 7, 16, 100, 1000} {
		sp := sarama.NewHashPartitioner("t")
		for i := 0; i < 2000; i++ {
			key := []byte(fmt.Sprintf("key-%d-%s", i, strings.Repeat("x", i%13)))
			want, err := sp.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, n)
			require.NoError(t, err)
			require.Equal(t, want, fencing.KeyPartition(key, n), "key %q, %d partitions", key, n)
		}
		want, err := sp.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder([]byte{})}, n)
		require.NoError(t, err)
		assert.Equal(t, want, fencing.KeyPartition([]byte{}, n), "the empty key")
	}
}

// Records written with PartitionByKey land in the partition KeyPartition
// names; records with a nil key land in some partition of the topic;
// explicit partitions are kept.
func TestWriterPartitionsByKey(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		const n = 5
		topic := e.dataTopic(n)
		tr := e.c.Transport(e.t)
		role := codec.Role("keyed")
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		var msgs []fencing.Message
		for i := 0; i < 100; i++ {
			msgs = append(msgs, fencing.Message{Topic: topic, Partition: fencing.PartitionByKey, Key: []byte(fmt.Sprintf("user-%d", i)), Value: []byte("keyed")})
		}
		msgs = append(msgs,
			fencing.Message{Topic: topic, Partition: fencing.PartitionByKey, Value: []byte("nil-key")},
			fencing.Message{Topic: topic, Partition: 3, Key: []byte("user-0"), Value: []byte("explicit")},
		)
		require.NoError(t, tr.Writer(role, tok).Write(ctx, msgs...))

		got := e.read(topic, sarama.ReadCommitted)
		require.Len(t, got, len(msgs))
		used := map[int32]bool{}
		for _, m := range got {
			switch string(m.Value) {
			case "keyed":
				assert.Equal(t, fencing.KeyPartition(m.Key, n), m.Partition, "key %s", m.Key)
				used[m.Partition] = true
			case "nil-key":
				assert.Nil(t, m.Key)
				assert.True(t, m.Partition >= 0 && m.Partition < n)
			case "explicit":
				assert.Equal(t, int32(3), m.Partition)
			default:
				t.Errorf("unexpected record %q", m.Value)
			}
		}
		assert.Len(t, used, n, "100 keys spread over every partition")
	})
}

// A write larger than one record batch goes out as several batches of one
// partition, in order, and the sequence numbers of the epoch continue
// across them and across transactions (a wrong sequence would be refused
// OUT_OF_ORDER_SEQUENCE_NUMBER).
func TestWriterLargeWritesKeepOrderAndSequence(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		topic := e.dataTopic(2)
		tr := e.c.Transport(e.t)
		role := codec.Role("bulk")
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		w := tr.Writer(role, tok)
		pad := strings.Repeat("p", 400)
		var want []string
		write := func(from, to int) {
			var msgs []fencing.Message
			for i := from; i < to; i++ {
				v := fmt.Sprintf("%05d", i)
				want = append(want, v)
				msgs = append(msgs, fencing.Message{Topic: topic, Partition: 1, Key: []byte(v), Value: []byte(v + pad)})
			}
			require.NoError(t, w.Write(ctx, msgs...))
		}
		write(0, 3000) // about 1.3 MB: at least three batches
		write(3000, 3001)
		write(3001, 3100)
		require.NoError(t, w.Write(ctx), "an empty write of a held token")

		got := e.read(topic, sarama.ReadCommitted)
		var vals []string
		for _, m := range got {
			require.Equal(t, int32(1), m.Partition)
			vals = append(vals, strings.TrimSuffix(string(m.Value), pad))
		}
		assert.Equal(t, want, vals, "every record once, in order")
	})
}

// A function passed to Writer.Transact that fails aborts the whole
// transaction: none of its writes show.
func TestWriterTransactAbortsOnError(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		topic := e.dataTopic(3)
		tr := e.c.Transport(e.t)
		role := codec.Role("batcher")
		tok, err := tr.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		w := tr.Writer(role, tok)
		boom := errors.New("boom")
		err = w.Transact(ctx, func(tx *fencing.Txn) error {
			require.NoError(t, tx.Write(fencing.Message{Topic: topic, Partition: 0, Value: []byte("aborted-1")}))
			require.NoError(t, tx.Write(fencing.Message{Topic: topic, Partition: 2, Value: []byte("aborted-2")}))
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.NoError(t, w.Transact(ctx, func(tx *fencing.Txn) error {
			if err := tx.Write(fencing.Message{Topic: topic, Partition: 0, Value: []byte("kept-1")}); err != nil {
				return err
			}
			return tx.Write(fencing.Message{Topic: topic, Partition: 1, Value: []byte("kept-2")})
		}))
		assert.ElementsMatch(t, []string{"kept-1", "kept-2"}, values(e.read(topic, sarama.ReadCommitted)))
	})
}

// Messages that cannot be written are refused before anything is sent;
// a token the transport does not hold is refused with ErrNotHeld.
func TestWriterRefusesBadMessages(t *testing.T) {
	c := onOneBroker(t)
	ctx := c.ctx()
	topic := c.dataTopic(3)
	tr := c.c.Transport(t)
	role := codec.Role("strict")
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	w := tr.Writer(role, tok)
	good := fencing.Message{Topic: topic, Partition: 0, Value: []byte("good")}

	bad := map[string]fencing.Message{
		"no topic":            {Partition: 0, Value: []byte("x")},
		"partition -2":        {Topic: topic, Partition: -2, Value: []byte("x")},
		"partition too large": {Topic: topic, Partition: 3, Value: []byte("x")},
	}
	if c.c.Fake != nil { // an outside cluster may create topics on demand
		bad["unknown topic"] = fencing.Message{Topic: topic + ".missing", Partition: 0, Value: []byte("x")}
	}
	for name, m := range bad {
		err := w.Write(ctx, good, m)
		require.Error(t, err, name)
		assert.ErrorIs(t, err, fencing.ErrProducer, name)
		assert.False(t, fencing.IsFenced(err), name)
		t.Logf("%s: %v", name, err)
	}
	require.NoError(t, w.Write(ctx, good), "the token still writes")

	other := c.c.Transport(t)
	err = other.Writer(role, tok).Write(ctx, good)
	assert.ErrorIs(t, err, fencing.ErrNotHeld, "a token another transport minted")
	err = other.Writer(role, tok).Write(ctx)
	assert.ErrorIs(t, err, fencing.ErrNotHeld, "an empty write checks the token too")

	assert.Equal(t, []string{"good"}, values(c.read(topic, sarama.ReadCommitted)))
}

// ---- helpers ----

// onOneBroker returns the env of a fresh one-broker cluster.
func onOneBroker(t *testing.T) *env {
	t.Helper()
	return &env{t: t, c: testcluster.Start(t, testcluster.Options{Nodes: 1, Partitions: partitions}), nodes: 1}
}

// dataTopic creates an application topic (cleanup.policy=delete) of
// partitions partitions and returns its name.
func (e *env) dataTopic(partitions int32) string {
	e.t.Helper()
	return e.c.Topic(e.t, e.c.Name("data"), partitions, 10*time.Second)
}

// read returns every record of topic with the given isolation, partition
// by partition, read up to a marker (see testcluster.Cluster.ReadAll).
func (e *env) read(topic string, isolation sarama.IsolationLevel) []*sarama.ConsumerMessage {
	e.t.Helper()
	return e.c.ReadAll(e.t, topic, isolation, 20*time.Second)
}

func values(ms []*sarama.ConsumerMessage) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, string(m.Value))
	}
	return out
}
