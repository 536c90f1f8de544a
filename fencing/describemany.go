package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
)

// DescribeAtEachBroker is DescribeMany without coordinator lookups: one
// DescribeTransactions with the transactional ids of all roles to each
// broker the client knows, in parallel. A broker answers only for the ids
// it coordinates (NOT_COORDINATOR for the others), so each answer kept is
// a coordinator's, as in DescribeMany. A role missing from the result got
// no answer, or two that differ: err says why for the brokers that failed.
func (t *BrokerTransport) DescribeAtEachBroker(ctx context.Context, roles []codec.Role) (map[codec.Role]Described, error) {
	ids, byID, err := t.txnIDs(roles)
	if err != nil {
		return nil, err
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		errs    []error
		out     = make(map[codec.Role]Described, len(roles))
		differ  = map[codec.Role]bool{}
		brokers = t.client.Brokers()
	)
	for _, known := range brokers {
		wg.Go(func() {
			r, err := t.describeAt(ctx, known.ID(), ids)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, &Error{Kind: ErrAdmin, Err: fmt.Errorf("DescribeTransactions on %d transactional ids at broker %d: %w", len(ids), known.ID(), err)})
				return
			}
			for _, s := range r.TransactionStates {
				var d Described
				switch s.ErrorCode {
				case sarama.ErrNoError:
					d.Held = s.ProducerID >= 0 && s.ProducerEpoch >= 0 && s.TransactionState != "Dead"
					if d.Held {
						d.Token = codec.Token{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}
					}
				case kerrTransactionalIDNotFound:
				default:
					continue // NOT_COORDINATOR, a refusal, a coordinator loading: no answer
				}
				role, ok := byID[s.TransactionalID]
				if !ok {
					continue
				}
				if prev, dup := out[role]; dup && prev != d {
					differ[role] = true
				}
				out[role] = d
			}
		})
	}
	wg.Wait()
	for r := range differ {
		delete(out, r) // two brokers answered for it (a coordinator moving): trust neither
	}
	if len(brokers) == 0 {
		errs = append(errs, &Error{Kind: ErrAdmin, Err: errors.New("DescribeTransactions: the client knows no broker")})
	}
	return out, errors.Join(errs...)
}

// describeAt sends DescribeTransactions on ids to broker id.
func (t *BrokerTransport) describeAt(ctx context.Context, id int32, ids []string) (*sarama.DescribeTransactionsResponse, error) {
	b, err := call(ctx, nil, func() (*sarama.Broker, error) { return t.client.Broker(id) })
	if err != nil {
		return nil, err
	}
	return send(ctx, t, nil, b, func() (*sarama.DescribeTransactionsResponse, error) {
		return b.DescribeTransactions(&sarama.DescribeTransactionsRequest{Version: versionDescribeTxns, TransactionalIDs: ids})
	})
}
