package fencing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/rolestate"
)

// Close waits up to this many request timeouts for background aborts.
const closeCleanupGraceFactor = 2

// BrokerTransport is the [Transport] over sarama. It keeps one sarama
// client and, per role it minted a token for, the producer state the
// token binds (producer id, epoch, per-partition sequence numbers). Safe
// for concurrent use; transactions of one token run one at a time.
type BrokerTransport struct {
	cfg    Config
	client sarama.Client
	conns  *ctxcall.Conns // every connection of client, to close those of abandoned requests

	mu      sync.Mutex
	holders map[codec.Role]*holder     // the newest token minted per role
	retired map[codec.Role]codec.Token // per role, the token retired after an unknown outcome, until the next AcquireEpoch

	bgMu          sync.Mutex     // orders bg.Add (abortLater) before bg.Wait (Close)
	bg            sync.WaitGroup // cleanups (aborts) running after a caller's ctx ended
	closed        atomic.Bool
	newerSkipped  atomic.Uint64
	forgedSkipped atomic.Uint64
	unverified    atomic.Uint64 // leases ReadRoleRecords kept without Describe (not authorized)

	endTxns [2]atomic.Uint64 // EndTxn requests handed to the client: [0] aborts, [1] commits (EndTxnsSent)

	authors *rolestate.Authors // the roles' own producer ids, as minted and described

	startTxn    BrokerTxnSettings // what NewBrokerTransport's DescribeConfigs found
	startTxnErr error

	pipeline bool // commits may go behind their produce (see pipeline.go)
	pipes    pipes
}

var _ Transport = (*BrokerTransport)(nil)

// NewBrokerTransport validates cfg (defaults applied) and connects,
// fetching the metadata once: an unreachable cluster fails here with
// [ErrClient] (wrapping [*TLSHandshakeError]s when TLS fails everywhere).
// A TxnTimeout above the broker's transaction.max.timeout.ms is refused
// ([ErrBrokerSettings]).
func NewBrokerTransport(cfg Config) (*BrokerTransport, error) {
	cfg = cfg.WithDefaults()
	sc, err := cfg.sarama() // validates cfg
	if err != nil {
		return nil, fmt.Errorf("fencing config: %w", err)
	}
	// DescribeTransactions needs Kafka 3.0; other requests are clamped to
	// what each broker advertises.
	if !sc.Version.IsAtLeast(sarama.V3_0_0_0) {
		sc.Version = sarama.V3_0_0_0
	}
	// Every connection goes through conns, so that a request abandoned
	// by its ctx can be cut short (see send).
	conns := ctxcall.NewConns(&net.Dialer{Timeout: sc.Net.DialTimeout, KeepAlive: sc.Net.KeepAlive})
	sc.Net.Proxy.Dialer = withTLS(sc, conns)
	sc.Net.Proxy.Enable = true
	// A handshake that cannot succeed fails here, once, not at every retry.
	if err := checkTLS(context.Background(), cfg, sc); err != nil {
		return nil, err
	}
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return nil, &Error{Kind: ErrClient, Err: fmt.Errorf("no broker answered at %s: %w", strings.Join(cfg.Brokers, ","), err)}
	}
	t := &BrokerTransport{cfg: cfg, client: client, conns: conns, holders: make(map[codec.Role]*holder), retired: make(map[codec.Role]codec.Token),
		authors: rolestate.NewAuthors()}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
	t.startTxn, t.startTxnErr = t.BrokerTxnSettings(ctx)
	cancel()
	if t.startTxnErr == nil {
		if err := t.startTxn.CheckTxnTimeout(cfg.TxnTimeout); err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("fencing config: TxnTimeout: %w", err)
		}
	}
	t.pipeline = cfg.Pipeline == PipelineOn || ((cfg.Pipeline == PipelineAuto || cfg.Pipeline == "auto") && t.startTxnErr == nil && t.startTxn.PartitionVerification)
	return t, nil
}

// StartTxnSettings returns the broker's transaction settings as
// NewBrokerTransport read them ([BrokerTransport.BrokerTxnSettings]), or
// that request's error. It sends nothing.
func (t *BrokerTransport) StartTxnSettings() (BrokerTxnSettings, error) {
	return t.startTxn, t.startTxnErr
}

// Config returns the effective configuration (defaults applied).
func (t *BrokerTransport) Config() Config { return t.cfg }

// TxnTimeout implements [TxnTimeouter]: the effective
// [Config].TxnTimeout.
func (t *BrokerTransport) TxnTimeout() time.Duration { return t.cfg.TxnTimeout }

// NewerRecordsSkipped counts the newer-format records ReadRoleRecords
// skipped: a newer krole writes to the role topic.
func (t *BrokerTransport) NewerRecordsSkipped() uint64 { return t.newerSkipped.Load() }

// Authors returns the roles' own producer ids this transport minted or
// learned ([rolestate.Authors]), for a view of the same member to share.
func (t *BrokerTransport) Authors() *rolestate.Authors { return t.authors }

// VerifyAuthor returns whether pid is the producer id role's
// transactional id has at its coordinator, asking (Describe) only for a
// (role, producer id) not settled before. Errors are Describe's
// ([ErrNotAuthorized] without Describe on the TransactionalId).
func (t *BrokerTransport) VerifyAuthor(ctx context.Context, role codec.Role, pid int64) (rolestate.Verdict, error) {
	if v := t.authors.Verdict(role, pid); v != rolestate.Unverified {
		return v, nil
	}
	tok, ok, err := t.Describe(ctx, role)
	if err != nil {
		return rolestate.Unverified, err
	}
	current := int64(-1)
	if ok {
		current = tok.ProducerID
	}
	return t.authors.Learn(role, pid, current), nil
}

// UnverifiedLeasesKept counts leases ReadRoleRecords kept by the batch
// rule alone, for want of Describe on the role's transactional id.
func (t *BrokerTransport) UnverifiedLeasesKept() uint64 { return t.unverified.Load() }

// ForgedLeasesSkipped counts leases ReadRoleRecords skipped as forged.
func (t *BrokerTransport) ForgedLeasesSkipped() uint64 { return t.forgedSkipped.Load() }

// Close waits, for a bounded time, for the background aborts of
// transactions whose callers gave up, then closes the connections. It
// releases no role: the tokens stay valid until a later AcquireEpoch.
func (t *BrokerTransport) Close() error {
	t.bgMu.Lock()
	already := t.closed.Swap(true)
	t.bgMu.Unlock()
	if already {
		return nil
	}
	done := make(chan struct{})
	go func() { t.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeCleanupGraceFactor * t.cfg.RequestTimeout):
	}
	if err := t.client.Close(); err != nil {
		return &Error{Kind: ErrClient, Err: fmt.Errorf("closing the cluster client: %w", err)}
	}
	return nil
}

// AcquireEpoch implements [Transport]: InitProducerId (producer id and
// epoch -1, cfg.TxnTimeout) on the role's transactional id, retrying
// retriable answers and lost connections within ctx and
// cfg.RequestTimeout (package doc, "Requests the caller gave up on").
func (t *BrokerTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	if err := role.Validate(); err != nil {
		return codec.Token{}, &Error{Kind: ErrProducer, Role: role, Err: err}
	}
	return t.mint(ctx, role, t.cfg.TransactionalID(string(role)))
}

// mint sends InitProducerId on txnID, the transactional id of key (a role,
// or a member session's key), and keeps the token it answers as key's
// newest, minted by this transport: AcquireEpoch and StartSession.
func (t *BrokerTransport) mint(ctx context.Context, key codec.Role, txnID string) (_ codec.Token, err error) {
	defer func() { err = needs{txnOp: "WRITE", txnID: txnID}.authz(err) }()
	var res *sarama.InitProducerIDResponse
	kerr, err := t.atTxnCoordinator(ctx, nil, txnID, func(b *sarama.Broker) (sarama.KError, error) {
		r, err := b.InitProducerID(&sarama.InitProducerIDRequest{
			Version:            versionInitProducerID,
			TransactionalID:    &txnID,
			TransactionTimeout: t.cfg.TxnTimeout,
			ProducerID:         -1,
			ProducerEpoch:      -1,
		})
		if err != nil {
			return 0, err
		}
		res = r
		return r.Err, nil
	})
	if err != nil {
		return codec.Token{}, &Error{Kind: ErrClient, Role: key, Err: fmt.Errorf("InitProducerId on %s: %w", txnID, err)}
	}
	if kerr != sarama.ErrNoError {
		return codec.Token{}, &Error{Kind: ErrProducer, Role: key, Err: fmt.Errorf("InitProducerId on %s: %w", txnID, kerrError(kerr))}
	}
	tok := codec.Token{ProducerID: res.ProducerID, Epoch: res.ProducerEpoch}
	if err := tok.Validate(); err != nil {
		return codec.Token{}, &Error{Kind: ErrProducer, Role: key, Err: fmt.Errorf("InitProducerId on %s: %w", txnID, err)}
	}
	t.mu.Lock()
	t.holders[key] = newHolder(tok)
	delete(t.retired, key)
	t.mu.Unlock()
	t.authors.Own(key, tok.ProducerID)
	return tok, nil
}

// FindCoordinator looks up and caches the transaction coordinator of
// role's transactional id, saving that round trip in a later handover.
// When ctx ends first it returns ctx's error and the lookup finishes in
// the background.
func (t *BrokerTransport) FindCoordinator(ctx context.Context, role codec.Role) error {
	if err := role.Validate(); err != nil {
		return &Error{Kind: ErrProducer, Role: role, Err: err}
	}
	txnID := t.cfg.TransactionalID(string(role))
	_, err := call(ctx, nil, func() (*sarama.Broker, error) { return t.client.TransactionCoordinator(txnID) })
	if err != nil {
		return &Error{Kind: ErrClient, Role: role, Err: fmt.Errorf("finding the coordinator of %s: %w", txnID, err)}
	}
	return nil
}

// Describe implements [Transport]: DescribeTransactions on the role's
// transactional id. TRANSACTIONAL_ID_NOT_FOUND, no producer id or epoch,
// or state Dead is ok=false. role may be a session key
// (rolestate.SessionAuthor), to settle heartbeats' authors.
func (t *BrokerTransport) Describe(ctx context.Context, role codec.Role) (_ codec.Token, _ bool, err error) {
	if err := role.Validate(); err != nil {
		if _, session := rolestate.SessionMember(role); !session {
			return codec.Token{}, false, &Error{Kind: ErrAdmin, Role: role, Err: err}
		}
	}
	txnID := t.cfg.TransactionalID(string(role))
	defer func() { err = needs{txnOp: "DESCRIBE", txnID: txnID}.authz(err) }()
	var st sarama.TransactionState
	kerr, err := t.atTxnCoordinator(ctx, nil, txnID, func(b *sarama.Broker) (sarama.KError, error) {
		r, err := b.DescribeTransactions(&sarama.DescribeTransactionsRequest{
			Version:          versionDescribeTxns,
			TransactionalIDs: []string{txnID},
		})
		if err != nil {
			return 0, err
		}
		for _, s := range r.TransactionStates {
			if s.TransactionalID == txnID {
				st = s
				return s.ErrorCode, nil
			}
		}
		return 0, permanent(fmt.Errorf("the coordinator answered without a state for %s", txnID))
	})
	switch {
	case err != nil:
		return codec.Token{}, false, &Error{Kind: ErrAdmin, Role: role, Err: fmt.Errorf("DescribeTransactions on %s: %w", txnID, err)}
	case kerr == kerrTransactionalIDNotFound:
		return codec.Token{}, false, nil
	case kerr != sarama.ErrNoError:
		return codec.Token{}, false, &Error{Kind: ErrAdmin, Role: role, Err: fmt.Errorf("DescribeTransactions on %s: %w", txnID, kerrError(kerr))}
	case st.ProducerID < 0 || st.ProducerEpoch < 0 || st.TransactionState == "Dead":
		return codec.Token{}, false, nil
	}
	return codec.Token{ProducerID: st.ProducerID, Epoch: st.ProducerEpoch}, true, nil
}

// Register implements [Transport]: a plain append, acks=all. A retry
// after a lost connection may append it twice; the later copy ranks.
func (t *BrokerTransport) Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error) {
	return t.RegisterValue(ctx, role, member, "")
}

// RegisterValue is [BrokerTransport.Register] with the candidate's value;
// an invalid one returns [codec.ErrInvalid] unsent.
func (t *BrokerTransport) RegisterValue(ctx context.Context, role codec.Role, member codec.MemberID, value string) (int64, error) {
	if err := errors.Join(role.Validate(), member.Validate(), codec.CheckValue(value)); err != nil {
		return -1, &Error{Kind: ErrProducer, Role: role, Err: err}
	}
	val, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: member, RegisteredAt: time.Now().UnixMilli(), Value: value}})
	if err != nil {
		return -1, &Error{Kind: ErrProducer, Role: role, Err: err}
	}
	return t.appendPlain(ctx, role, codec.RegistrationKey(role, member).Encode(), val)
}

// Deregister implements [Transport]: a tombstone on member's registration
// key, appended as Register appends.
func (t *BrokerTransport) Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error {
	if err := errors.Join(role.Validate(), member.Validate()); err != nil {
		return &Error{Kind: ErrProducer, Role: role, Err: err}
	}
	_, err := t.appendPlain(ctx, role, codec.RegistrationKey(role, member).Encode(), nil)
	return err
}

func (t *BrokerTransport) appendPlain(ctx context.Context, role codec.Role, key, value []byte) (_ int64, err error) {
	defer func() { err = needs{topicOp: "WRITE", topic: t.cfg.Topic}.authz(err) }()
	p, err := t.partitionOf(ctx, role)
	if err != nil {
		return -1, err
	}
	batch := newBatch(-1, -1, -1, false, key, value)
	off, kerr, err := t.produce(ctx, nil, nil, t.cfg.Topic, p, batch)
	switch {
	case err != nil:
		return -1, &Error{Kind: ErrClient, Role: role, Err: fmt.Errorf("append to %s/%d: %w", t.cfg.Topic, p, err)}
	case kerr != sarama.ErrNoError:
		return -1, &Error{Kind: ErrProducer, Role: role, Err: fmt.Errorf("append to %s/%d: %w", t.cfg.Topic, p, kerrError(kerr))}
	}
	return off, nil
}

// partitionOf returns the partition of role in the role topic.
func (t *BrokerTransport) partitionOf(ctx context.Context, role codec.Role) (int32, error) {
	n, err := t.partitionCount(ctx, t.cfg.Topic, false)
	if err != nil {
		return -1, &Error{Kind: ErrClient, Role: role, Err: err}
	}
	return codec.Partition(role, n), nil
}
