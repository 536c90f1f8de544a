// Package faultnet injects network faults between Kafka clients and an
// embedded kfake cluster, for tests. It wraps each broker's listener
// ([Net.Wrap]; devcluster.Options.WrapListener takes it): every accepted
// TCP connection goes through faultnet, which reads the client's request
// frames (int32 size, then the request header: api key int16, api version
// int16, correlation id int32, client id as a nullable string) and hands
// them to the broker, or not, by the rules a test sets at run time:
//
//   - [Net.Hold]: keep a matching request (api key, broker node, client id
//     prefix; the first Count matches) from the broker until the test
//     calls [Held.Release], then deliver it, even if the client gave up on
//     it long ago, as a stalled broker or a slow network would. The
//     requests that follow on the same connection wait behind it, as bytes
//     in one TCP stream do.
//   - [Net.Drop]: close the connection instead of delivering a matching
//     request; the broker never sees it, and the client sees the
//     connection break.
//   - [Net.Partition]: stop forwarding both ways on every connection,
//     present and future, of the clients whose id has a prefix, until the
//     returned heal function is called; then what was sent meanwhile is
//     delivered both ways. The client runs on (its own timeouts fire).
//   - [Net.Rewrite]: hand the broker's answer to a matching request,
//     decoded, to a function, and send the client what it returns
//     instead: a broker that answers other than it should (a
//     non-conforming "Kafka-compatible" cluster). The broker's state is
//     what its own answer said.
//   - [Net.Record]: keep every request of the clients whose id has a
//     prefix, as it is read (before any rule holds or drops it), with its
//     broker node and frame ([Request.Decode] parses it with kmsg), and
//     when its answer went back to the client ([Recorder.Answered]): what
//     a test counts round trips with, and tells a request sent before the
//     previous one's answer (pipelined) from one sent after it.
//
// A test waits for the rules to act with [Held.Wait] (requests taken),
// [Held.WaitOrphaned] (their clients closed the connection) and
// [Held.WaitDelivered] (handed to the broker after the release), and
// counts open client connections with [Net.Open].
// testcluster.StartFaulty (package internal/testcluster) starts an
// embedded cluster with a Net in front of every broker.
//
// A connection's client id is read from each request's header, so the
// rules apply from the first request of a connection; the broker's answers
// on a connection that has not sent a request yet are not held by a
// partition.
//
// # When the client closes a connection
//
// Requests still held (or queued behind a held one, or by a partition)
// when the client closes its connection are delivered anyway by default
// ([DeliverOnClose]): the bytes left the client, and a network that
// delayed them may still deliver them, so a test sees what a real broker
// could do. With [DropOnClose] ([Net.SetOnClientClose]) they are dropped
// instead, as they would be when the connection's close overtakes them,
// and the broker sees the connection end. The broker's answers to a
// closed client are discarded.
//
// Everything runs on 127.0.0.0/8 (the wrapped listener's own address);
// faultnet dials nothing. [Net.Close] ends every connection and drops
// whatever is held.
package faultnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// Wildcards of [Rule].
const (
	AnyKey  int16 = -1 // Rule.APIKey: every request
	AnyNode int32 = -1 // Rule.Node: every broker
)

// ClosePolicy says what happens to held requests when the client closes
// their connection.
type ClosePolicy int

const (
	// DeliverOnClose delivers them when they are released (or the
	// partition heals), as a network that delayed them may. The default.
	DeliverOnClose ClosePolicy = iota
	// DropOnClose drops them: the broker never sees them.
	DropOnClose
)

// Rule chooses requests.
type Rule struct {
	// APIKey is the request's api key (kmsg.Produce and the like, as
	// int16), or AnyKey. The zero value is Produce.
	APIKey int16
	// Node is the broker node the request goes to (the node given to
	// [Net.Wrap]), or AnyNode. The zero value is node 0, not AnyNode.
	Node int32
	// ClientID is a prefix of the request's client id; "" matches every
	// client.
	ClientID string
	// Count is how many matching requests the rule takes, the first ones
	// after it is set; 0 or less: every matching request.
	Count int
}

func (r Rule) match(node int32, h header) bool {
	return (r.APIKey == AnyKey || r.APIKey == h.apiKey) &&
		(r.Node == AnyNode || r.Node == node) &&
		strings.HasPrefix(h.clientID, r.ClientID)
}

// Net is the set of rules and the connections they apply to. Its methods
// are safe for concurrent use. The zero value is not usable; use [New].
type Net struct {
	mu       sync.Mutex
	cond     *sync.Cond // broadcast on every change a pump may wait for
	holds    []*Held
	drops    []*Dropped
	parts    map[*partition]bool
	conns    map[*conn]bool
	recs     []*Recorder  // see record.go
	rewrites []*Rewritten // see rewrite.go
	onClose  ClosePolicy
	delay    time.Duration // see SetDelay
	closed   bool
	connSeq  uint64 // the last connection's number (conn.id)
}

// New returns a Net with no rules, delivering held requests of closed
// connections ([DeliverOnClose]).
func New() *Net {
	n := &Net{parts: map[*partition]bool{}, conns: map[*conn]bool{}}
	n.cond = sync.NewCond(&n.mu)
	return n
}

// SetOnClientClose sets what happens to requests held when their client
// closes the connection; it applies to clients that close from now on.
func (n *Net) SetOnClientClose(p ClosePolicy) {
	n.mu.Lock()
	n.onClose = p
	n.mu.Unlock()
}

// SetDelay makes every request read from now on reach the broker d
// after faultnet read it (answers are not delayed): a network whose
// round trip is d longer. Requests on one connection keep their order.
func (n *Net) SetDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
}

// Wrap returns a listener that accepts from ln and puts faultnet between
// each accepted connection and the broker, as broker node. Its Addr is
// ln's. Closing it closes ln.
func (n *Net) Wrap(node int32, ln net.Listener) net.Listener {
	return &listener{Listener: ln, n: n, node: node}
}

// Close ends every connection, drops every held request and lifts every
// rule. Listeners stay open (their owner closes them). It returns nil.
func (n *Net) Close() error {
	n.mu.Lock()
	n.closed = true
	conns := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.cond.Broadcast()
	n.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return nil
}

// Open returns how many connections of clients whose id starts with
// prefix are open on the client's side (the client has sent a request on
// them and not closed them).
func (n *Net) Open(prefix string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for c := range n.conns {
		if c.known && !c.clientGone && strings.HasPrefix(c.clientID, prefix) {
			k++
		}
	}
	return k
}

// Held is a hold rule ([Net.Hold]) and the requests it holds.
type Held struct {
	n         *Net
	rule      Rule
	taken     int
	delivered int
	orphaned  int // taken requests whose client closed the connection before their delivery
	released  bool
}

// Hold holds the requests rule matches from now on (at most rule.Count),
// until [Held.Release].
func (n *Net) Hold(rule Rule) *Held {
	h := &Held{n: n, rule: rule}
	n.locked(func() { n.holds = append(n.holds, h) })
	return h
}

// Count returns how many requests the rule has taken so far (held, or
// delivered after the release).
func (h *Held) Count() int { return h.n.read(&h.taken) }

// Wait blocks until the rule has taken k requests, or ctx ends (then it
// returns ctx.Err()).
func (h *Held) Wait(ctx context.Context, k int) error {
	return h.waitFor(ctx, func() bool { return h.taken >= k })
}

// WaitDelivered blocks until k of the requests the rule took have been
// handed to the broker after the release (the broker has read them; its
// answer may still be on the way), or ctx ends (then it returns
// ctx.Err()). Requests dropped under [DropOnClose] are never delivered.
func (h *Held) WaitDelivered(ctx context.Context, k int) error {
	return h.waitFor(ctx, func() bool { return h.delivered >= k })
}

// WaitOrphaned blocks until the clients of k of the requests the rule took
// have closed their connections while the requests were still held (or
// queued behind a held one), or ctx ends (then it returns ctx.Err()).
func (h *Held) WaitOrphaned(ctx context.Context, k int) error {
	return h.waitFor(ctx, func() bool { return h.orphaned >= k })
}

// waitFor blocks until done, read under the net's lock, holds, or ctx
// ends (then it returns ctx.Err()).
func (h *Held) waitFor(ctx context.Context, done func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		h.n.mu.Lock()
		h.n.cond.Broadcast()
		h.n.mu.Unlock()
	})
	defer stop()
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	for !done() {
		if err := ctx.Err(); err != nil {
			return err
		}
		h.n.cond.Wait()
	}
	return nil
}

// Release delivers every request the rule holds (those of connections the
// client closed too, under [DeliverOnClose]) and ends the rule: it holds
// nothing more. It does not wait for the delivery.
func (h *Held) Release() {
	h.n.mu.Lock()
	h.released = true
	h.n.holds = remove(h.n.holds, h)
	h.n.cond.Broadcast()
	h.n.mu.Unlock()
}

// Dropped is a drop rule ([Net.Drop]).
type Dropped struct {
	n     *Net
	rule  Rule
	taken int
}

// Drop closes the connection of each request rule matches from now on (at
// most rule.Count), instead of delivering it, until [Dropped.Remove].
func (n *Net) Drop(rule Rule) *Dropped {
	d := &Dropped{n: n, rule: rule}
	n.locked(func() { n.drops = append(n.drops, d) })
	return d
}

// Count returns how many requests the rule has dropped.
func (d *Dropped) Count() int { return d.n.read(&d.taken) }

// Remove ends the rule.
func (d *Dropped) Remove() { d.n.locked(func() { d.n.drops = remove(d.n.drops, d) }) }

type partition struct{ prefix string }

// Partition cuts off the clients whose client id starts with prefix: no
// byte of their connections moves either way until heal is called; then
// everything sent meanwhile is delivered (subject to [ClosePolicy] for
// connections the client closed). heal may be called more than once.
func (n *Net) Partition(prefix string) (heal func()) {
	p := &partition{prefix: prefix}
	n.mu.Lock()
	n.parts[p] = true
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		delete(n.parts, p)
		n.cond.Broadcast()
		n.mu.Unlock()
	}
}

// cutOff reports whether clientID is partitioned; n.mu is held.
func (n *Net) cutOff(clientID string, known bool) bool {
	if !known {
		return false
	}
	for p := range n.parts {
		if strings.HasPrefix(clientID, p.prefix) {
			return true
		}
	}
	return false
}

// locked runs fn under n's lock.
func (n *Net) locked(fn func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fn()
}

// read returns *count, one of a rule's counts, read under n's lock.
func (n *Net) read(count *int) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return *count
}

func remove[T comparable](s []T, x T) []T {
	for i, y := range s {
		if y == x {
			return append(s[:i:i], s[i+1:]...)
		}
	}
	return s
}

type listener struct {
	net.Listener
	n    *Net
	node int32
}

func (l *listener) Accept() (net.Conn, error) {
	client, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	c := &conn{n: l.n, node: l.node, client: client, pr: pr, pw: pw}
	l.n.mu.Lock()
	if l.n.closed {
		l.n.mu.Unlock()
		_ = client.Close()
		return nil, net.ErrClosed
	}
	l.n.connSeq++
	c.id = l.n.connSeq
	l.n.conns[c] = true
	l.n.mu.Unlock()
	go c.read()
	go c.forward()
	return c, nil
}

// frame is one request on its way to the broker.
type frame struct {
	b    []byte
	hold *Held
	drop bool
	due  time.Time // not before (SetDelay)
}

// conn is the broker's side of one client connection: Read gives the
// requests faultnet lets through, Write goes to the client.
type conn struct {
	n      *Net
	node   int32
	id     uint64 // this connection's number, from 1 in accept order (Request.Conn)
	client net.Conn
	pr     *io.PipeReader
	pw     *io.PipeWriter

	// guarded by n.mu
	queue      []frame
	clientID   string
	known      bool                     // clientID was read from a request
	clientGone bool                     // the client closed (or broke) the connection
	closed     bool                     // the broker closed the connection
	rewrites   map[int32]pendingRewrite // by correlation id: requests whose answer a rewrite rule wants
}

type header struct {
	apiKey   int16
	version  int16
	corrID   int32
	clientID string
}

// read moves the client's request frames to the queue, choosing each
// one's fate by the rules as it arrives.
func (c *conn) read() {
	n := c.n
	for {
		b, h, err := readFrame(c.client)
		n.mu.Lock()
		if err != nil {
			c.clientGone = true
			for _, f := range c.queue {
				if f.hold != nil {
					f.hold.orphaned++
				}
			}
			n.cond.Broadcast()
			n.mu.Unlock()
			return
		}
		c.clientID, c.known = h.clientID, true
		n.record(c, h, b)
		f := frame{b: b}
		if n.delay > 0 {
			f.due = time.Now().Add(n.delay)
		}
		for _, d := range n.drops {
			if d.rule.match(c.node, h) && (d.rule.Count <= 0 || d.taken < d.rule.Count) {
				d.taken++
				f.drop = true
				break
			}
		}
		if !f.drop {
			for _, hd := range n.holds {
				if hd.rule.match(c.node, h) && (hd.rule.Count <= 0 || hd.taken < hd.rule.Count) {
					hd.taken++
					f.hold = hd
					break
				}
			}
		}
		if !f.drop && len(n.rewrites) > 0 {
			c.watchRewrite(h, b)
		}
		c.queue = append(c.queue, f)
		n.cond.Broadcast()
		n.mu.Unlock()
	}
}

// forward hands queued frames to the broker in order, each once nothing
// holds it back.
func (c *conn) forward() {
	n := c.n
	defer c.pw.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		switch {
		case n.closed || c.closed:
			return
		case c.clientGone && (len(c.queue) == 0 || n.onClose == DropOnClose):
			c.queue = nil
			return
		case len(c.queue) == 0, c.queue[0].hold != nil && !c.queue[0].hold.released, n.cutOff(c.clientID, c.known):
			n.cond.Wait()
			continue
		}
		f := c.queue[0]
		c.queue = c.queue[1:]
		if f.drop {
			c.queue = nil
			n.mu.Unlock()
			_ = c.client.Close()
			n.mu.Lock()
			return
		}
		n.mu.Unlock()
		if wait := time.Until(f.due); wait > 0 {
			time.Sleep(wait)
		}
		_, err := c.pw.Write(f.b)
		n.mu.Lock()
		if err != nil {
			return
		}
		if f.hold != nil {
			f.hold.delivered++
			n.cond.Broadcast()
		}
	}
}

// Read implements net.Conn: the requests faultnet delivers.
func (c *conn) Read(p []byte) (int, error) { return c.pr.Read(p) }

// Write implements net.Conn: an answer to the client, held while the
// client is partitioned, discarded once the client closed.
func (c *conn) Write(p []byte) (int, error) {
	out := c.rewrite(p)
	n := c.n
	n.mu.Lock()
	for !n.closed && !c.closed && !c.clientGone && n.cutOff(c.clientID, c.known) {
		n.cond.Wait()
	}
	switch {
	case n.closed || c.closed:
		n.mu.Unlock()
		return 0, net.ErrClosed
	case c.clientGone:
		n.mu.Unlock()
		return len(p), nil
	}
	// The answer's time is taken before it is written: a request read
	// before it was sent before the client could have the answer.
	if len(p) >= 8 {
		n.recordAnswer(c, int32(binary.BigEndian.Uint32(p[4:8])))
	}
	n.mu.Unlock()
	if _, err := c.client.Write(out); err != nil {
		// The client is gone; the broker reads on (held requests may
		// still come).
		n.mu.Lock()
		c.clientGone = true
		n.cond.Broadcast()
		n.mu.Unlock()
	}
	return len(p), nil
}

// Close implements net.Conn: the broker ends the connection.
func (c *conn) Close() error {
	n := c.n
	n.mu.Lock()
	if c.closed {
		n.mu.Unlock()
		return nil
	}
	c.closed = true
	delete(n.conns, c)
	n.cond.Broadcast()
	n.mu.Unlock()
	_ = c.pr.Close()
	return c.client.Close()
}

func (c *conn) LocalAddr() net.Addr  { return c.client.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr { return c.client.RemoteAddr() }

// Deadlines are not supported: kfake sets none. They return nil.
func (c *conn) SetDeadline(time.Time) error      { return nil }
func (c *conn) SetReadDeadline(time.Time) error  { return nil }
func (c *conn) SetWriteDeadline(time.Time) error { return nil }

// maxFrame bounds a request frame faultnet accepts (kfake's own bound is
// larger; tests send small requests).
const maxFrame = 100 << 20

// readFrame reads one request frame (size prefix included) and its header.
func readFrame(r io.Reader) ([]byte, header, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, header{}, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 10 || n > maxFrame {
		return nil, header{}, fmt.Errorf("faultnet: request frame of %d bytes", n)
	}
	b := make([]byte, 4+int(n))
	copy(b, size[:])
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		return nil, header{}, err
	}
	h, err := parseHeader(b[4:])
	return b, h, err
}

// parseHeader reads api key, api version, correlation id and client id.
func parseHeader(b []byte) (header, error) {
	h := header{apiKey: int16(binary.BigEndian.Uint16(b[0:2])), version: int16(binary.BigEndian.Uint16(b[2:4])),
		corrID: int32(binary.BigEndian.Uint32(b[4:8]))}
	l := int16(binary.BigEndian.Uint16(b[8:10]))
	switch {
	case l < 0:
	case 10+int(l) > len(b):
		return h, errors.New("faultnet: client id runs past the frame")
	default:
		h.clientID = string(b[10 : 10+int(l)])
	}
	return h, nil
}
