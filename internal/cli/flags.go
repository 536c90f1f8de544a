package cli

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// DefaultBrokers is where krole looks for a cluster when neither --brokers
// nor KROLE_BROKERS says otherwise: where `krole dev` listens by default.
const DefaultBrokers = "127.0.0.1:9092"

// Flag categories in the help.
const (
	catCluster = "Cluster"
	catOutput  = "Output"
	catTLS     = "TLS"
	catSASL    = "SASL"
)

// globalFlags are the flags every command reads. Each has an environment
// variable; a flag on the command line wins over it.
func globalFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "brokers", Aliases: []string{"b"}, Value: DefaultBrokers, EnvVars: []string{"KROLE_BROKERS"}, Category: catCluster,
			Usage: "bootstrap brokers, a comma-separated list of `HOST:PORT`"},
		&ucli.StringFlag{Name: "topic", Value: fencing.DefaultTopic, EnvVars: []string{"KROLE_TOPIC"}, Category: catCluster,
			Usage: "the compacted role `TOPIC`"},
		&ucli.StringFlag{Name: "txn-prefix", Value: fencing.DefaultTxnPrefix, EnvVars: []string{"KROLE_TXN_PREFIX"}, Category: catCluster,
			Usage: "transactional id `PREFIX`: the id of a role is PREFIX followed by the role"},
		&ucli.StringFlag{Name: "pipeline", Value: "auto", EnvVars: []string{"KROLE_PIPELINE"}, Category: catCluster,
			Usage: "`MODE` auto, on or off: send a one-record transaction's commit behind its produce, one round trip less, " +
				"where the role's coordinator is its partition's leader (auto: where the broker reports " +
				"transaction.partition.verification.enable=true, Apache Kafka 3.6+; on: Apache Kafka or krole dev only, never Redpanda)"},
		&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: string(FormatTable), EnvVars: []string{"KROLE_OUTPUT"}, Category: catOutput,
			Usage: "output `FORMAT`: table (for people) or json (for programs)"},

		&ucli.BoolFlag{Name: "tls", EnvVars: []string{"KROLE_TLS"}, Category: catTLS,
			Usage: "connect with TLS (implied by --tls-ca and --tls-cert)"},
		&ucli.StringFlag{Name: "tls-ca", EnvVars: []string{"KROLE_TLS_CA"}, Category: catTLS, TakesFile: true,
			Usage: "PEM `FILE` of the CAs to trust (default: the system roots)"},
		&ucli.StringFlag{Name: "tls-cert", EnvVars: []string{"KROLE_TLS_CERT"}, Category: catTLS, TakesFile: true,
			Usage: "PEM `FILE` of the client certificate, for mutual TLS (with --tls-key)"},
		&ucli.StringFlag{Name: "tls-key", EnvVars: []string{"KROLE_TLS_KEY"}, Category: catTLS, TakesFile: true,
			Usage: "PEM `FILE` of the client certificate's key"},
		&ucli.StringFlag{Name: "tls-server-name", EnvVars: []string{"KROLE_TLS_SERVER_NAME"}, Category: catTLS,
			Usage: "`NAME` to check in the broker's certificate (default: the broker's host)"},
		&ucli.BoolFlag{Name: "tls-insecure-skip-verify", EnvVars: []string{"KROLE_TLS_INSECURE_SKIP_VERIFY"}, Category: catTLS,
			Usage: "accept any broker certificate (tests only: this disables TLS's protection)"},

		&ucli.StringFlag{Name: "sasl-mechanism", EnvVars: []string{"KROLE_SASL_MECHANISM"}, Category: catSASL,
			Usage: "`MECHANISM`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: no SASL)"},
		&ucli.StringFlag{Name: "sasl-user", EnvVars: []string{"KROLE_SASL_USER"}, Category: catSASL,
			Usage: "SASL `USER`"},
		&ucli.StringFlag{Name: "sasl-password", EnvVars: []string{"KROLE_SASL_PASSWORD"}, Category: catSASL,
			Usage: "SASL `PASSWORD` (prefer the environment variable: a flag shows in ps)"},
	}
}

// memberFlag is the --member flag of the commands that act for a member.
// It has no default: the CLI runs once and exits, so a default derived from
// the process (hostname:pid) would name a different member on every run, and
// `krole resign` could never match `krole register`.
func memberFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "member", Aliases: []string{"m"}, EnvVars: []string{"KROLE_MEMBER"},
		Usage: "the member id, `M`: 1-128 characters of [A-Za-z0-9._:@-] (required)"}
}

// configFrom builds the cluster configuration from the global flags. An
// impossible setting (a broker that is not host:port, an unknown SASL
// mechanism) is a usage error.
func configFrom(c *ucli.Context) (fencing.Config, error) {
	// An empty value (KROLE_BROKERS= in the environment) means the default,
	// as for every other setting.
	list := c.String("brokers")
	if strings.TrimSpace(list) == "" {
		list = DefaultBrokers
	}
	var brokers []string
	for _, b := range strings.Split(list, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	cfg := fencing.Config{
		Brokers:   brokers,
		Topic:     strings.TrimSpace(c.String("topic")),
		TxnPrefix: c.String("txn-prefix"),
		Pipeline:  strings.TrimSpace(c.String("pipeline")),
		TLS: fencing.TLSConfig{
			Enable:             c.Bool("tls"),
			CAFile:             c.String("tls-ca"),
			CertFile:           c.String("tls-cert"),
			KeyFile:            c.String("tls-key"),
			ServerName:         c.String("tls-server-name"),
			InsecureSkipVerify: c.Bool("tls-insecure-skip-verify"),
		},
		SASL: fencing.SASLConfig{
			Mechanism: strings.ToUpper(strings.TrimSpace(c.String("sasl-mechanism"))),
			User:      c.String("sasl-user"),
			Password:  c.String("sasl-password"),
		},
	}
	if cfg.TLS.ServerName != "" || cfg.TLS.InsecureSkipVerify || cfg.TLS.KeyFile != "" {
		cfg.TLS.Enable = true
	}
	cfg = cfg.WithDefaults()
	// A command bounded by --timeout (withTimeout): no request outlasts it.
	deadlineTimeouts(c.Context, &cfg.DialTimeout, &cfg.RequestTimeout)
	if err := cfg.Validate(); err != nil {
		return cfg, &UsageError{Err: err, Hint: "see 'krole --help' for the connection flags"}
	}
	if cfg.Topic == "" {
		return cfg, &UsageError{Err: errors.New("--topic must not be empty")}
	}
	return cfg, validateConnection(cfg)
}

// roleArg returns the command's one argument, ROLE, validated. A missing
// or extra argument is a usage error; a name that breaks the naming rule is
// a usage error whose message names the rule.
func roleArg(c *ucli.Context) (codec.Role, error) {
	args := c.Args().Slice()
	switch {
	case len(args) == 0:
		return "", Usagef(c, "%s needs a ROLE argument", c.Command.Name)
	case len(args) > 1:
		return "", Usagef(c, "%s takes one ROLE argument, got %d: unexpected %q", c.Command.Name, len(args), args[1])
	}
	role, err := codec.NewRole(args[0])
	if err != nil {
		return "", InvalidName(err)
	}
	return role, nil
}

// memberArg returns the --member of the command, validated.
func memberArg(c *ucli.Context) (codec.MemberID, error) {
	if c.String("member") == "" {
		return "", Usagef(c, "%s needs --member M (or KROLE_MEMBER): the member id", c.Command.Name)
	}
	m, err := codec.NewMemberID(c.String("member"))
	if err != nil {
		return "", InvalidName(err)
	}
	return m, nil
}

// noArgs fails with a usage error when the command got arguments.
func noArgs(c *ucli.Context) error {
	if c.Args().Present() {
		return Usagef(c, "%s takes no arguments, got %q", c.Command.Name, c.Args().First())
	}
	return nil
}

// validateOutput validates --output; the app runs it before any command.
func validateOutput(c *ucli.Context) error {
	switch Format(c.String("output")) {
	case "", FormatTable, FormatJSON: // "": KROLE_OUTPUT= in the environment
		return nil
	}
	return &UsageError{Err: fmt.Errorf("--output %q: must be table or json", c.String("output"))}
}

// validateListen validates listen, the --listen of a command that serves, and
// returns its port (0 picks a free one). An address that is not HOST:PORT
// (with a HOST when needHost is set) is a usage error.
func validateListen(c *ucli.Context, listen string, needHost bool) (int, error) {
	host, portStr, err := net.SplitHostPort(listen)
	port, perr := strconv.Atoi(portStr)
	if err != nil || (needHost && host == "") || perr != nil || port < 0 || port > 65535 {
		return 0, Usagef(c, "--listen %q is not HOST:PORT (PORT 0-65535, 0 picks a free port)", listen)
	}
	return port, nil
}

// clusterTopic returns the --topic of a command that starts the embedded
// cluster on listen (checked already), checked as a Kafka topic name.
func clusterTopic(c *ucli.Context, listen string) (string, error) {
	topic := strings.TrimSpace(c.String("topic"))
	if err := (fencing.Config{Brokers: []string{listen}, Topic: topic}).Validate(); err != nil || topic == "" {
		return "", Usagef(c, "--topic %q is not a valid Kafka topic name", topic)
	}
	return topic, nil
}
