package ctxcall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// ErrAbandoned is the error of a write on a connection that [Conns.Close]
// closed: nothing of that write left the client. It matches net.ErrClosed,
// so sarama drops such a connection and dials again.
var ErrAbandoned = fmt.Errorf("ctxcall: connection closed after a request on it was abandoned: %w", net.ErrClosed)

// Conns is a dialer (sarama's Config.Net.Proxy.Dialer fits) that keeps
// the connections it opens by address, so that a caller that gives up on
// a request can close the connection the request went out on. sarama
// sends one request at a time on a connection and holds it for the whole
// round trip (fencing's pipelined produce is the exception: written without
// holding it, one at a time per address, it and the request sent behind it
// are cut short too), so closing every connection to the broker's address
// cuts short the abandoned request and, at most, requests on other connections
// to the same broker that were waiting for their answer (sarama keeps a
// second connection to a bootstrap broker, for metadata). Requests queued
// behind the abandoned one were not sent: their write, and the write
// deadline sarama sets before it, fail with [ErrAbandoned].
//
// The close resets the connection (SO_LINGER 0): bytes still in the
// client's send buffer are discarded, not sent. It cannot recall bytes
// that already left the machine: a broker that has read the request, or a
// network that holds it, may still deliver it.
//
// [Conns.Shut] is the end of all of it, for a client that stops whatever
// the cluster does: every connection is reset, a dial under way is
// cancelled, and every later dial fails with [ErrShut], so that a sarama
// call still running (a metadata refresh retrying from broker to broker,
// a consumer's fetch, a client's close) ends at once instead of waiting
// out its timeouts on a cluster that does not answer.
//
// Safe for concurrent use.
type Conns struct {
	d        Dialer
	shutCtx  context.Context // ends at Shut: cancels dials under way
	shutDial context.CancelFunc
	mu       sync.Mutex
	byAddr   map[string]map[*trackedConn]bool
	shut     bool
}

// Dialer dials a connection; *net.Dialer is one, and so is sarama's
// Config.Net.Proxy.Dialer. A Dialer that also has DialContext (as
// *net.Dialer has) has its dials under way cancelled by [Conns.Shut].
type Dialer interface {
	Dial(network, addr string) (net.Conn, error)
}

type contextDialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// ErrShut is the error of a dial on a [Conns] that was shut, and of a
// write on one of its connections after it was: nothing was sent. It
// matches [ErrAbandoned] and net.ErrClosed.
var ErrShut = fmt.Errorf("ctxcall: the client is shutting down: %w", ErrAbandoned)

// NewConns returns a Conns that dials with d.
func NewConns(d Dialer) *Conns {
	ctx, cancel := context.WithCancel(context.Background())
	return &Conns{d: d, shutCtx: ctx, shutDial: cancel, byAddr: map[string]map[*trackedConn]bool{}}
}

// Dial dials addr and keeps the connection until it is closed. After
// [Conns.Shut] it fails with [ErrShut].
func (c *Conns) Dial(network, addr string) (net.Conn, error) {
	if c.isShut() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: ErrShut}
	}
	var conn net.Conn
	var err error
	if cd, ok := c.d.(contextDialer); ok {
		conn, err = cd.DialContext(c.shutCtx, network, addr)
	} else {
		conn, err = c.d.Dial(network, addr)
	}
	if err != nil {
		if c.isShut() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: ErrShut}
		}
		return nil, err
	}
	tc := &trackedConn{Conn: conn, c: c, addr: addr}
	c.mu.Lock()
	if c.shut {
		c.mu.Unlock()
		reset(conn)
		return nil, &net.OpError{Op: "dial", Net: network, Err: ErrShut}
	}
	if c.byAddr[addr] == nil {
		c.byAddr[addr] = map[*trackedConn]bool{}
	}
	c.byAddr[addr][tc] = true
	c.mu.Unlock()
	return tc, nil
}

func (c *Conns) isShut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shut
}

// Shut resets every open connection, cancels the dials under way, and
// makes every later dial fail with [ErrShut]. It returns how many
// connections it closed. It does not block on the network.
func (c *Conns) Shut() int {
	c.mu.Lock()
	c.shut = true
	var all []*trackedConn
	for addr, conns := range c.byAddr {
		for tc := range conns {
			tc.abandoned = true
			all = append(all, tc)
		}
		delete(c.byAddr, addr)
	}
	c.mu.Unlock()
	c.shutDial()
	for _, tc := range all {
		reset(tc.Conn)
	}
	return len(all)
}

// reset closes conn without sending what is left in its send buffer. A
// TLS connection's TCP connection is reset first, so that its close
// sends nothing either.
func reset(conn net.Conn) {
	raw := conn
	if w, ok := conn.(interface{ NetConn() net.Conn }); ok {
		raw = w.NetConn()
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	if raw != conn {
		_ = raw.Close()
	}
	_ = conn.Close()
}

// Close resets every open connection to addr and returns how many it
// closed. Later writes on them fail with [ErrAbandoned]; reads fail at
// once.
func (c *Conns) Close(addr string) int {
	c.mu.Lock()
	conns := c.byAddr[addr]
	delete(c.byAddr, addr)
	for tc := range conns {
		tc.abandoned = true
	}
	c.mu.Unlock()
	for tc := range conns {
		reset(tc.Conn)
	}
	return len(conns)
}

// Open returns the number of connections to addr that are open.
func (c *Conns) Open(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byAddr[addr])
}

type trackedConn struct {
	net.Conn
	c         *Conns
	addr      string
	abandoned bool // guarded by c.mu
}

func (tc *trackedConn) Write(p []byte) (int, error) {
	n, err := tc.Conn.Write(p)
	if err != nil && n == 0 {
		err = tc.notSent(err)
	}
	return n, err
}

// SetWriteDeadline is the connection's, except that on a connection
// [Conns.Close] or [Conns.Shut] reset it fails with [ErrAbandoned]
// ([ErrShut]), as a write does. sarama sets the write deadline right
// before it writes a request (Broker.write), so a request queued behind
// the abandoned one fails there, before any byte of it is written: as a
// plain "set tcp ...: use of closed network connection" it read as a
// request without an answer, and retired the token of a transaction that
// had sent nothing (a member session's heartbeat, whose end could then not
// be written).
func (tc *trackedConn) SetWriteDeadline(t time.Time) error {
	if err := tc.Conn.SetWriteDeadline(t); err != nil {
		return tc.notSent(err)
	}
	return nil
}

// notSent returns ErrShut or ErrAbandoned for err, an error of a write
// (or of setting its deadline) that sent nothing, when the connection was
// reset by Shut or Close; err otherwise.
func (tc *trackedConn) notSent(err error) error {
	tc.c.mu.Lock()
	abandoned, shut := tc.abandoned, tc.c.shut
	tc.c.mu.Unlock()
	switch {
	case abandoned && shut:
		return ErrShut
	case abandoned:
		return ErrAbandoned
	}
	return err
}

func (tc *trackedConn) Close() error {
	tc.c.mu.Lock()
	if m := tc.c.byAddr[tc.addr]; m != nil {
		delete(m, tc)
		if len(m) == 0 {
			delete(tc.c.byAddr, tc.addr)
		}
	}
	tc.c.mu.Unlock()
	err := tc.Conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil // closed by Conns.Close already
	}
	return err
}
