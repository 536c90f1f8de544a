package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/IBM/sarama"
	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// roleClient is what the one-shot commands need from the cluster: the
// read and registration calls of [fencing.Transport], and Close.
type roleClient interface {
	Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error)
	// RegisterValue is Register with the member's value; see
	// [fencing.BrokerTransport.RegisterValue].
	RegisterValue(ctx context.Context, role codec.Role, member codec.MemberID, value string) (int64, error)
	Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error
	ReadRoleRecords(ctx context.Context, role codec.Role) ([]fencing.RoleRecord, error)
	// ReadSession reads member's member-session records; see
	// [fencing.BrokerTransport.ReadSession].
	ReadSession(ctx context.Context, member codec.MemberID) ([]fencing.RoleRecord, error)
	Describe(ctx context.Context, role codec.Role) (codec.Token, bool, error)
	// Config is the configuration the client connected with, defaults
	// applied.
	Config() fencing.Config
	Close() error
}

// roleCall is what a one-shot command on one role starts from.
type roleCall struct {
	role   codec.Role
	member codec.MemberID // "" unless the command takes --member
	t      roleClient
}

// openRole reads the command's ROLE argument and, with member, its
// --member, runs check (when not nil) on its other flags, and connects to
// the cluster (see openTransport). The caller closes the client.
func openRole(c *ucli.Context, member bool, check func() error) (roleCall, error) {
	var rc roleCall
	var err error
	if rc.role, err = roleArg(c); err != nil {
		return roleCall{}, err
	}
	if member {
		if rc.member, err = memberArg(c); err != nil {
			return roleCall{}, err
		}
	}
	if check != nil {
		if err := check(); err != nil {
			return roleCall{}, err
		}
	}
	if rc.t, err = openTransport(c); err != nil {
		return roleCall{}, err
	}
	return rc, nil
}

// openTransport connects to the cluster that the global flags name. When
// no broker answers, the error says so, naming the addresses tried. The
// errors of the calls on the returned client name the topic when it does
// not exist. The caller closes the client.
func openTransport(c *ucli.Context) (roleClient, error) {
	cfg, err := configFrom(c)
	if err != nil {
		return nil, err
	}
	// The dial takes no context: it is abandoned when c.Context ends
	// (--timeout, an interrupt), and bounded by cfg's timeouts anyway.
	t, err := startInterruptible(c.Context, func() (*fencing.BrokerTransport, error) { return dialTransport(cfg) })
	if err != nil {
		return nil, err
	}
	return &explained{t: t, cfg: cfg}, nil
}

// dialTransport connects to the cluster of cfg. When no broker answers,
// the error says so, naming the addresses tried.
func dialTransport(cfg fencing.Config) (*fencing.BrokerTransport, error) {
	t, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		if errors.Is(err, fencing.ErrClient) {
			return nil, &noBroker{Brokers: cfg.Brokers, SASL: cfg.SASL.Mechanism != "", Plaintext: plaintext(cfg), Err: err}
		}
		return nil, err
	}
	return t, nil
}

// explained passes every call to the transport and turns the errors a user
// can fix into sentences that say how.
type explained struct {
	t   *fencing.BrokerTransport
	cfg fencing.Config
}

func (e *explained) Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error) {
	off, err := e.t.Register(ctx, role, member)
	return off, e.explain(err)
}

func (e *explained) RegisterValue(ctx context.Context, role codec.Role, member codec.MemberID, value string) (int64, error) {
	off, err := e.t.RegisterValue(ctx, role, member, value)
	return off, e.explain(err)
}

func (e *explained) Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error {
	return e.explain(e.t.Deregister(ctx, role, member))
}

func (e *explained) ReadRoleRecords(ctx context.Context, role codec.Role) ([]fencing.RoleRecord, error) {
	recs, err := e.t.ReadRoleRecords(ctx, role)
	return recs, e.explain(err)
}

func (e *explained) ReadSession(ctx context.Context, member codec.MemberID) ([]fencing.RoleRecord, error) {
	recs, err := e.t.ReadSession(ctx, member)
	return recs, e.explain(err)
}

func (e *explained) Describe(ctx context.Context, role codec.Role) (codec.Token, bool, error) {
	tok, ok, err := e.t.Describe(ctx, role)
	return tok, ok, e.explain(err)
}

func (e *explained) Close() error { return e.t.Close() }

func (e *explained) Config() fencing.Config { return e.t.Config() }

// NewerRecordsSkipped counts the records of a newer format that reads
// skipped.
func (e *explained) NewerRecordsSkipped() uint64 { return e.t.NewerRecordsSkipped() }

// ForgedLeasesSkipped counts the lease records that reads skipped as
// forged (fencing.SkipCounter, with NewerRecordsSkipped).
func (e *explained) ForgedLeasesSkipped() uint64 { return e.t.ForgedLeasesSkipped() }

// UnverifiedLeasesKept counts the lease records that reads kept without
// verifying their producer id (no Describe on the transactional id).
func (e *explained) UnverifiedLeasesKept() uint64 { return e.t.UnverifiedLeasesKept() }

func (e *explained) explain(err error) error {
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return &missingTopic{Topic: e.cfg.Topic, Brokers: e.cfg.Brokers, Err: err}
	}
	return err
}

// missingTopic is the error of a command run before the role topic exists.
type missingTopic struct {
	Topic   string
	Brokers []string
	Err     error
}

func (e *missingTopic) Error() string {
	init := "krole init"
	if e.Topic != fencing.DefaultTopic {
		init += " --topic " + e.Topic
	}
	return fmt.Sprintf("topic %s does not exist at %s: create it with '%s' (or check --topic)", e.Topic, strings.Join(e.Brokers, ","), init)
}

func (e *missingTopic) Unwrap() error { return e.Err }
