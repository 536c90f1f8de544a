package fencing

// The Kafka request layer under BrokerTransport: broker calls bounded by a
// ctx, retries, coordinator lookup, produce, fetch and list-offsets, and
// the error codes they share. The Transport operations (broker.go, txn.go,
// writer.go, read.go) are built on it.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/internal/ctxcall"
)

// Kafka error codes that sarama's table may not name, or that this file
// gives a meaning of its own.
const (
	kerrProducerFenced           = sarama.KError(90)  // PRODUCER_FENCED
	kerrInvalidProducerEpoch     = sarama.KError(47)  // INVALID_PRODUCER_EPOCH
	kerrInvalidProducerIDMapping = sarama.KError(49)  // INVALID_PRODUCER_ID_MAPPING
	kerrTransactionalIDNotFound  = sarama.KError(105) // TRANSACTIONAL_ID_NOT_FOUND
	kerrUnknownProducerID        = sarama.KError(59)  // UNKNOWN_PRODUCER_ID
)

// Protocol versions of the requests this file builds, the newest sent
// (sarama clamps each to what the broker advertises). EndTxn stays below
// v5, under which a commit bumps the epoch (package doc, "What a token is").
const (
	versionInitProducerID  = 4  // flexible; PRODUCER_FENCED
	versionAddPartitions   = 3  // single-transaction form (v4+ is batched)
	versionAddOffsets      = 3  // flexible
	versionTxnOffsetCommit = 2  // no group generation: the group is joined by no one
	versionEndTxn          = 3  // pre-KIP-890: the epoch stays across commits
	versionProduce         = 9  // flexible; v10 only adds KIP-951 leader hints
	versionFetch           = 11 // read_committed, LSO, aborted transactions, log start offset
	versionListOffsets     = 6
	versionDescribeTxns    = 0
)

// leaderMovedCodes say a partition's leadership moved or is unsettled:
// refresh the metadata and resend. None means the request took effect.
var leaderMovedCodes = []sarama.KError{
	sarama.ErrNotLeaderForPartition,   // NOT_LEADER_OR_FOLLOWER (6)
	sarama.ErrLeaderNotAvailable,      // LEADER_NOT_AVAILABLE (5)
	sarama.ErrUnknownTopicOrPartition, // UNKNOWN_TOPIC_OR_PARTITION (3): metadata not yet propagated
	sarama.ErrReplicaNotAvailable,     // REPLICA_NOT_AVAILABLE (9)
	sarama.ErrFencedLeaderEpoch,       // FENCED_LEADER_EPOCH (74)
	sarama.ErrUnknownLeaderEpoch,      // UNKNOWN_LEADER_EPOCH (75)
	sarama.ErrKafkaStorageError,       // KAFKA_STORAGE_ERROR (56): the replica's log dir failed; leadership moves
}

// leaderMoved reports whether k is one of leaderMovedCodes.
func leaderMoved(k sarama.KError) bool { return slices.Contains(leaderMovedCodes, k) }

// Retry and fetch tuning.
const (
	retryBackoffFirst = 10 * time.Millisecond
	retryBackoffMax   = 250 * time.Millisecond
	// fetchMaxWait is 0: a read fetches only below the LSO it has learnt
	// (or once, to learn it), so the broker need never wait for data.
	fetchMaxWait           = time.Duration(0)
	fetchMaxBytes          = 8 << 20
	fetchPartitionMaxBytes = 4 << 20
)

// refreshMetadata refreshes the client's metadata of topic, for at most as
// long as ctx lasts. A failure is left to the next lookup to report.
func (t *BrokerTransport) refreshMetadata(ctx context.Context, topic string) {
	_, _ = call(ctx, nil, func() (struct{}, error) { return struct{}{}, t.client.RefreshMetadata(topic) })
}

// ---- broker calls under a ctx ----
//
// sarama's broker calls take no ctx: call runs each on its own goroutine
// and returns when ctx ends; the abandoned call ends within
// cfg.RequestTimeout. A request without an answer is a [noAnswerError]
// (package doc, "When a request gets no answer").

// call runs fn and waits for it or for ctx, whichever comes first.
func call[T any](ctx context.Context, inflight *sync.WaitGroup, fn func() (T, error)) (T, error) {
	return ctxcall.Do(ctx, inflight, fn)
}

// noAnswerError is the error of a request that was (or may have been)
// sent and got no answer: its outcome is unknown.
type noAnswerError struct{ error }

func (e noAnswerError) Unwrap() error { return e.error }

// noAnswer reports whether err says that a request got no answer.
func noAnswer(err error) bool {
	var na noAnswerError
	return errors.As(err, &na)
}

// send is call for request fn to broker b: an error of a request that may
// have left the client is a [noAnswerError]. A request out when ctx ends,
// or left without an answer, closes the connections to b (docs/DESIGN.md,
// "Fencing: requests the caller gave up on").
func send[T any](ctx context.Context, t *BrokerTransport, inflight *sync.WaitGroup, b *sarama.Broker, fn func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	v, err := ctxcall.DoOr(ctx, inflight, func() (T, error) {
		v, err := fn()
		if err != nil && !notSent(err) {
			_ = b.Close()
		}
		return v, err
	}, func() { t.conns.Close(b.Addr()) })
	if err == nil || notSent(err) {
		return v, err
	}
	return v, noAnswerError{err}
}

// notSent reports whether a sarama broker call's error means that the
// request never left the client.
func notSent(err error) bool {
	var oe *net.OpError
	return errors.Is(err, sarama.ErrNotConnected) || errors.Is(err, sarama.ErrUnsupportedVersion) || errors.Is(err, ctxcall.ErrAbandoned) || errors.Is(err, errPipeBusy) ||
		errors.Is(err, sarama.ErrClosedClient) || (errors.As(err, &oe) && oe.Op == "dial")
}

// permanentError marks an error that retrying cannot cure.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func permanent(err error) error { return permanentError{err} }

// retriableErr reports whether a transport-level error (no answer from the
// broker) is worth another attempt.
func retriableErr(ctx context.Context, err error) bool {
	var pe permanentError
	switch {
	case ctx.Err() != nil, errors.As(err, &pe),
		errors.Is(err, sarama.ErrClosedClient), errors.Is(err, sarama.ErrUnsupportedVersion),
		notAuthorizedCode(err): // no retry adds an ACL
		return false
	}
	return true
}

// retry runs attempt until it says stop, backing off between attempts.
// Attempts stop when ctx ends or cfg.RequestTimeout has passed since the
// first; the last attempt's error is returned (ctx.Err() when ctx ended).
func (t *BrokerTransport) retry(ctx context.Context, attempt func() (again bool, err error)) error {
	return t.retryPaced(ctx, nil, attempt)
}

// retryPaced is retry where pace, when not nil, may replace one wait
// without growing the backoff (concurrent.go).
func (t *BrokerTransport) retryPaced(ctx context.Context, pace func() (time.Duration, bool), attempt func() (again bool, err error)) error {
	budget := time.Now().Add(t.cfg.RequestTimeout)
	waits := backoffs{next: retryBackoffFirst, pace: pace}
	for {
		again, err := attempt()
		if !again {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := waits.wait()
		if time.Now().Add(wait).After(budget) {
			return err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// backoffs are the waits between the attempts of one retry: pace's when
// it has one, else retryBackoffFirst doubling up to retryBackoffMax.
type backoffs struct {
	next time.Duration
	pace func() (time.Duration, bool)
}

func (b *backoffs) wait() time.Duration {
	if b.pace != nil {
		if w, ok := b.pace(); ok {
			return w
		}
	}
	w := b.next
	b.next = min(2*b.next, retryBackoffMax)
	return w
}

// atTxnCoordinator sends a request through do to txnID's transaction
// coordinator, finding it again when it moved and retrying
// COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS. It returns the
// first other code, or err when no answer came; a request under a token
// (inflight set) is then not resent.
func (t *BrokerTransport) atTxnCoordinator(ctx context.Context, inflight *sync.WaitGroup, txnID string, do func(*sarama.Broker) (sarama.KError, error)) (sarama.KError, error) {
	return t.atCoordinator(ctx, inflight,
		func() (*sarama.Broker, error) { return t.client.TransactionCoordinator(txnID) },
		func() error { return t.client.RefreshTransactionCoordinator(txnID) },
		do)
}

// atGroupCoordinator is atTxnCoordinator for a consumer group's coordinator.
func (t *BrokerTransport) atGroupCoordinator(ctx context.Context, inflight *sync.WaitGroup, group string, do func(*sarama.Broker) (sarama.KError, error)) (sarama.KError, error) {
	return t.atCoordinator(ctx, inflight,
		func() (*sarama.Broker, error) { return t.client.Coordinator(group) },
		func() error { return t.client.RefreshCoordinator(group) },
		do)
}

func (t *BrokerTransport) atCoordinator(ctx context.Context, inflight *sync.WaitGroup,
	find func() (*sarama.Broker, error), refresh func() error, do func(*sarama.Broker) (sarama.KError, error),
) (sarama.KError, error) {
	var answer sarama.KError
	refreshNow := func() { _, _ = call(ctx, nil, func() (struct{}, error) { return struct{}{}, refresh() }) }
	var cw concurrentWait
	err := t.retryPaced(ctx, func() (time.Duration, bool) { return cw.next(answer) }, func() (bool, error) {
		answer = sarama.ErrNoError
		b, err := call(ctx, nil, find)
		if err != nil {
			return retriableErr(ctx, err), fmt.Errorf("finding the coordinator: %w", err)
		}
		kerr, err := send(ctx, t, inflight, b, func() (sarama.KError, error) { return do(b) })
		if err != nil {
			if retriableErr(ctx, err) && (inflight == nil || !noAnswer(err)) {
				refreshNow()
				return true, fmt.Errorf("coordinator %s: %w", b.Addr(), err)
			}
			return false, err
		}
		answer = kerr
		switch kerr {
		case sarama.ErrNotCoordinatorForConsumer, sarama.ErrConsumerCoordinatorNotAvailable:
			refreshNow()
			return true, nil
		case sarama.ErrOffsetsLoadInProgress, sarama.ErrConcurrentTransactions:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return 0, err
	}
	return answer, nil
}

// produce sends batch to the leader of topic/partition and returns the
// base offset, the broker's code, or err when no definite answer came.
// Outside a transaction a lost connection resends; under one (txnID set)
// it is a [noAnswerError]. DUPLICATE_SEQUENCE_NUMBER is success, offset -1.
func (t *BrokerTransport) produce(ctx context.Context, inflight *sync.WaitGroup, txnID *string, topic string, partition int32, batch *sarama.RecordBatch) (int64, sarama.KError, error) {
	var (
		offset int64 = -1
		answer sarama.KError
	)
	err := t.retry(ctx, func() (bool, error) {
		leader, err := call(ctx, nil, func() (*sarama.Broker, error) { return t.client.Leader(topic, partition) })
		if err != nil {
			return retriableErr(ctx, err), fmt.Errorf("finding the leader of %s/%d: %w", topic, partition, err)
		}
		req := &sarama.ProduceRequest{
			TransactionalID: txnID,
			RequiredAcks:    sarama.WaitForAll,
			Timeout:         int32(t.cfg.RequestTimeout / time.Millisecond),
			Version:         versionProduce,
		}
		req.AddBatch(topic, partition, batch)
		// Broker.Produce holds the connection's lock until the answer, so
		// nothing is written behind a produce whose abandonment would close
		// the connection (send); only a pipelined commit is.
		res, err := send(ctx, t, inflight, leader, func() (*sarama.ProduceResponse, error) { return leader.Produce(req) })
		if err != nil {
			if retriableErr(ctx, err) && (txnID == nil || !noAnswer(err)) {
				t.refreshMetadata(ctx, topic)
				return true, fmt.Errorf("leader %s of %s/%d: %w", leader.Addr(), topic, partition, err)
			}
			return false, err
		}
		blk := res.GetBlock(topic, partition)
		if blk == nil {
			return true, fmt.Errorf("leader %s answered without %s/%d", leader.Addr(), topic, partition)
		}
		answer = blk.Err
		if leaderMoved(blk.Err) {
			t.refreshMetadata(ctx, topic)
			return true, nil
		}
		switch blk.Err {
		case sarama.ErrNoError:
			offset = blk.Offset
		case sarama.ErrDuplicateSequenceNumber:
			answer = sarama.ErrNoError
		case sarama.ErrNotEnoughReplicas, sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrRequestTimedOut:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return -1, 0, err
	}
	switch answer {
	case sarama.ErrRequestTimedOut, sarama.ErrNotEnoughReplicasAfterAppend:
		// Retries ran out on an answer that a broker may give after
		// appending: the outcome is unknown.
		return -1, 0, fmt.Errorf("no definite answer for %s/%d: %w", topic, partition, answer)
	}
	return offset, answer, nil
}

// produceAnswer is a broker's answer to a produce request, or the error
// that ended its connection before the answer came.
type produceAnswer struct {
	res *sarama.ProduceResponse
	err error
}

// produceAsync writes req to b and returns at once; the answer comes on
// the channel (an error: none is coming). It holds b's lock only while it
// writes, so a pipelined commit can follow. At most one is unanswered per
// address; else it returns [errPipeBusy] unsent.
func produceAsync(b *sarama.Broker, req *sarama.ProduceRequest, gate chan struct{}) (<-chan produceAnswer, error) {
	select {
	case gate <- struct{}{}:
	default:
		return nil, errPipeBusy
	}
	answer := make(chan produceAnswer, 1) // the callback runs on sarama's reader goroutine: never block it
	err := b.AsyncProduce(req, func(res *sarama.ProduceResponse, err error) {
		<-gate
		answer <- produceAnswer{res, err}
	})
	if err != nil {
		<-gate
		return nil, err
	}
	return answer, nil
}

// errPipeBusy is produceAsync's error when another pipelined produce is
// unanswered on the broker's address: nothing was sent.
var errPipeBusy = errors.New("another pipelined produce is unanswered on the connection")

// pipes holds each broker address's gate for pipelined produces (see
// produceAsync).
type pipes struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
}

// gate returns addr's gate, a channel of capacity one: full while a
// pipelined produce to addr is unanswered.
func (p *pipes) gate(addr string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gates == nil {
		p.gates = map[string]chan struct{}{}
	}
	g := p.gates[addr]
	if g == nil {
		g = make(chan struct{}, 1)
		p.gates[addr] = g
	}
	return g
}

// newBatch builds a record batch of one record. A nil value is a tombstone.
func newBatch(producerID int64, epoch int16, sequence int32, transactional bool, key, value []byte) *sarama.RecordBatch {
	return newRecordBatch(producerID, epoch, sequence, transactional, []*sarama.Record{{Key: key, Value: value}})
}

// newRecordBatch builds a record batch of recs (at least one), setting
// each record's offset delta. The batch's sequence numbers run from
// sequence to sequence + len(recs) - 1 (wrapping as Kafka's do).
func newRecordBatch(producerID int64, epoch int16, sequence int32, transactional bool, recs []*sarama.Record) *sarama.RecordBatch {
	now := time.Now()
	for i, r := range recs {
		r.OffsetDelta = int64(i)
		r.TimestampDelta = 0
	}
	return &sarama.RecordBatch{
		Version:         2,
		FirstTimestamp:  now,
		MaxTimestamp:    now,
		ProducerID:      producerID,
		ProducerEpoch:   epoch,
		FirstSequence:   sequence,
		IsTransactional: transactional,
		LastOffsetDelta: int32(len(recs) - 1),
		Records:         recs,
	}
}

// incrementSequence returns sequence + n with Kafka's wrap-around: after
// math.MaxInt32 the sequence starts again at 0.
func incrementSequence(sequence int32, n int) int32 {
	if int64(sequence)+int64(n) > math.MaxInt32 {
		return int32(int64(sequence) + int64(n) - math.MaxInt32 - 1)
	}
	return sequence + int32(n)
}

// kerrError makes a broker error code an error, naming the codes sarama's
// table does not.
func kerrError(k sarama.KError) error {
	switch k {
	case kerrTransactionalIDNotFound:
		return kafkaCode{k, "TRANSACTIONAL_ID_NOT_FOUND"}
	case kerrProducerFenced:
		return kafkaCode{k, "PRODUCER_FENCED"}
	}
	return k
}

// kafkaCode is a broker error code with its Kafka name. It matches the
// sarama.KError of the same code with errors.Is.
type kafkaCode struct {
	code sarama.KError
	name string
}

func (k kafkaCode) Error() string { return fmt.Sprintf("kafka error %d (%s)", int16(k.code), k.name) }

func (k kafkaCode) Is(target error) bool {
	var c sarama.KError
	return errors.As(target, &c) && c == k.code
}

// fenceCode reports whether a code says a later epoch or another producer
// id holds the transactional id: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
// INVALID_PRODUCER_ID_MAPPING, and Redpanda's TRANSACTIONAL_ID_NOT_FOUND
// and UNKNOWN_PRODUCER_ID (docs/DESIGN.md, "Fencing: what a token is at
// the coordinator").
func fenceCode(k sarama.KError) bool {
	switch k {
	case kerrProducerFenced, kerrInvalidProducerEpoch, kerrInvalidProducerIDMapping,
		kerrTransactionalIDNotFound, kerrUnknownProducerID:
		return true
	}
	return false
}

// fetch sends one read_committed fetch of topic/partition at offset to its
// leader, retrying leader moves and lost connections, and returns the
// partition's block.
func (t *BrokerTransport) fetch(ctx context.Context, topic string, partition int32, offset int64) (*sarama.FetchResponseBlock, error) {
	var out *sarama.FetchResponseBlock
	err := t.retry(ctx, func() (bool, error) {
		leader, err := call(ctx, nil, func() (*sarama.Broker, error) { return t.client.Leader(topic, partition) })
		if err != nil {
			return retriableErr(ctx, err), fmt.Errorf("finding the leader: %w", err)
		}
		req := &sarama.FetchRequest{
			Version:      versionFetch,
			MaxWaitTime:  int32(fetchMaxWait.Milliseconds()),
			MinBytes:     1,
			MaxBytes:     fetchMaxBytes,
			Isolation:    sarama.ReadCommitted,
			SessionID:    0,
			SessionEpoch: -1, // no fetch session: a full, one-off fetch
		}
		req.AddBlock(topic, partition, offset, fetchPartitionMaxBytes, -1)
		res, err := send(ctx, t, nil, leader, func() (*sarama.FetchResponse, error) { return leader.Fetch(req) })
		if err != nil {
			if retriableErr(ctx, err) {
				t.refreshMetadata(ctx, topic)
				return true, fmt.Errorf("leader %s: %w", leader.Addr(), err)
			}
			return false, err
		}
		blk := res.GetBlock(topic, partition)
		if blk == nil {
			return true, fmt.Errorf("leader %s answered without the partition", leader.Addr())
		}
		out = blk
		if leaderMoved(blk.Err) {
			t.refreshMetadata(ctx, topic)
			return true, fmt.Errorf("leader %s: %w", leader.Addr(), blk.Err)
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// logStart asks the partition leader for the partition's first offset.
func (t *BrokerTransport) logStart(ctx context.Context, topic string, partition int32) (int64, error) {
	var start int64
	err := t.retry(ctx, func() (bool, error) {
		leader, err := call(ctx, nil, func() (*sarama.Broker, error) { return t.client.Leader(topic, partition) })
		if err != nil {
			return retriableErr(ctx, err), err
		}
		req := &sarama.OffsetRequest{Version: versionListOffsets, IsolationLevel: sarama.ReadCommitted}
		req.AddBlock(topic, partition, sarama.OffsetOldest, 1)
		res, err := send(ctx, t, nil, leader, func() (*sarama.OffsetResponse, error) { return leader.GetAvailableOffsets(req) })
		if err != nil {
			return retriableErr(ctx, err), err
		}
		blk := res.GetBlock(topic, partition)
		if blk == nil {
			return true, errors.New("ListOffsets answered without the partition")
		}
		if leaderMoved(blk.Err) {
			t.refreshMetadata(ctx, topic)
			return true, blk.Err
		}
		if blk.Err != sarama.ErrNoError {
			return false, blk.Err
		}
		start = blk.Offset
		return false, nil
	})
	return start, err
}
