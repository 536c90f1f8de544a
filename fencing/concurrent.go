package fencing

import (
	"time"

	"github.com/IBM/sarama"
)

// CONCURRENT_TRANSACTIONS right after a commit: the retry's pace.
//
// Apache Kafka's transaction coordinator answers EndTxn once it has
// appended PrepareCommit (or PrepareAbort) to its transaction log, and
// writes the transaction's markers after that answer
// (TransactionCoordinator.endTransaction: "we can respond to the client
// immediately and continue to write the txn markers";
// TransactionMarkerChannelManager). Until every marker is written and
// CompleteCommit appended, the transactional id is in PrepareCommit, and
// InitProducerId and AddPartitionsToTxn on it are answered
// CONCURRENT_TRANSACTIONS (prepareInitProducerIdTransit: "reply to client
// and let it backoff and retry"; handleAddPartitionsToTransaction), with
// no change to its state. That is
// the handover's path: the successor's InitProducerId follows the
// holder's release commit by one or two round trips (its view's long
// poll, the confirmation), and the coordinator completes the commit a
// marker write and a log append after its answer, usually within a few
// milliseconds. A takeover of a holder that died mid-transaction meets
// the same state (PrepareAbort, after the coordinator fenced and began
// the abort). kfake writes its markers before it answers EndTxn and never answers
// CONCURRENT_TRANSACTIONS on its own; the tests inject it
// (TestInitProducerIDRightAfterACommitRetriesSoon).
//
// The usual backoff (retryBackoffFirst, 10 ms, doubling) would make the
// first retry cost more than the whole handover. Java's producer retries
// AddPartitionsToTxn after CONCURRENT_TRANSACTIONS in 20 ms
// (TransactionManager.ADD_PARTITIONS_RETRY_BACKOFF_MS) and franz-go every
// transactional request in 20 ms (kgo.ConcurrentTransactionsBackoff).
// krole retries sooner, since the state ends on its own within a few
// milliseconds and a retry changes nothing at the coordinator: the first
// concurrentFastRetries answers are each retried concurrentFastWait
// later, the ones after that with the usual backoff (from
// retryBackoffFirst, doubling up to retryBackoffMax). So a call sends at
// most concurrentFastRetries extra requests in its first
// concurrentFastRetries x (concurrentFastWait + a round trip), then about
// ten a second at most, all within cfg.RequestTimeout and ctx, as any
// retry.
const (
	concurrentFastWait    = time.Millisecond
	concurrentFastRetries = 10
)

// concurrentWait paces the retries of one call at a coordinator.
type concurrentWait struct{ n int }

// next returns the wait before retrying an attempt that was answered
// answer, and whether it is one of the fast retries after
// CONCURRENT_TRANSACTIONS (false: the caller's usual backoff).
func (c *concurrentWait) next(answer sarama.KError) (time.Duration, bool) {
	if answer != sarama.ErrConcurrentTransactions || c.n >= concurrentFastRetries {
		return 0, false
	}
	c.n++
	return concurrentFastWait, true
}
