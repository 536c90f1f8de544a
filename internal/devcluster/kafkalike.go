package devcluster

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CommitLikeKafka makes the cluster's transaction coordinator answer as
// Apache Kafka's does after a commit, for the transactional ids that
// match (txnID, or every one when ""), until remove is called.
//
// Apache Kafka answers EndTxn once PrepareCommit is in its transaction
// log, then writes the markers; until they are written and
// CompleteCommit appended, it answers InitProducerId and
// AddPartitionsToTxn on that transactional id with
// CONCURRENT_TRANSACTIONS and changes nothing
// (core/.../transaction/TransactionCoordinator.scala, endTransaction and
// prepareInitProducerIdTransit). kfake writes the markers before it
// answers EndTxn, so it never does. Here, after each EndTxn commit the
// coordinator answers those requests CONCURRENT_TRANSACTIONS while
// pending(answered, since) is true, answered being how many it has
// answered so since the commit and since the time since the commit
// arrived; the first request for which it is false ends the state (the
// markers are written), as does the next commit's start.
//
// An abort (EndTxn abort, or the abort InitProducerId makes of an open
// transaction) is not emulated.
func (c *Cluster) CommitLikeKafka(txnID string, pending func(answered int, since time.Duration) bool) (remove func()) {
	type state struct {
		at       time.Time
		answered int
	}
	var (
		mu    sync.Mutex
		after = map[string]*state{} // by transactional id, while PrepareCommit lasts
	)
	commits := c.Fault(kfake.Fault{
		Keys:    []kmsg.Key{kmsg.EndTxn},
		TxnID:   txnID,
		Count:   -1,
		Observe: true,
		When: func(r kmsg.Request) bool {
			req, ok := r.(*kmsg.EndTxnRequest)
			if ok && req.Commit {
				mu.Lock()
				after[req.TransactionalID] = &state{at: time.Now()}
				mu.Unlock()
			}
			return ok
		},
	})
	concurrent := c.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.InitProducerID, kmsg.AddPartitionsToTxn},
		TxnID: txnID,
		Count: -1,
		Err:   kerr.ConcurrentTransactions,
		When: func(r kmsg.Request) bool {
			var id string
			switch req := r.(type) {
			case *kmsg.InitProducerIDRequest:
				if req.TransactionalID == nil {
					return false
				}
				id = *req.TransactionalID
			case *kmsg.AddPartitionsToTxnRequest:
				id = req.TransactionalID
			default:
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			st := after[id]
			if st == nil {
				return false
			}
			if !pending(st.answered, time.Since(st.at)) {
				delete(after, id)
				return false
			}
			st.answered++
			return true
		},
	})
	return func() {
		concurrent.Remove()
		commits.Remove()
	}
}
