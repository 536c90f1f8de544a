package ctxcall

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// ErrAbandoned is the error of a write on a connection that [Conns.Close]
// closed: nothing of that write left the client. It matches net.ErrClosed,
// so sarama drops such a connection and dials again.
var ErrAbandoned = fmt.Errorf("ctxcall: connection closed after a request on it was abandoned: %w", net.ErrClosed)

// Conns is a dialer (sarama's Config.Net.Proxy.Dialer fits) that keeps
// the connections it opens by address, so that a caller that gives up on
// a request can close the connection the request went out on. sarama
// sends one request at a time on a connection and holds it for the whole
// round trip, so closing every connection to the broker's address cuts
// short the abandoned request and, at most, requests on other connections
// to the same broker that were waiting for their answer (sarama keeps a
// second connection to a bootstrap broker, for metadata). Requests queued
// behind the abandoned one were not sent: their write fails with
// [ErrAbandoned].
//
// The close resets the connection (SO_LINGER 0): bytes still in the
// client's send buffer are discarded, not sent. It cannot recall bytes
// that already left the machine: a broker that has read the request, or a
// network that holds it, may still deliver it.
//
// Safe for concurrent use.
type Conns struct {
	d      *net.Dialer
	mu     sync.Mutex
	byAddr map[string]map[*trackedConn]bool
}

// NewConns returns a Conns that dials with d.
func NewConns(d *net.Dialer) *Conns {
	return &Conns{d: d, byAddr: map[string]map[*trackedConn]bool{}}
}

// Dial dials addr and keeps the connection until it is closed.
func (c *Conns) Dial(network, addr string) (net.Conn, error) {
	conn, err := c.d.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, c: c, addr: addr}
	c.mu.Lock()
	if c.byAddr[addr] == nil {
		c.byAddr[addr] = map[*trackedConn]bool{}
	}
	c.byAddr[addr][tc] = true
	c.mu.Unlock()
	return tc, nil
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
		if tcp, ok := tc.Conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = tc.Conn.Close()
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
	if err != nil {
		tc.c.mu.Lock()
		abandoned := tc.abandoned
		tc.c.mu.Unlock()
		if abandoned && n == 0 {
			return 0, ErrAbandoned
		}
	}
	return n, err
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
