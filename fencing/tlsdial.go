package fencing

// TLS dialing. sarama wraps a new connection in TLS and leaves the
// handshake to the first request, bounded by the request timeout and
// resent by the metadata retries: against a plaintext listener, which
// never answers a ClientHello (or, as Apache Kafka does, closes the
// connection), a client learnt nothing but "i/o timeout" after 20 s.
// Here the dialer completes the handshake itself within the dial timeout,
// and a failed handshake is a [*TLSHandshakeError]; [CheckTLS] tries the
// bootstrap brokers once before a client starts, so that no retry repeats
// a handshake that cannot succeed.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// TLSHandshakeError is the error of a connection whose TLS handshake
// failed: the broker's certificate was refused (Err matches
// *tls.CertificateVerificationError), or the broker did not speak TLS
// (NotTLS: it closed the connection, answered something else, or gave no
// answer within the dial timeout; the listener is likely plaintext).
type TLSHandshakeError struct {
	Addr    string        // the broker, host:port
	NotTLS  bool          // the broker does not seem to speak TLS there
	Timeout time.Duration // when the handshake timed out: the dial timeout; else 0
	Err     error         // the cause
}

func (e *TLSHandshakeError) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("TLS handshake with %s failed: no answer within the dial timeout %v", e.Addr, e.Timeout)
	}
	return fmt.Sprintf("TLS handshake with %s failed: %v", e.Addr, e.Err)
}

// Unwrap returns the cause.
func (e *TLSHandshakeError) Unwrap() error { return e.Err }

// netDialer is what sarama's Net.Proxy.Dialer holds.
type netDialer interface {
	Dial(network, addr string) (net.Conn, error)
}

// tlsDialer dials through d and completes the TLS handshake within
// timeout.
type tlsDialer struct {
	d       netDialer
	cfg     *tls.Config
	timeout time.Duration
}

func (t *tlsDialer) Dial(network, addr string) (net.Conn, error) {
	conn, err := t.d.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	return handshake(context.Background(), conn, t.cfg, addr, t.timeout)
}

// handshake completes a TLS handshake as a client on conn with addr,
// within timeout or until ctx ends. It closes conn when the handshake
// fails, with a [*TLSHandshakeError].
func handshake(ctx context.Context, conn net.Conn, cfg *tls.Config, addr string, timeout time.Duration) (net.Conn, error) {
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(conn, cfg)
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, handshakeError(addr, timeout, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return tc, nil
}

// handshakeError classifies the error of a failed handshake with addr.
func handshakeError(addr string, timeout time.Duration, err error) *TLSHandshakeError {
	e := &TLSHandshakeError{Addr: addr, Err: err}
	var ne net.Error
	var rhe tls.RecordHeaderError
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		e.NotTLS, e.Timeout = true, timeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.As(err, &rhe):
		e.NotTLS = true
	}
	return e
}

// withTLS returns d with the TLS of sc on top when sc's dialer is one
// that [Config.Sarama] installed for TLS; d itself otherwise.
func withTLS(sc *sarama.Config, d netDialer) netDialer {
	if td, ok := sc.Net.Proxy.Dialer.(*tlsDialer); ok && sc.Net.Proxy.Enable {
		return &tlsDialer{d: d, cfg: td.cfg, timeout: td.timeout}
	}
	return d
}

// CheckTLS tries a TLS handshake with every bootstrap broker of cfg at
// once, and returns an [*Error] of kind [ErrClient] wrapping the
// [*TLSHandshakeError]s when every one failed; nil when TLS is off, when
// one handshake succeeded, or when a broker could not be dialled at all
// (the client reports that). It blocks for cfg.DialTimeout at most; when
// ctx ends first, it returns ctx.Err() once its dials have stopped. An
// invalid cfg returns its error.
func CheckTLS(ctx context.Context, cfg Config) error {
	cfg = cfg.WithDefaults()
	sc, err := cfg.sarama()
	if err != nil {
		return err
	}
	return checkTLS(ctx, cfg, sc)
}

// checkTLS is CheckTLS for a cfg whose defaults are applied and sc, the
// sarama configuration built from it; it reads only the TLS settings of
// sc's dialer, which NewBrokerTransport may have wrapped around its own.
func checkTLS(ctx context.Context, cfg Config, sc *sarama.Config) error {
	td, ok := sc.Net.Proxy.Dialer.(*tlsDialer)
	if !ok || !sc.Net.Proxy.Enable {
		return nil
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		good bool
	)
	d := &net.Dialer{Timeout: cfg.DialTimeout}
	for _, addr := range cfg.Brokers {
		wg.Go(func() {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn, err = handshake(ctx, conn, td.cfg, addr, cfg.DialTimeout)
			}
			mu.Lock()
			defer mu.Unlock()
			var he *TLSHandshakeError
			switch {
			case err == nil:
				_ = conn.Close()
				good = true
			case errors.As(err, &he) && ctx.Err() == nil:
				errs = append(errs, err)
			default:
				good = true // not a TLS failure: the client will say what it is
			}
		})
	}
	wg.Wait()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case good:
		return nil
	}
	return &Error{Kind: ErrClient, Err: fmt.Errorf("no broker answered at %s: %w", strings.Join(cfg.Brokers, ","), errors.Join(errs...))}
}
