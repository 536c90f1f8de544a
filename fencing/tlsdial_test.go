package fencing_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/testcluster"
)

// TestTLSHandshake dials with TLS a plaintext listener, a TLS listener
// whose certificate is not trusted, and one that is. A handshake that
// cannot succeed fails NewBrokerTransport once, with a
// *TLSHandshakeError, after one attempt: the client's metadata retries
// (three attempts) do not repeat it. Attempts are counted by a TCP relay
// in front of the plaintext listener, not by the time they took.
func TestTLSHandshake(t *testing.T) {
	if testcluster.External() {
		t.Skip("needs embedded clusters with and without TLS; KROLE_BROKERS names an outside cluster")
	}
	caFile, serverTLS := testcluster.SelfSignedTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{}))
	require.NoError(t, err)
	t.Cleanup(plain.Close)
	secure, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Extra: []kfake.Opt{kfake.TLS(serverTLS)}}))
	require.NoError(t, err)
	t.Cleanup(secure.Close)
	// kfake's plaintext listener never answers a ClientHello: the
	// handshake runs into the dial timeout.
	const dial = 500 * time.Millisecond

	t.Run("plaintext listener", func(t *testing.T) {
		addr, dials := countingRelay(t, plain.ListenAddrs()[0])
		cfg := fencing.Config{Brokers: []string{addr}, DialTimeout: dial, TLS: fencing.TLSConfig{CAFile: caFile}}
		_, err := fencing.NewBrokerTransport(cfg)
		require.Error(t, err)
		assert.ErrorIs(t, err, fencing.ErrClient)
		var he *fencing.TLSHandshakeError
		require.True(t, errors.As(err, &he), "%v", err)
		assert.True(t, he.NotTLS)
		assert.Equal(t, dial, he.Timeout)
		assert.Equal(t, addr, he.Addr)
		assert.Equal(t, int64(1), dials.Load(), "the handshake was repeated")
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		// A loaded machine may take longer than dial to complete a
		// handshake; this case is about the certificate, not the time.
		cfg := fencing.Config{Brokers: secure.ListenAddrs(), DialTimeout: 10 * time.Second, TLS: fencing.TLSConfig{Enable: true}}
		err := fencing.CheckTLS(ctx, cfg)
		var he *fencing.TLSHandshakeError
		require.True(t, errors.As(err, &he), "%v", err)
		assert.False(t, he.NotTLS)
		var cve *tls.CertificateVerificationError
		assert.True(t, errors.As(err, &cve), "%v", err)
	})
	t.Run("trusted certificate", func(t *testing.T) {
		cfg := fencing.Config{Brokers: secure.ListenAddrs(), Topic: "tls.roles", DialTimeout: 10 * time.Second, TLS: fencing.TLSConfig{CAFile: caFile}}
		require.NoError(t, fencing.CheckTLS(ctx, cfg))
		tr, err := fencing.NewBrokerTransport(cfg)
		require.NoError(t, err)
		require.NoError(t, devcluster.CreateTopic(ctx, cfg, 1, 1))
		_, err = tr.Register(ctx, "ctl", "m-1")
		assert.NoError(t, err)
		assert.NoError(t, tr.Close())
	})
	t.Run("no TLS", func(t *testing.T) {
		assert.NoError(t, fencing.CheckTLS(ctx, fencing.Config{Brokers: []string{"127.0.0.1:1"}}))
	})
}

// countingRelay relays TCP connections from a listener of its own on
// 127.0.0.1 to target, and counts them.
func countingRelay(t *testing.T, target string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String(), &n
}
