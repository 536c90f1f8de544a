package view

import (
	"sync"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
)

// predecoder moves decoding off goka's partition goroutine, which applies
// records one at a time, onto the view's consumer's fetch goroutine: the
// consumer decodes each fetched chunk (push) before goka is handed any of
// it, and the update callback takes the decoded record of the offset it
// is handed (take), decoding it itself when there is none. Decoding is
// most of the view's work per record, so a restore runs decoding and
// applying side by side.
//
// The queue of a partition holds the decoded records in offset order. An
// entry below the offset goka hands is one goka dropped (it drains a
// consumer it closes) and is discarded; reset empties the queue when goka
// starts a partition consumer. Each queue has its own lock: the fetch
// goroutine pushes, goka's partition goroutine takes.
type predecoder struct {
	v     *View
	parts map[int32]*decodeQueue // fixed before goka starts
}

type decodeQueue struct {
	mu   sync.Mutex
	q    []decoded
	head int
}

// decoded is one record as View.decode leaves it.
type decoded struct {
	off    int64
	k      codec.Key
	rec    codec.Record
	reason SkipReason
	err    error
}

func newPredecoder(v *View, parts []int32) *predecoder {
	d := &predecoder{v: v, parts: make(map[int32]*decodeQueue, len(parts))}
	for _, p := range parts {
		d.parts[p] = &decodeQueue{}
	}
	return d
}

// push decodes a chunk of partition p's records, in offset order.
func (d *predecoder) push(p int32, chunk []*sarama.ConsumerMessage) {
	dq := d.parts[p]
	if dq == nil {
		return
	}
	out := make([]decoded, len(chunk))
	for i, m := range chunk {
		k, rec, reason, err := d.v.decode(p, m.Key, m.Value)
		out[i] = decoded{off: m.Offset, k: k, rec: rec, reason: reason, err: err}
	}
	dq.mu.Lock()
	defer dq.mu.Unlock()
	if dq.head == len(dq.q) {
		dq.q, dq.head = dq.q[:0], 0
	}
	dq.q = append(dq.q, out...)
}

// take returns the decoded record at offset off of partition p, if the
// consumer decoded it.
func (d *predecoder) take(p int32, off int64) (decoded, bool) {
	dq := d.parts[p]
	if dq == nil {
		return decoded{}, false
	}
	dq.mu.Lock()
	defer dq.mu.Unlock()
	for dq.head < len(dq.q) && dq.q[dq.head].off < off {
		dq.q[dq.head] = decoded{}
		dq.head++
	}
	if dq.head == len(dq.q) || dq.q[dq.head].off != off {
		return decoded{}, false
	}
	e := dq.q[dq.head]
	dq.q[dq.head] = decoded{}
	dq.head++
	return e, true
}

// reset empties partition p's queue.
func (d *predecoder) reset(p int32) {
	if dq := d.parts[p]; dq != nil {
		dq.mu.Lock()
		dq.q, dq.head = nil, 0
		dq.mu.Unlock()
	}
}

// prepare is the consumer's hook: it decodes a fetched chunk of the role
// topic.
func (v *View) prepare(topic string, p int32, chunk []*sarama.ConsumerMessage) {
	if topic == v.topic && v.predecode != nil {
		v.predecode.push(p, chunk)
	}
}

// predecoded returns the record at offset off of partition p as the
// consumer decoded it, if it did.
func (v *View) predecoded(p int32, off int64) (decoded, bool) {
	if v.predecode == nil {
		return decoded{}, false
	}
	return v.predecode.take(p, off)
}
