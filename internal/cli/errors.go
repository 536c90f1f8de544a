package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/IBM/sarama"
	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/fencing"
)

// Exit codes of [Run].
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitFailure: anything that is not the caller's mistake on the command
	// line: no broker answered, the cluster refused a request, a record did
	// not decode.
	ExitFailure = 1
	// ExitUsage: a usage error (unknown command or flag, a missing or extra
	// argument, a bad flag value) or an invalid role or member name.
	ExitUsage = 2
)

// UsageError is a mistake on the command line. [Run] prints it on one line,
// followed by a one-line hint when Hint is set, and exits with [ExitUsage].
// Commands return one through [Usagef] or [InvalidName].
type UsageError struct {
	Err  error
	Hint string // e.g. "see 'krole register --help'"; empty for none
}

func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a [*UsageError] whose hint points at the help of the
// command that c runs.
func Usagef(c *ucli.Context, format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...), Hint: helpHint(c)}
}

// InvalidName returns err (a [*codec.InvalidError] from codec.NewRole or
// codec.NewMemberID) as a usage error. Its message names the broken rule, so
// no hint follows it.
func InvalidName(err error) error { return &UsageError{Err: err} }

func helpHint(c *ucli.Context) string {
	if c == nil || c.Command == nil || c.Command.Name == "" || c.Command.Name == c.App.Name {
		return "see 'krole --help'"
	}
	name := c.Command.Name
	if full, ok := strings.CutPrefix(c.Command.HelpName, c.App.Name+" "); ok && strings.HasSuffix(full, " "+name) {
		name = full // a subcommand: "bench renew"
	}
	return fmt.Sprintf("see 'krole %s --help'", name)
}

// exitCode maps the error a command returned to the process exit code.
func exitCode(err error) int {
	var ue *UsageError
	var ec ucli.ExitCoder
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &ec):
		if code := ec.ExitCode(); code != 0 {
			return code
		}
		return ExitFailure
	}
	return ExitFailure
}

// report prints err to w: one line ("krole: ..."), without the package
// names the libraries begin their errors with, and the hint of a usage
// error on a second line. Nothing for a nil error, or a cli.Exit error with
// an empty message.
func report(w io.Writer, err error) {
	if err == nil {
		return
	}
	msg := oneLine(withoutPackagePrefixes(describeError(err)))
	if msg == "" {
		return
	}
	fmt.Fprintf(w, "krole: %s\n", msg)
	var ue *UsageError
	if errors.As(err, &ue) && ue.Hint != "" {
		fmt.Fprintf(w, "%s\n", ue.Hint)
	}
}

// describeError turns the errors that come out of the cluster clients into
// a sentence a user can act on.
func describeError(err error) string {
	var fe *fencing.Error
	var nb *noBroker
	var ae *fencing.AuthorizationError
	var bse *fencing.BrokerSettingsError
	var na *noAnswer
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

// withoutPackagePrefixes drops the package names that the libraries put in
// front of their errors: a user of the command line has no use for them.
func withoutPackagePrefixes(msg string) string {
	for {
		next := packagePrefix.ReplaceAllString(msg, "$1")
		if next == msg {
			return msg
		}
		msg = next
	}
}

// noBroker is the error of a command that could not reach any broker.
type noBroker struct {
	Brokers []string
	SASL    bool // SASL was configured: an EOF may be a refused login
	// Plaintext: the command connected without TLS, so an EOF may be a
	// TLS listener's answer.
	Plaintext bool
	Err       error
}

// plaintext reports whether cfg connects without TLS.
func plaintext(cfg fencing.Config) bool {
	return !cfg.TLS.Enable && cfg.TLS.CAFile == "" && cfg.TLS.CertFile == ""
}

func (e *noBroker) Error() string {
	addrs := strings.Join(e.Brokers, ",")
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var he *fencing.TLSHandshakeError
	switch {
	case errors.As(e.Err, &he) && he.NotTLS && he.Timeout > 0:
		return fmt.Sprintf("TLS handshake with %s failed: no answer within %v: is the listener plaintext? drop --tls (and --tls-ca)", addrs, he.Timeout)
	case errors.As(e.Err, &he) && he.NotTLS:
		return fmt.Sprintf("TLS handshake with %s failed: the broker does not speak TLS there (%s): is the listener plaintext? drop --tls (and --tls-ca)", addrs, rootCause(e.Err))
	case errors.Is(e.Err, sarama.ErrSASLAuthenticationFailed):
		return fmt.Sprintf("SASL authentication failed at %s: check --sasl-mechanism, --sasl-user and the password (%s)", addrs, rootCause(e.Err))
	case errors.As(e.Err, &cve):
		return fmt.Sprintf("TLS with %s failed: %s (check --tls-ca and --tls-server-name)", addrs, rootCause(e.Err))
	case errors.As(e.Err, &rhe):
		return fmt.Sprintf("TLS with %s failed: the broker does not speak TLS there (%s)", addrs, rootCause(e.Err))
	}
	msg := fmt.Sprintf("no broker answered at %s: %s", addrs, rootCause(e.Err))
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

func (e *noBroker) Unwrap() error { return e.Err }

// rootCause returns the innermost message of err: the network error when
// there is one (sarama wraps "dial tcp ...: connection refused" in several
// layers of "kafka: client has run out of available brokers"), else the
// innermost error of the chain.
func rootCause(err error) string {
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

// addrInUse reports whether err says that a listen address is taken.
func addrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }

// oneLine folds a multi-line message into one line.
func oneLine(s string) string {
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
