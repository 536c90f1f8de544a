package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"
)

// The broker settings krole's timings depend on (Apache Kafka's names,
// transaction-coordinator/src/main/java/org/apache/kafka/coordinator/
// transaction/TransactionStateManagerConfig.java).
const (
	// BrokerMaxTxnTimeout is the longest transaction timeout
	// InitProducerId may name. Apache Kafka's default is 15 min.
	BrokerMaxTxnTimeout = "transaction.max.timeout.ms"
	// BrokerAbortInterval is how often the coordinator aborts timed-out
	// transactions. Apache Kafka's default is 10 s.
	BrokerAbortInterval = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
	// BrokerPartitionVerification makes a leader refuse a transactional
	// produce to a partition not in its transaction (KIP-890 part 1,
	// Apache Kafka 3.6+); krole may pipeline where it is on.
	BrokerPartitionVerification = "transaction.partition.verification.enable"
)

// DefaultAbortInterval is the abort interval CheckTimings assumes when a
// broker does not report it (Redpanda does not): Apache Kafka's and
// Redpanda's default.
const DefaultAbortInterval = 10 * time.Second

// ErrBrokerSettings is matched (errors.Is) by every [*BrokerSettingsError].
var ErrBrokerSettings = errors.New("broker settings")

// BrokerTxnSettings are one broker's transaction settings as its
// DescribeConfigs reports them; zero when not reported.
type BrokerTxnSettings struct {
	// Broker is the node id of the broker that answered.
	Broker int32
	// MaxTxnTimeout is [BrokerMaxTxnTimeout]; 0 when not reported.
	MaxTxnTimeout time.Duration
	// AbortInterval is [BrokerAbortInterval]; 0 when not reported.
	AbortInterval time.Duration
	// PartitionVerification is [BrokerPartitionVerification] reported
	// true.
	PartitionVerification bool
}

// BrokerSettingsError says that a setting of krole cannot hold against a
// broker's. Refused: the broker refuses the requests; else a warning that
// a timing rule does not hold.
type BrokerSettingsError struct {
	// Refused is true when the broker would refuse the requests.
	Refused bool
	// Broker is the node id of the broker whose setting it is.
	Broker int32
	// Setting is the broker setting's name, BrokerValue its value (or the
	// default assumed, when Assumed is true).
	Setting     string
	BrokerValue time.Duration
	Assumed     bool
	// Rule is the rule broken, with krole's values, in words.
	Rule string
}

// Error names the broker setting with its value and the rule broken.
func (e *BrokerSettingsError) Error() string {
	assumed := ""
	if e.Assumed {
		assumed = " (not reported; the default assumed)"
	}
	return fmt.Sprintf("broker %d: %s=%d%s: %s", e.Broker, e.Setting, e.BrokerValue.Milliseconds(), assumed, e.Rule)
}

// Is matches ErrBrokerSettings.
func (e *BrokerSettingsError) Is(target error) bool { return target == ErrBrokerSettings }

// CheckTxnTimeout returns a refused [*BrokerSettingsError] when
// txnTimeout is longer than the broker's [BrokerMaxTxnTimeout], which
// makes the coordinator refuse every InitProducerId; nil otherwise, and
// nil when that setting was not reported.
func (s BrokerTxnSettings) CheckTxnTimeout(txnTimeout time.Duration) error {
	if s.MaxTxnTimeout > 0 && txnTimeout > s.MaxTxnTimeout {
		return &BrokerSettingsError{Refused: true, Broker: s.Broker, Setting: BrokerMaxTxnTimeout, BrokerValue: s.MaxTxnTimeout,
			Rule: fmt.Sprintf("the transaction timeout %v is longer, and the coordinator refuses it (INVALID_TRANSACTION_TIMEOUT): lower the transaction timeout or raise the broker setting", txnTimeout)}
	}
	return nil
}

// CheckTimings checks CheckTxnTimeout, then the stall rule: a lease no
// longer than txnTimeout + the abort interval + renew lets a crashed
// transaction hide a healthy holder's renewals for longer than a lease
// (docs/DESIGN.md, "Liveness: what bounds a vacancy"); that is a warning
// [*BrokerSettingsError]. lease and renew of 0 skip the stall rule.
func (s BrokerTxnSettings) CheckTimings(txnTimeout, lease, renew time.Duration) error {
	if err := s.CheckTxnTimeout(txnTimeout); err != nil {
		return err
	}
	if lease <= 0 {
		return nil
	}
	interval, assumed := s.AbortInterval, false
	if interval <= 0 {
		interval, assumed = DefaultAbortInterval, true
	}
	if stall := txnTimeout + interval; lease <= stall+renew {
		return &BrokerSettingsError{Broker: s.Broker, Setting: BrokerAbortInterval, BrokerValue: interval, Assumed: assumed,
			Rule: fmt.Sprintf("a transaction left open by a crash can hold readers back for up to %v (transaction timeout %v + the interval), and the lease duration %v is not longer than that + the heartbeat interval %v",
				stall, txnTimeout, lease, renew)}
	}
	return nil
}

// BrokerTxnSettings asks the least loaded broker for its transaction
// settings in one DescribeConfigs, blocking until the answer or ctx ends.
// Errors: [ErrAdmin].
func (t *BrokerTransport) BrokerTxnSettings(ctx context.Context) (BrokerTxnSettings, error) {
	b := t.client.LeastLoadedBroker()
	if b == nil {
		return BrokerTxnSettings{}, &Error{Kind: ErrAdmin, Err: errors.New("DescribeConfigs: no broker known")}
	}
	if ok, _ := b.Connected(); !ok {
		_ = b.Open(t.client.Config())
	}
	id := b.ID()
	req := &sarama.DescribeConfigsRequest{Version: 1, Resources: []*sarama.ConfigResource{{
		Type: sarama.BrokerResource, Name: strconv.Itoa(int(id)), ConfigNames: []string{BrokerMaxTxnTimeout, BrokerAbortInterval, BrokerPartitionVerification},
	}}}
	res, err := send(ctx, t, nil, b, func() (*sarama.DescribeConfigsResponse, error) { return b.DescribeConfigs(req) })
	if err != nil {
		return BrokerTxnSettings{}, &Error{Kind: ErrAdmin, Err: fmt.Errorf("DescribeConfigs of broker %d: %w", id, err)}
	}
	out := BrokerTxnSettings{Broker: id}
	for _, r := range res.Resources {
		if r.ErrorCode != 0 {
			return BrokerTxnSettings{}, &Error{Kind: ErrAdmin, Err: fmt.Errorf("DescribeConfigs of broker %d: %w", id, kerrError(sarama.KError(r.ErrorCode)))}
		}
		for _, c := range r.Configs {
			if c.Name == BrokerPartitionVerification {
				out.PartitionVerification = c.Value == "true"
				continue
			}
			ms, err := strconv.ParseInt(c.Value, 10, 64)
			if err != nil || ms <= 0 {
				continue
			}
			switch c.Name {
			case BrokerMaxTxnTimeout:
				out.MaxTxnTimeout = time.Duration(ms) * time.Millisecond
			case BrokerAbortInterval:
				out.AbortInterval = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return out, nil
}
