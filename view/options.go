package view

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// DefaultReconnectBackoff is the default of [Options].ReconnectBackoff.
const DefaultReconnectBackoff = time.Second

// Options configure a [View]. The zero value of every field but Config is
// usable.
type Options struct {
	// Config names the cluster and the role topic (Config.Topic, default
	// "krole.roles"). Config.Brokers is required. The view reads with the
	// sarama configuration of Config.Sarama(): read_committed isolation,
	// its timeouts, TLS and SASL.
	Config fencing.Config

	// StateDir, when set, keeps the table on disk (goka's LevelDB storage,
	// one database per partition under StateDir/<topic>.<partition>), so
	// that a restart resumes from the last offset it read instead of
	// rereading the topic. A state dir belongs to one topic of one cluster:
	// a topic recreated shorter than the state dir's offsets is noticed and
	// its partitions' state cleared (see the package doc, "When the topic
	// starts over"), but one recreated and written past them is not, so
	// delete the state dir when the topic is recreated. Default "": the
	// table lives in memory only and every Run reads the topic from its
	// start.
	StateDir string

	// Logger receives the view's logs (and goka's, at info level). Default
	// nil: logs are discarded.
	Logger *slog.Logger

	// Clock is the view's time source: for [View.Holder] calls with a
	// zero time, for stamping each lease with when the view applied it
	// (rolestate.State.LeaseSeenAt), and for [View.Health]. Only
	// differences of its readings matter, so it may be any clock that
	// does not jump (time.Now's readings carry a monotonic clock). Default
	// nil: time.Now.
	Clock func() time.Time

	// HealthInterval is how often the view probes the end of the role
	// topic to confirm that it is caught up and that a broker answers
	// (see [View.Health]): one ListOffsets round trip per partition
	// leader while nothing new is committed. Default 1s.
	HealthInterval time.Duration

	// StaleAfter bounds the view's freshness: [View.Health] reports the
	// view unhealthy when no broker has answered it for longer than this,
	// or when it has not been confirmed caught up for longer. Default 5s.
	StaleAfter time.Duration

	// ReconnectBackoff is the first pause before the view reconnects after
	// a consumer error; each further failure adds it again, up to ten
	// times its value. Default 1s.
	ReconnectBackoff time.Duration

	// Authors is the record of the roles' own producer ids the view
	// checks lease records against (see the package doc, "Who can write
	// what"). A member's view may share its transport's
	// (fencing.BrokerTransport.Authors), which knows the producer ids the
	// member minted. Default nil: the view keeps its own.
	Authors *rolestate.Authors

	// Describe asks the coordinator of role's transactional id for its
	// producer id and epoch (ok false when it has none), to verify lease
	// authors, one role at a time. Default nil: a fencing.BrokerTransport
	// the view makes from Config at its first question, which asks about
	// the roles waiting together (DescribeAtEachBroker).
	Describe func(ctx context.Context, role codec.Role) (tok codec.Token, ok bool, err error)
}

func (o Options) withDefaults() Options {
	o.Config = o.Config.WithDefaults()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.ReconnectBackoff == 0 {
		o.ReconnectBackoff = DefaultReconnectBackoff
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.StaleAfter == 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	return o
}

func (o Options) validate() error {
	if err := o.Config.Validate(); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	if o.HealthInterval < 0 || o.StaleAfter < 0 {
		return fmt.Errorf("view: HealthInterval %v and StaleAfter %v must not be negative", o.HealthInterval, o.StaleAfter)
	}
	if o.ReconnectBackoff < 0 {
		return fmt.Errorf("view: ReconnectBackoff %v must not be negative", o.ReconnectBackoff)
	}
	return nil
}
