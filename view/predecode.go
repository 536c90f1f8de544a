package view

import (
	"sync"

	"github.com/krabka/krole/codec"
)

// predecoder moves decoding off goka's partition goroutine onto the
// consumer's, which decodes each fetch answer (push) while the next is
// fetched, then hands goka one chunk message in place of its records
// (consumer.go, ChunkHeader); the update callback takes the decoded records
// (takeChunk) and applies them. So a restore decodes and applies side by
// side, and goka's work per message is done once per chunk.
//
// A partition's queue holds decoded chunks in offset order, each queue
// under its own lock. A chunk before the one goka hands was dropped by goka
// (it drains a consumer it closes) and is discarded; reset empties the
// queue when goka starts a partition consumer.
type predecoder struct {
	v     *View
	parts map[int32]*decodeQueue // fixed before goka starts
	// spare holds the zeroed slices of applied chunks for push to reuse:
	// a fresh one per chunk costs more (its pages are new) than decoding.
	spare sync.Pool // of *[]decoded
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
	out := d.slice(len(chunk)) // handed to the update callback as it is: the records point into it
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

// slice returns a zeroed slice of n records.
func (d *predecoder) slice(n int) []decoded {
	if s, ok := d.spare.Get().(*[]decoded); ok && cap(*s) >= n {
		return (*s)[:n]
	}
	return make([]decoded, n)
}

// release hands back the records of a chunk applied, which nothing refers
// to any more.
func (d *predecoder) release(recs []decoded) {
	clear(recs)
	recs = recs[:0]
	d.spare.Put(&recs)
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
