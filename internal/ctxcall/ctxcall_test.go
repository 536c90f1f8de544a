package ctxcall

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDoReturnsTheResult(t *testing.T) {
	v, err := Do(context.Background(), nil, func() (int, error) { return 7, errors.New("e") })
	assert.Equal(t, 7, v)
	assert.EqualError(t, err, "e")
}

func TestDoReturnsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	var inflight sync.WaitGroup
	go cancel()
	_, err := Do(ctx, &inflight, func() (int, error) { <-release; return 1, nil })
	assert.ErrorIs(t, err, context.Canceled, "the blocked call is abandoned")
	close(release)
	inflight.Wait() // the abandoned call is still counted until it ends
}

func TestDoDoesNotStartAfterTheContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err := Do(ctx, nil, func() (int, error) { called = true; return 0, nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, called)
}

func TestDoOrCallsAbandonBeforeReturning(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	defer close(release)
	abandoned := 0
	go cancel()
	_, err := DoOr(ctx, nil, func() (int, error) { <-release; return 1, nil }, func() { abandoned++ })
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, abandoned)
}

func TestDoOrDoesNotAbandonAFinishedCall(t *testing.T) {
	abandoned := false
	v, err := DoOr(context.Background(), nil, func() (int, error) { return 3, nil }, func() { abandoned = true })
	assert.NoError(t, err)
	assert.Equal(t, 3, v)
	assert.False(t, abandoned)
}

// Close resets every connection Conns dialed to the address: a read
// blocked on one returns, and a later write fails with ErrAbandoned,
// which matches net.ErrClosed. Connections to other addresses stay.
func TestConnsClose(t *testing.T) {
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { _ = c.Close() })
			}
		}()
		return ln
	}
	a, b := listen(), listen()
	cs := NewConns(&net.Dialer{})
	ca, err := cs.Dial("tcp", a.Addr().String())
	require.NoError(t, err)
	cb, err := cs.Dial("tcp", b.Addr().String())
	require.NoError(t, err)
	defer cb.Close()
	readErr := make(chan error, 1)
	go func() { _, err := ca.Read(make([]byte, 1)); readErr <- err }()

	assert.Equal(t, 1, cs.Close(a.Addr().String()))
	assert.Error(t, <-readErr, "the blocked read returns")
	// sarama sets the write deadline before each request it writes: that
	// fails as the write does, so a request queued behind the abandoned
	// one reads as not sent.
	err = ca.SetWriteDeadline(time.Now().Add(time.Second))
	assert.ErrorIs(t, err, ErrAbandoned)
	_, err = ca.Write([]byte("x"))
	assert.ErrorIs(t, err, ErrAbandoned)
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.NoError(t, cb.SetWriteDeadline(time.Now().Add(time.Second)), "another address's connection stays")
	assert.Equal(t, 0, cs.Open(a.Addr().String()))
	assert.Equal(t, 1, cs.Open(b.Addr().String()))
	_, err = cb.Write([]byte("x"))
	assert.NoError(t, err, "another address's connection stays")
	assert.NoError(t, ca.Close())
}

// Shut resets every connection, whatever its address, and later dials
// fail with ErrShut (which matches ErrAbandoned and net.ErrClosed)
// without reaching the network.
func TestConnsShut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	cs := NewConns(&net.Dialer{})
	ca, err := cs.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	srv := <-accepted
	defer srv.Close()
	readErr := make(chan error, 1)
	go func() { _, err := ca.Read(make([]byte, 1)); readErr <- err }()

	assert.Equal(t, 1, cs.Shut())
	assert.Error(t, <-readErr, "the blocked read returns")
	assert.ErrorIs(t, ca.SetWriteDeadline(time.Now().Add(time.Second)), ErrShut)
	_, err = ca.Write([]byte("x"))
	assert.ErrorIs(t, err, ErrShut)
	_, err = cs.Dial("tcp", ln.Addr().String())
	assert.ErrorIs(t, err, ErrShut)
	assert.ErrorIs(t, err, ErrAbandoned)
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.Len(t, accepted, 0, "the dial after Shut reached nobody")
	assert.Equal(t, 0, cs.Open(ln.Addr().String()))
	assert.Equal(t, 0, cs.Shut())
}
