package fencing

import (
	"context"
	"time"

	"github.com/IBM/sarama"
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
