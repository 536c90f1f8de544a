package faultnet

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// RewriteFunc gets the request a client sent and the broker's answer to
// it, both decoded by kmsg, and returns the answer the client gets
// instead, or nil to let the broker's through unchanged (resp may be
// modified in place and returned).
type RewriteFunc func(req kmsg.Request, resp kmsg.Response) kmsg.Response

// Rewritten is a rewrite rule ([Net.Rewrite]) and what it did.
type Rewritten struct {
	n       *Net
	rule    Rule
	fn      RewriteFunc
	taken   int // answers fn replaced
	removed bool
}

// pendingRewrite is a request a rewrite rule matched, waiting for its
// answer on the connection.
type pendingRewrite struct {
	rw  *Rewritten
	req kmsg.Request
}

// Rewrite hands fn the broker's answers to the requests rule matches from
// now on, and sends the client what fn returns instead: a broker that
// answers other than it should, as a non-conforming "Kafka-compatible"
// cluster or a proxy in front of one may. The broker's state is what its
// own answer says; only the client is told otherwise. rule.Count bounds
// how many answers fn replaces (fn returning nil does not count); 0 or
// less: no bound. Requests that fail to decode, and their answers, pass
// unchanged. The client must not use TLS (faultnet reads plain frames).
func (n *Net) Rewrite(rule Rule, fn RewriteFunc) *Rewritten {
	r := &Rewritten{n: n, rule: rule, fn: fn}
	n.locked(func() { n.rewrites = append(n.rewrites, r) })
	return r
}

// Count returns how many answers the rule has replaced.
func (r *Rewritten) Count() int { return r.n.read(&r.taken) }

// Remove lifts the rule: answers not yet rewritten pass unchanged.
func (r *Rewritten) Remove() {
	r.n.mu.Lock()
	r.removed = true
	r.n.rewrites = remove(r.n.rewrites, r)
	r.n.mu.Unlock()
}

func (r *Rewritten) done() bool {
	return r.removed || (r.rule.Count > 0 && r.taken >= r.rule.Count)
}

// watchRewrite notes the request b (header h) for the first rewrite rule
// that matches it, to rewrite its answer; n.mu is held.
func (c *conn) watchRewrite(h header, b []byte) {
	for _, rw := range c.n.rewrites {
		if rw.done() || !rw.rule.match(c.node, h) {
			continue
		}
		req, err := Request{APIKey: h.apiKey, Version: h.version, Frame: b}.Decode()
		if err != nil {
			return
		}
		if c.rewrites == nil {
			c.rewrites = map[int32]pendingRewrite{}
		}
		c.rewrites[h.corrID] = pendingRewrite{rw: rw, req: req}
		return
	}
}

// rewrite returns the frame the client gets for the broker's answer p: p
// itself, or the answer a rewrite rule's function made of it.
func (c *conn) rewrite(p []byte) []byte {
	if len(p) < 8 {
		return p
	}
	corr := int32(binary.BigEndian.Uint32(p[4:8]))
	n := c.n
	n.mu.Lock()
	pr, ok := c.rewrites[corr]
	if ok {
		delete(c.rewrites, corr)
	}
	live := ok && !pr.rw.done()
	n.mu.Unlock()
	if !live || int(binary.BigEndian.Uint32(p[:4])) != len(p)-4 {
		return p // not watched, or not one whole frame (kfake writes one per answer)
	}
	resp := pr.req.ResponseKind()
	off := 8
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		off++ // the response header's tagged fields: kfake writes none
	}
	if err := resp.ReadFrom(p[off:]); err != nil {
		return p
	}
	out := pr.rw.fn(pr.req, resp)
	if out == nil {
		return p
	}
	n.mu.Lock()
	pr.rw.taken++
	n.mu.Unlock()
	b := append([]byte(nil), p[:off]...)
	b = out.AppendTo(b)
	binary.BigEndian.PutUint32(b[:4], uint32(len(b)-4))
	return b
}

// String names the rule, for test failures.
func (r *Rewritten) String() string {
	return fmt.Sprintf("rewrite of %s answers (%d so far)", kmsg.NameForKey(r.rule.APIKey), r.Count())
}
