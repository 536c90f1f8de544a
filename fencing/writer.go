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
	// Partition is the partition to write to, or PartitionByKey (-1): the
	// partition [KeyPartition] gives for Key, or a random partition when
	// Key is nil. Note that the zero value is partition 0, not
	// PartitionByKey.
	Partition int32
	// Key and Value of the record; a nil Value is a tombstone.
	Key, Value []byte
}

// KeyPartition returns the partition of key among n partitions (n > 0)
// the way sarama's default partitioner (sarama.NewHashPartitioner) places
// a keyed record: the 32-bit FNV-1a hash of the key, read as a signed
// int32, modulo n, negated when negative. Records a writer sends with
// PartitionByKey therefore land where sarama-based producers (goka, Shopify
// and IBM sarama clients with default settings) put the same key. The Java
// client's default partitioner hashes with murmur2 instead and places keys
// differently; a topic written by both should be written with explicit
// partitions.
//
// A nil key has no partition of its own: KeyPartition treats it as empty,
// while a write with PartitionByKey picks a random partition for it, as
// sarama does.
func KeyPartition(key []byte, n int32) int32 {
	h := fnv.New32a()
	_, _ = h.Write(key)
	p := int32(h.Sum32()) % n
	if p < 0 {
		p = -p
	}
	return p
}

// Writer is the fenced writer of one holding of a role: it writes
// application records to any topic in transactions of the role's
// transactional id, under token, so once a later member has acquired the
// role every write fails with [ErrFenced] and nothing of it becomes
// visible to read_committed readers (see docs/DESIGN.md, "Compared with
// etcd elections, ..."). Its transactions and the token's lease writes run
// one at a time, so a long one delays the lease rewrite (not the renewal,
// which is the member session's): keep them well under [Config.TxnTimeout].
// A Writer is safe for concurrent use.
type Writer struct {
	t     *BrokerTransport
	role  codec.Role
	token codec.Token
}

// Writer returns the fenced writer of role under token, a token this
// transport minted for role with AcquireEpoch. No request is sent: a token
// this transport does not hold (never minted, fenced, or replaced by a
// newer one) makes every write fail with [ErrNotHeld].
func (t *BrokerTransport) Writer(role codec.Role, token codec.Token) *Writer {
	return &Writer{t: t, role: role, token: token}
}

// Role returns the role the writer writes for.
func (w *Writer) Role() codec.Role { return w.role }

// Token returns the token the writer writes under.
func (w *Writer) Token() codec.Token { return w.token }

// Write writes msgs in one transaction under the writer's token: all of
// them become visible to read_committed readers together, or none does.
// Records of one partition keep their order. With no msgs, Write sends
// nothing and returns nil when the token is held.
//
// Errors: [ErrFenced] when a later member holds the role (nothing of the
// transaction shows); [ErrNotHeld] when the transport does not hold the
// token; [ErrUnknownOutcome] when a request got no definite answer (the
// token is retired; nothing shows, unless the request was the commit);
// [ErrProducer] for every other failure, including a message that
// names no topic, an unknown topic or a partition the topic does not have
// (refused before anything is sent). See [BrokerTransport.Transact] for
// what an ended ctx does.
func (w *Writer) Write(ctx context.Context, msgs ...Message) error {
	return w.Transact(ctx, func(tx *Txn) error { return tx.Write(msgs...) })
}

// Transact runs fn inside one transaction under the writer's token, so
// several writes ([Txn.Write], [Txn.Produce]) and a consumer group's
// offsets ([Txn.CommitOffsets]) commit together. It is
// [BrokerTransport.Transact] for the writer's role and token.
func (w *Writer) Transact(ctx context.Context, fn func(tx *Txn) error) error {
	return w.t.Transact(ctx, w.role, w.token, fn)
}

// Write appends msgs inside the transaction. It resolves every message's
// partition first (PartitionByKey by [KeyPartition] on the topic's
// partition count, which the transport's metadata gives) and refuses the
// whole call, sending nothing, when a message names no topic, an unknown
// topic or a partition out of range. Then it adds the partitions it needs
// to the transaction in one AddPartitionsToTxn and sends the records of
// each partition, in order, as record batches of up to about 512 KiB.
//
// Errors: as [Txn.Produce]; any error dooms the transaction.
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
