package fencing

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
)

// PartitionByKey, as [Message].Partition, lets the writer choose the
// partition from the record's key (see [KeyPartition]).
const PartitionByKey int32 = -1

// maxBatchBytes bounds the key and value bytes of one record batch a
// write sends, well below Kafka's default max.message.bytes (1 MiB). A
// record larger than it goes in a batch of its own.
const maxBatchBytes = 512 << 10

// recordOverhead approximates the bytes a record adds to a batch beside
// its key and value (length varints, attributes, deltas, headers count).
const recordOverhead = 24

// Message is one application record that a holder writes under its
// token with [Writer.Write] or [Txn.Write].
type Message struct {
	// Topic is the topic to write to. Required.
	Topic string
	// Partition is the partition to write to, or PartitionByKey:
	// [KeyPartition] of Key, random for a nil Key. The zero value is 0.
	Partition int32
	// Key and Value of the record; a nil Value is a tombstone.
	Key, Value []byte
}

// KeyPartition returns key's partition among n (n > 0) as sarama's default
// partitioner places it (FNV-1a, so where goka and sarama producers put
// the key; the Java client's murmur2 differs). A nil key counts as empty
// here, though PartitionByKey writes it to a random partition.
func KeyPartition(key []byte, n int32) int32 {
	h := fnv.New32a()
	_, _ = h.Write(key)
	p := int32(h.Sum32()) % n
	if p < 0 {
		p = -p
	}
	return p
}

// Writer is the fenced writer of one holding of a role: it writes to any
// topic in transactions under the holding's token, so once a later member
// acquired the role every write fails with [ErrFenced] and nothing of it
// shows. Its transactions and the token's lease writes run one at a time:
// keep them well under [Config.TxnTimeout]. Safe for concurrent use.
type Writer struct {
	t     *BrokerTransport
	role  codec.Role
	token codec.Token
}

// Writer returns the fenced writer of role under token, sending nothing;
// with a token this transport does not hold, every write fails with
// [ErrNotHeld].
func (t *BrokerTransport) Writer(role codec.Role, token codec.Token) *Writer {
	return &Writer{t: t, role: role, token: token}
}

// Role returns the role the writer writes for.
func (w *Writer) Role() codec.Role { return w.role }

// Token returns the token the writer writes under.
func (w *Writer) Token() codec.Token { return w.token }

// Write writes msgs in one transaction: all show together, or none does;
// records of one partition keep their order. Errors: as
// [BrokerTransport.Transact], and [ErrProducer] unsent for a message with
// no topic, an unknown topic or a partition out of range.
func (w *Writer) Write(ctx context.Context, msgs ...Message) error {
	return w.Transact(ctx, func(tx *Txn) error { return tx.Write(msgs...) })
}

// Transact is [BrokerTransport.Transact] for the writer's role and token.
func (w *Writer) Transact(ctx context.Context, fn func(tx *Txn) error) error {
	return w.t.Transact(ctx, w.role, w.token, fn)
}

// Write appends msgs in the transaction, in batches of up to about 512
// KiB per partition, after resolving every partition (refusing the call,
// unsent, as [Writer.Write] does). Errors: as [Txn.Produce].
func (tx *Txn) Write(msgs ...Message) error {
	if tx.err != nil {
		return tx.err
	}
	if err := tx.write(msgs); err != nil {
		tx.err = err
		return err
	}
	return nil
}

func (tx *Txn) write(msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	counts := map[string]int32{}
	var order []topicPartition
	recs := map[topicPartition][]*sarama.Record{}
	for i, m := range msgs {
		p, err := tx.partitionFor(m, counts)
		if err != nil {
			return &Error{Kind: ErrProducer, Role: tx.role, Err: fmt.Errorf("message %d: %w", i, err)}
		}
		tp := topicPartition{m.Topic, p}
		if _, ok := recs[tp]; !ok {
			order = append(order, tp)
		}
		recs[tp] = append(recs[tp], &sarama.Record{Key: m.Key, Value: m.Value})
	}
	if err := tx.addPartitions(order); err != nil {
		return err
	}
	for _, tp := range order {
		rs := recs[tp]
		for len(rs) > 0 {
			n, size := 0, 0
			for n < len(rs) && (n == 0 || size+len(rs[n].Key)+len(rs[n].Value)+recordOverhead <= maxBatchBytes) {
				size += len(rs[n].Key) + len(rs[n].Value) + recordOverhead
				n++
			}
			if _, err := tx.produceRecords(tp, rs[:n]); err != nil {
				return err
			}
			rs = rs[n:]
		}
	}
	return nil
}

// partitionFor resolves m's partition, caching partition counts in counts.
func (tx *Txn) partitionFor(m Message, counts map[string]int32) (int32, error) {
	if m.Topic == "" {
		return -1, errors.New("no topic")
	}
	if m.Partition < PartitionByKey {
		return -1, fmt.Errorf("topic %s: invalid partition %d", m.Topic, m.Partition)
	}
	n, ok := counts[m.Topic]
	var err error
	if !ok {
		if n, err = tx.t.partitionCount(tx.ctx, m.Topic, false); err != nil {
			return -1, err
		}
		counts[m.Topic] = n
	}
	if m.Partition >= n {
		// A partition beyond what the cached metadata knows: it may have
		// been added since, so ask the cluster again.
		if n, err = tx.t.partitionCount(tx.ctx, m.Topic, true); err != nil {
			return -1, err
		}
		counts[m.Topic] = n
	}
	switch {
	case m.Partition >= n:
		return -1, fmt.Errorf("topic %s has %d partitions, no partition %d", m.Topic, n, m.Partition)
	case m.Partition != PartitionByKey:
		return m.Partition, nil
	case m.Key == nil:
		return rand.Int32N(n), nil
	}
	return KeyPartition(m.Key, n), nil
}

// partitionCount returns the number of partitions of topic from the
// client's metadata (fetched when the client does not know the topic yet),
// refreshing it first when refresh is set.
func (t *BrokerTransport) partitionCount(ctx context.Context, topic string, refresh bool) (int32, error) {
	ps, err := call(ctx, nil, func() ([]int32, error) {
		if refresh {
			if err := t.client.RefreshMetadata(topic); err != nil {
				return nil, err
			}
		}
		return t.client.Partitions(topic)
	})
	if err != nil {
		return 0, fmt.Errorf("partitions of topic %s: %w", topic, err)
	}
	if len(ps) == 0 {
		return 0, fmt.Errorf("topic %s has no partitions", topic)
	}
	return int32(len(ps)), nil
}
