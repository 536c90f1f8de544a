package fencing

import (
	"time"

	"github.com/IBM/sarama"
)

// CONCURRENT_TRANSACTIONS right after a commit ends on its own within
// milliseconds and a retry changes nothing at the coordinator, so the
// first concurrentFastRetries answers are retried concurrentFastWait
// apart, later ones with the usual backoff (retryBackoffFirst, doubling
// to retryBackoffMax). Why: docs/DESIGN.md, "Fencing: what a token is at
// the coordinator".
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
