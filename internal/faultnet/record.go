package faultnet

import (
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Request is one request frame a client sent, as faultnet read it off the
// client's connection (before any rule held or dropped it).
type Request struct {
	At       time.Time // when faultnet had read the whole frame
	Node     int32     // the broker node it was sent to (the node given to [Net.Wrap])
	Conn     uint64    // the connection it came on, numbered from 1 in accept order
	Corr     int32     // its correlation id (its answer carries the same)
	APIKey   int16
	Version  int16
	ClientID string
	Frame    []byte // the whole frame, size prefix included
}

// Name is the request's Kafka name ("Produce", "EndTxn", ...).
func (r Request) Name() string {
	if k := kmsg.NameForKey(r.APIKey); k != "" {
		return k
	}
	return fmt.Sprintf("key %d", r.APIKey)
}

// Decode parses the request's body with franz-go's kmsg (the header,
// and its tagged fields when the version is flexible, skipped).
func (r Request) Decode() (kmsg.Request, error) {
	req := kmsg.RequestForKey(r.APIKey)
	if req == nil {
		return nil, fmt.Errorf("faultnet: unknown api key %d", r.APIKey)
	}
	req.SetVersion(r.Version)
	b := r.Frame[4:]
	if len(b) < 10 {
		return nil, fmt.Errorf("faultnet: frame of %d bytes", len(b))
	}
	l := int(int16(uint16(b[8])<<8 | uint16(b[9])))
	off := 10 + max(l, 0)
	if off > len(b) {
		return nil, fmt.Errorf("faultnet: client id runs past the frame")
	}
	if req.IsFlexible() {
		// The header's tagged fields: a count (uvarint), then each
		// tag's key and size (uvarints) and its bytes.
		rd := kbin{b: b[off:]}
		for n := rd.uvarint(); n > 0 && rd.err == nil; n-- {
			rd.uvarint()
			rd.skip(int(rd.uvarint()))
		}
		if rd.err != nil {
			return nil, rd.err
		}
		off = len(b) - len(rd.b)
	}
	if err := req.ReadFrom(b[off:]); err != nil {
		return nil, fmt.Errorf("faultnet: decoding %s v%d: %w", r.Name(), r.Version, err)
	}
	return req, nil
}

// kbin reads the uvarints of a header's tagged fields.
type kbin struct {
	b   []byte
	err error
}

func (k *kbin) uvarint() uint64 {
	var x uint64
	for i := 0; i < 10; i++ {
		if len(k.b) == 0 {
			k.err = fmt.Errorf("faultnet: header tags run past the frame")
			return 0
		}
		c := k.b[0]
		k.b = k.b[1:]
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return x
		}
	}
	k.err = fmt.Errorf("faultnet: header tag varint too long")
	return 0
}

func (k *kbin) skip(n int) {
	if n > len(k.b) {
		k.err = fmt.Errorf("faultnet: header tag runs past the frame")
		return
	}
	k.b = k.b[n:]
}

// Recorder keeps every request of the clients whose client id has its
// prefix, in the order faultnet read them ([Net.Record]). Per connection
// that is the order the client sent them; across connections, the order
// faultnet's readers got to them.
type Recorder struct {
	n       *Net
	prefix  string
	reqs    []Request
	answers map[answerKey]time.Time // kept across Take, for Answered
}

type answerKey struct {
	conn uint64
	corr int32
}

// Record starts recording the requests of the clients whose client id
// starts with prefix ("" records every client's), until [Recorder.Stop].
func (n *Net) Record(prefix string) *Recorder {
	r := &Recorder{n: n, prefix: prefix, answers: map[answerKey]time.Time{}}
	n.mu.Lock()
	n.recs = append(n.recs, r)
	n.mu.Unlock()
	return r
}

// Take returns the requests recorded since the last Take (or since the
// recording began) and forgets them.
func (r *Recorder) Take() []Request {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// Answered returns when faultnet began handing the broker's answer to req
// (a request this recorder recorded) back to the client, just before it
// wrote it to the client's connection: a request read before that time
// was sent before the client had the answer. ok is false while no answer
// has gone back.
func (r *Recorder) Answered(req Request) (at time.Time, ok bool) {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	at, ok = r.answers[answerKey{req.Conn, req.Corr}]
	return at, ok
}

// Stop ends the recording; Take still returns what was recorded.
func (r *Recorder) Stop() {
	r.n.mu.Lock()
	r.n.recs = remove(r.n.recs, r)
	r.n.mu.Unlock()
}

// record appends the frame b, just read from a client of c, to every
// recorder it matches; n.mu is held.
func (n *Net) record(c *conn, h header, b []byte) {
	if len(n.recs) == 0 {
		return
	}
	now := time.Now()
	for _, r := range n.recs {
		if strings.HasPrefix(h.clientID, r.prefix) {
			r.reqs = append(r.reqs, Request{At: now, Node: c.node, Conn: c.id, Corr: h.corrID, APIKey: h.apiKey, Version: h.version, ClientID: h.clientID, Frame: b})
		}
	}
}

// recordAnswer notes that the answer with correlation id corr went back
// to c's client, for the recorders of that client; n.mu is held.
func (n *Net) recordAnswer(c *conn, corr int32) {
	if len(n.recs) == 0 || !c.known {
		return
	}
	now := time.Now()
	for _, r := range n.recs {
		if strings.HasPrefix(c.clientID, r.prefix) {
			r.answers[answerKey{c.id, corr}] = now
		}
	}
}
