package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
)

// LeaderMovedCodes exposes leaderMovedCodes to the tests.
var LeaderMovedCodes = leaderMovedCodes

// LogStart exposes logStart, the list-offsets path, to the tests.
func (t *BrokerTransport) LogStart(ctx context.Context, topic string, partition int32) (int64, error) {
	return t.logStart(ctx, topic, partition)
}

// ConcurrentRetryWaits returns the waits before the first n retries of a
// call at a coordinator answered CONCURRENT_TRANSACTIONS every time.
func ConcurrentRetryWaits(n int) []time.Duration {
	var cw concurrentWait
	b := backoffs{next: retryBackoffFirst, pace: func() (time.Duration, bool) { return cw.next(sarama.ErrConcurrentTransactions) }}
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = b.wait()
	}
	return out
}

// OccupyPipe takes the pipelined-produce gate of role's transaction
// coordinator, as an unanswered pipelined produce to that broker would;
// free gives it back.
func (t *BrokerTransport) OccupyPipe(role string) (free func(), err error) {
	b, err := t.client.TransactionCoordinator(t.cfg.TransactionalID(role))
	if err != nil {
		return nil, err
	}
	g := t.pipes.gate(b.Addr())
	g <- struct{}{}
	return func() { <-g }, nil
}

// NotSent exposes notSent to the tests.
var NotSent = notSent

// SendOnAbandonedConnection resets the connections to role's transaction
// coordinator (as a caller abandoning a request there does) while the
// client's sarama broker still holds one, and sends an AddPartitionsToTxn
// under tok on that broker, as a request queued behind the abandoned one
// would go out: it returns the send's error.
func (t *BrokerTransport) SendOnAbandonedConnection(role string, tok codec.Token) error {
	id := t.cfg.TransactionalID(role)
	b, err := t.client.TransactionCoordinator(id)
	if err != nil {
		return err
	}
	if ok, err := b.Connected(); !ok || err != nil {
		return fmt.Errorf("the coordinator's broker is not connected (%v)", err)
	}
	if n := t.conns.Close(b.Addr()); n == 0 {
		return errors.New("no connection to reset")
	}
	_, err = b.AddPartitionsToTxn(&sarama.AddPartitionsToTxnRequest{Version: versionAddPartitions, TransactionalID: id,
		ProducerID: tok.ProducerID, ProducerEpoch: tok.Epoch, TopicPartitions: map[string][]int32{t.cfg.Topic: {0}}})
	return err
}
