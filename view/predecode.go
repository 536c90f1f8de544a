package view

import (
	"sync"

	"github.com/krabka/krole/codec"
)

// predecoder moves decoding off goka's partition goroutine, which applies
// records one at a time, onto the goroutine of the view's consumer that
// hands goka its messages (the fetch goroutine meanwhile fetches the next
// answer): the consumer decodes the records of each fetch answer (push)
// before goka is handed any of them, and then hands goka one chunk
// message in their place (see consumer.go, ChunkHeader), for which the
// update callback takes the decoded records (takeChunk) and applies them. Decoding is much of the
// view's work per record, so a restore runs decoding and applying side by
// side; and goka's own work per message (a select over its channels, an
// update context, its stats, the offset) is done once per chunk, not once
// per record.
//
// The queue of a partition holds the decoded chunks in offset order. A
// chunk before the one goka hands is one goka dropped (it drains a
// consumer it closes) and is discarded; reset empties the queue when goka
// starts a partition consumer. Each queue has its own lock: the fetch
// goroutine pushes, goka's partition goroutine takes.
type predecoder struct {
	v     *View
	parts map[int32]*decodeQueue // fixed before goka starts
}

type decodeQueue struct {
	mu     sync.Mutex
	chunks [][]decoded // in offset order; the first is taken from
}

// decoded is one record as View.decode leaves it, and the record as
// fetched (its bytes, for the state dir and the log, and its batch header).
type decoded struct {
	off    int64
	k      codec.Key
	rec    codec.Record // points into buf
	reason SkipReason
	err    error
	src    *fetched
	buf    codec.RecordBuf

	hold           bool // a lease waiting for its producer id's verdict (see author.go)
	changed, first bool // set by index.applyChunk
}

func newPredecoder(v *View, parts []int32) *predecoder {
	d := &predecoder{v: v, parts: make(map[int32]*decodeQueue, len(parts))}
	for _, p := range parts {
		d.parts[p] = &decodeQueue{}
	}
	return d
}

// push decodes a chunk of partition p's records, in offset order, and
// reports whether it did.
func (d *predecoder) push(p int32, chunk []fetched) bool {
	dq := d.parts[p]
	if dq == nil || len(chunk) == 0 {
		return false
	}
	out := make([]decoded, len(chunk)) // handed to the update callback as it is: the records point into it
	for i := range chunk {
		f, e := &chunk[i], &out[i]
		e.off, e.src = f.off, f
		e.k, e.rec, e.reason, e.err = d.v.decode(p, f.key(), f.value(), &e.buf)
	}
	dq.mu.Lock()
	defer dq.mu.Unlock()
	dq.chunks = append(dq.chunks, out)
	return true
}

// takeChunk returns the decoded records of the chunk from offset first to
// offset last of partition p, discarding the chunks before it (goka
// dropped them: it drains a consumer it closes).
func (d *predecoder) takeChunk(p int32, first, last int64) ([]decoded, bool) {
	dq := d.parts[p]
	if dq == nil {
		return nil, false
	}
	dq.mu.Lock()
	defer dq.mu.Unlock()
	for len(dq.chunks) > 0 {
		c := dq.chunks[0]
		dq.chunks[0] = nil
		dq.chunks = dq.chunks[1:]
		if len(c) > 0 && c[0].off == first && c[len(c)-1].off == last {
			return c, true
		}
		if len(c) > 0 && c[len(c)-1].off >= first {
			// A chunk that is not the one asked for but reaches into it:
			// cannot happen (chunks are handed over in order, whole).
			return nil, false
		}
	}
	return nil, false
}

// reset empties partition p's queue.
func (d *predecoder) reset(p int32) {
	if dq := d.parts[p]; dq != nil {
		dq.mu.Lock()
		dq.chunks = nil
		dq.mu.Unlock()
	}
}

// prepare is the consumer's hook: it decodes a fetched chunk of the role
// topic, and reports whether it did, in which case goka is handed the
// chunk as one message (see consumer.go, ChunkHeader) and the update
// callback applies its records (View.updateChunk).
func (v *View) prepare(topic string, p int32, chunk []fetched) bool {
	if topic == v.topic && v.predecode != nil {
		return v.predecode.push(p, chunk)
	}
	return false
}
