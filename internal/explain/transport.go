package explain

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// Dial connects to the cluster of cfg. When no broker answers,
// the error says so, naming the addresses tried.
func Dial(cfg fencing.Config) (*fencing.BrokerTransport, error) {
	t, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		if errors.Is(err, fencing.ErrClient) {
			return nil, &NoBroker{Brokers: cfg.Brokers, SASL: cfg.SASL.Mechanism != "", Plaintext: Plaintext(cfg), Err: err}
		}
		return nil, err
	}
	return t, nil
}

// Transport passes every call to the transport and turns the errors a user
// can fix into sentences that say how. Each method is the transport's,
// with its error explained.
type Transport struct {
	t   *fencing.BrokerTransport
	cfg fencing.Config
}

// Wrap returns t, connected with cfg, with its errors explained.
func Wrap(t *fencing.BrokerTransport, cfg fencing.Config) *Transport {
	return &Transport{t: t, cfg: cfg}
}

func (e *Transport) Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error) {
	off, err := e.t.Register(ctx, role, member)
	return off, e.explain(err)
}

func (e *Transport) RegisterValue(ctx context.Context, role codec.Role, member codec.MemberID, value string) (int64, error) {
	off, err := e.t.RegisterValue(ctx, role, member, value)
	return off, e.explain(err)
}

func (e *Transport) Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error {
	return e.explain(e.t.Deregister(ctx, role, member))
}

func (e *Transport) ReadRoleRecords(ctx context.Context, role codec.Role) ([]fencing.RoleRecord, error) {
	recs, err := e.t.ReadRoleRecords(ctx, role)
	return recs, e.explain(err)
}

func (e *Transport) ReadSession(ctx context.Context, member codec.MemberID) ([]fencing.RoleRecord, error) {
	recs, err := e.t.ReadSession(ctx, member)
	return recs, e.explain(err)
}

func (e *Transport) Describe(ctx context.Context, role codec.Role) (codec.Token, bool, error) {
	tok, ok, err := e.t.Describe(ctx, role)
	return tok, ok, e.explain(err)
}

func (e *Transport) Close() error { return e.t.Close() }

func (e *Transport) Config() fencing.Config { return e.t.Config() }

// NewerRecordsSkipped counts the records of a newer format that reads
// skipped.
func (e *Transport) NewerRecordsSkipped() uint64 { return e.t.NewerRecordsSkipped() }

// ForgedLeasesSkipped counts the lease records that reads skipped as
// forged (fencing.SkipCounter, with NewerRecordsSkipped).
func (e *Transport) ForgedLeasesSkipped() uint64 { return e.t.ForgedLeasesSkipped() }

// UnverifiedLeasesKept counts the lease records that reads kept without
// verifying their producer id (no Describe on the transactional id).
func (e *Transport) UnverifiedLeasesKept() uint64 { return e.t.UnverifiedLeasesKept() }

func (e *Transport) explain(err error) error {
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return &MissingTopic{Topic: e.cfg.Topic, Brokers: e.cfg.Brokers, Err: err}
	}
	return err
}

// MissingTopic is the error of a command run before the role topic exists.
type MissingTopic struct {
	Topic   string
	Brokers []string
	Err     error
}

func (e *MissingTopic) Error() string {
	init := "krole init"
	if e.Topic != fencing.DefaultTopic {
		init += " --topic " + e.Topic
	}
	return fmt.Sprintf("topic %s does not exist at %s: create it with '%s' (or check --topic)", e.Topic, strings.Join(e.Brokers, ","), init)
}

func (e *MissingTopic) Unwrap() error { return e.Err }
