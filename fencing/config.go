package fencing

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// Defaults of [Config].
const (
	DefaultTopic          = "krole.roles"    // Config.Topic
	DefaultTxnPrefix      = "krole."         // Config.TxnPrefix
	DefaultDialTimeout    = 5 * time.Second  // Config.DialTimeout
	DefaultRequestTimeout = 10 * time.Second // Config.RequestTimeout
	DefaultTxnTimeout     = 5 * time.Second  // Config.TxnTimeout
)

// SASL mechanisms accepted in [SASLConfig].Mechanism.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// TLSConfig enables TLS to the brokers. A zero TLSConfig with Enable set
// uses the system roots.
type TLSConfig struct {
	Enable             bool   // connect with TLS; implied by CAFile or CertFile
	CAFile             string // PEM roots; empty: the system roots
	CertFile, KeyFile  string // client certificate, for mutual TLS
	ServerName         string // overrides the name checked in the broker's certificate
	InsecureSkipVerify bool   // for tests only: accept any certificate
}

// SASLConfig enables SASL authentication.
type SASLConfig struct {
	Mechanism string // "" (off), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (any case)
	User      string // required with a mechanism
	Password  string // the user's password; never printed (see String)
}

// String shows the mechanism and the user, never the password, so a
// config printed or logged (%v, %#v, JSON, slog) keeps it secret.
func (s SASLConfig) String() string {
	pw := ""
	if s.Password != "" {
		pw = "[redacted]"
	}
	return fmt.Sprintf("{Mechanism:%s User:%s Password:%s}", s.Mechanism, s.User, pw)
}

// GoString is String, for %#v.
func (s SASLConfig) GoString() string { return "fencing.SASLConfig" + s.String() }

// MarshalJSON writes the mechanism and the user, and the password as
// "[redacted]" when there is one.
func (s SASLConfig) MarshalJSON() ([]byte, error) {
	pw := ""
	if s.Password != "" {
		pw = "[redacted]"
	}
	return json.Marshal(struct{ Mechanism, User, Password string }{s.Mechanism, s.User, pw})
}

// LogValue is String, for log/slog.
func (s SASLConfig) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Config says how to reach the cluster and where krole keeps its state.
type Config struct {
	// Brokers are the bootstrap addresses, host:port. Required.
	Brokers []string
	// Topic is the compacted role topic. Default "krole.roles".
	Topic string
	// TxnPrefix + role is the role's transactional id. Default "krole.".
	TxnPrefix string
	// ClientID is sent to the brokers. Default "krole".
	ClientID string
	// DialTimeout bounds a connection attempt. Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds one request's round trip. Default 10s.
	RequestTimeout time.Duration
	// TxnTimeout is sent with InitProducerId: the coordinator aborts a
	// transaction left open that long (Apache Kafka and Redpanda at their
	// next periodic check), holding its partitions' read_committed readers
	// back until then. Below the lease duration minus the heartbeat
	// interval (processor.New checks) and transaction.max.timeout.ms; see
	// docs/DESIGN.md, "Liveness: what bounds a vacancy". Default 5s.
	TxnTimeout time.Duration
	// TLS, when enabled, encrypts the connections. Default off.
	TLS TLSConfig
	// SASL, when a mechanism is set, authenticates them. Default off.
	SASL SASLConfig
	// Pipeline says whether a one-record transaction sends its commit
	// behind its produce where the coordinator leads the partition
	// (package doc, "Pipelined commits"). Default PipelineAuto.
	Pipeline string
}

// Values of [Config].Pipeline.
const (
	// PipelineAuto pipelines where a broker reports
	// [BrokerPartitionVerification] true (Apache Kafka 3.6+); Redpanda
	// and kfake do not.
	PipelineAuto = ""
	// PipelineOn pipelines always: only for a cluster that answers each
	// connection's requests in order (Apache Kafka, kfake), never Redpanda.
	PipelineOn  = "on"
	PipelineOff = "off" // never pipelines
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	c.TxnPrefix = c.txnPrefix()
	if c.ClientID == "" {
		c.ClientID = "krole"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.TxnTimeout == 0 {
		c.TxnTimeout = DefaultTxnTimeout
	}
	return c
}

// Validate reports the first impossible setting, naming it.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no brokers: set --brokers or KROLE_BROKERS to host:port[,host:port]")
	}
	for _, b := range c.Brokers {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			return fmt.Errorf("broker address %q is not host:port", b)
		}
	}
	if strings.ContainsAny(c.Topic, "/ ") || len(c.Topic) > 249 {
		return fmt.Errorf("topic %q is not a valid Kafka topic name", c.Topic)
	}
	if c.DialTimeout < 0 || c.RequestTimeout < 0 || c.TxnTimeout < 0 {
		return errors.New("timeouts must not be negative")
	}
	switch strings.ToUpper(c.SASL.Mechanism) {
	case "":
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASL.User == "" {
			return fmt.Errorf("SASL mechanism %s needs a user", c.SASL.Mechanism)
		}
	default:
		return fmt.Errorf("SASL mechanism %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", c.SASL.Mechanism)
	}
	switch c.Pipeline {
	case PipelineAuto, "auto", PipelineOn, PipelineOff:
	default:
		return fmt.Errorf("pipeline %q is not one of auto, on, off", c.Pipeline)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return errors.New("TLS client certificate and key go together: set both or neither")
	}
	return nil
}

// TransactionalID returns the transactional id of role: TxnPrefix + role.
func (c Config) TransactionalID(role string) string { return c.txnPrefix() + role }

func (c Config) txnPrefix() string {
	if c.TxnPrefix == "" {
		return DefaultTxnPrefix
	}
	return c.TxnPrefix
}

// Sarama returns the sarama configuration for c: Kafka 2.8 protocol
// versions, read_committed, the timeouts, TLS and SASL. With TLS, the
// dialer (Net.Proxy.Dialer) does the handshake within DialTimeout and
// Net.TLS.Enable is off; a caller that replaces the dialer must do the
// handshake itself.
func (c Config) Sarama() (*sarama.Config, error) { return c.WithDefaults().sarama() }

// sarama is Sarama for a c whose defaults are applied already.
func (c Config) sarama() (*sarama.Config, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sc := sarama.NewConfig()
	sc.ClientID = c.ClientID
	sc.Version = sarama.V2_8_0_0
	sc.Net.DialTimeout = c.DialTimeout
	sc.Net.ReadTimeout = c.RequestTimeout
	sc.Net.WriteTimeout = c.RequestTimeout
	sc.Metadata.Retry.Max = 2
	sc.Metadata.Retry.Backoff = 200 * time.Millisecond
	sc.Metadata.Timeout = c.DialTimeout + c.RequestTimeout
	// A topic krole writes to must exist and be compacted: never let a
	// metadata request create it with the broker's defaults.
	sc.Metadata.AllowAutoTopicCreation = false
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.Return.Errors = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Admin.Timeout = c.RequestTimeout
	if c.TLS.Enable || c.TLS.CAFile != "" || c.TLS.CertFile != "" {
		tc, err := c.TLS.build()
		if err != nil {
			return nil, err
		}
		// The dialer does the handshake, within the dial timeout (see
		// tlsdial.go); sarama must not wrap the connection again.
		sc.Net.TLS.Enable = false
		sc.Net.Proxy.Enable = true
		sc.Net.Proxy.Dialer = &tlsDialer{d: &net.Dialer{Timeout: c.DialTimeout, KeepAlive: sc.Net.KeepAlive}, cfg: tc, timeout: c.DialTimeout}
	}
	if m := strings.ToUpper(c.SASL.Mechanism); m != "" {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.User = c.SASL.User
		sc.Net.SASL.Password = c.SASL.Password
		sc.Net.SASL.Handshake = true
		switch m {
		case SASLPlain:
			sc.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		case SASLScramSHA256:
			sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
			sc.Net.SASL.SCRAMClientGeneratorFunc = scramSHA256
		case SASLScramSHA512:
			sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
			sc.Net.SASL.SCRAMClientGeneratorFunc = scramSHA512
		}
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("sarama config: %w", err)
	}
	return sc, nil
}

func (t TLSConfig) build() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, for tests
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
