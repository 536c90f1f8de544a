// Package explain turns the errors of krole's cluster clients into the
// one-line sentences its command line prints: what went wrong and the
// flag or command that fixes it. It changes no error's identity: each
// type it returns unwraps to the error it explains, so errors.Is and
// errors.As still find the cause.
package explain

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/fencing"
)

// Describe turns the errors that come out of the cluster clients into
// a sentence a user can act on.
func Describe(err error) string {
	var fe *fencing.Error
	var nb *NoBroker
	var ae *fencing.AuthorizationError
	var bse *fencing.BrokerSettingsError
	var na *NoAnswer
	switch {
	case errors.As(err, &na):
		// --timeout passed: whatever the command met on the way.
		return na.Error()
	case errors.As(err, &nb):
		return nb.Error()
	case errors.As(err, &bse) && bse.Refused:
		// The transport's words name a Go field (TxnTimeout); say which
		// flag sets it.
		return fmt.Sprintf("the cluster refuses krole's transaction timeout: %s (krole run's is half its --lease-duration, most other commands' %v)",
			bse.Error(), fencing.DefaultTxnTimeout)
	case errors.As(err, &ae):
		// The one thing to fix, whatever the call: the ACL it names.
		return ae.Error()
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.As(err, &fe) && fe.Role == "" && fe.Err != nil:
		// Not about one role: "client: role : ..." says nothing more.
		return fe.Err.Error()
	}
	return err.Error()
}

// packagePrefix matches the name of a krole package with which the
// libraries begin their errors ("view: ...", "fencing config: ..."), at the
// start of a message or after the ": " of a wrapping one.
var packagePrefix = regexp.MustCompile(`(^|: )(?:view|fencing config|fencing|election|processor|rolestate): `)

// WithoutPackagePrefixes drops the package names that the libraries put in
// front of their errors: a user of the command line has no use for them.
func WithoutPackagePrefixes(msg string) string {
	for {
		next := packagePrefix.ReplaceAllString(msg, "$1")
		if next == msg {
			return msg
		}
		msg = next
	}
}

// NoBroker is the error of a command that could not reach any broker.
type NoBroker struct {
	Brokers []string
	SASL    bool // SASL was configured: an EOF may be a refused login
	// Plaintext: the command connected without TLS, so an EOF may be a
	// TLS listener's answer.
	Plaintext bool
	Err       error
}

// plaintext reports whether cfg connects without TLS.
func Plaintext(cfg fencing.Config) bool {
	return !cfg.TLS.Enable && cfg.TLS.CAFile == "" && cfg.TLS.CertFile == ""
}

func (e *NoBroker) Error() string {
	addrs := strings.Join(e.Brokers, ",")
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var he *fencing.TLSHandshakeError
	switch {
	case errors.As(e.Err, &he) && he.NotTLS && he.Timeout > 0:
		return fmt.Sprintf("TLS handshake with %s failed: no answer within %v: is the listener plaintext? drop --tls (and --tls-ca)", addrs, he.Timeout)
	case errors.As(e.Err, &he) && he.NotTLS:
		return fmt.Sprintf("TLS handshake with %s failed: the broker does not speak TLS there (%s): is the listener plaintext? drop --tls (and --tls-ca)", addrs, RootCause(e.Err))
	case errors.Is(e.Err, sarama.ErrSASLAuthenticationFailed):
		return fmt.Sprintf("SASL authentication failed at %s: check --sasl-mechanism, --sasl-user and the password (%s)", addrs, RootCause(e.Err))
	case errors.As(e.Err, &cve):
		return fmt.Sprintf("TLS with %s failed: %s (check --tls-ca and --tls-server-name)", addrs, RootCause(e.Err))
	case errors.As(e.Err, &rhe):
		return fmt.Sprintf("TLS with %s failed: the broker does not speak TLS there (%s)", addrs, RootCause(e.Err))
	}
	msg := fmt.Sprintf("no broker answered at %s: %s", addrs, RootCause(e.Err))
	closed := errors.Is(e.Err, io.EOF) || errors.Is(e.Err, io.ErrUnexpectedEOF)
	switch {
	case closed && e.SASL && e.Plaintext:
		msg += " (the broker closed the connection; check --sasl-mechanism, --sasl-user and the password, or, if its listener uses TLS, add --tls)"
	case closed && e.SASL:
		msg += " (the broker closed the connection; check --sasl-mechanism, --sasl-user and the password)"
	case closed && e.Plaintext:
		msg += " (the broker closed the connection: is the listener TLS? add --tls, or --tls-ca; or does it need SASL? set --sasl-mechanism)"
	}
	return msg
}

func (e *NoBroker) Unwrap() error { return e.Err }

// RootCause returns the innermost message of err: the network error when
// there is one (sarama wraps "dial tcp ...: connection refused" in several
// layers of "kafka: client has run out of available brokers"), else the
// innermost error of the chain.
func RootCause(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Error()
	}
	for {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[len(errs)-1]
			}
		}
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// OneLine folds a multi-line message into one line.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	return strings.Join(fields, "; ")
}

// NoAnswer is the error of a command whose cluster did not answer within
// its --timeout: no broker answered a request in time (a stopped or
// overloaded broker accepts connections and answers nothing).
type NoAnswer struct {
	Brokers []string
	Timeout time.Duration
	Writes  bool  // the command writes: what it sent may still take effect
	Err     error // the error the command met, nil when it was abandoned
}

func (e *NoAnswer) Error() string {
	msg := fmt.Sprintf("no answer from the brokers at %s within --timeout %v", strings.Join(e.Brokers, ","), e.Timeout)
	if e.Err != nil && !errors.Is(e.Err, context.DeadlineExceeded) && !errors.Is(e.Err, context.Canceled) {
		msg += " (" + RootCause(e.Err) + ")"
	} else {
		msg += " (" + SilentBroker + ")"
	}
	if e.Writes {
		msg += "; a write sent may still take effect if the cluster answers later"
	}
	return msg
}

func (e *NoAnswer) Unwrap() error { return e.Err }

// SilentBroker is what a cluster that answers nothing most often is.
const SilentBroker = "a stopped or overloaded broker accepts connections and answers nothing"

// Refusal returns the authorization failure that err carries, or nil; a
// bare code is taken for the view's (Read on the role topic).
func Refusal(err error, topic string) *fencing.AuthorizationError {
	return fencing.AuthorizationOf(err, fencing.AuthorizationError{Operation: "READ", Resource: fencing.ResourceTopic, Name: topic})
}

// RunError turns the errors of a view or transport into what the
// one-shot commands say for them.
func RunError(cfg fencing.Config, err error) error {
	if ae := Refusal(err, cfg.Topic); ae != nil {
		return ae
	}
	switch {
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return &MissingTopic{Topic: cfg.Topic, Brokers: cfg.Brokers, Err: err}
	case errors.Is(err, fencing.ErrClient), errors.Is(err, sarama.ErrOutOfBrokers):
		return &NoBroker{Brokers: cfg.Brokers, SASL: cfg.SASL.Mechanism != "", Plaintext: Plaintext(cfg), Err: err}
	}
	return err
}
