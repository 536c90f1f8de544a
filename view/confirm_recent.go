package view

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// ConfirmRecent is [View.Confirm] that may take its round trip from the
// view's own consumer: when the consumer's latest fetch answer for the
// role's partition was to a request sent at most maxAge before the call
// (and after every probe of an earlier confirmation), shows no open
// transaction (high watermark == last stable offset) and was read to its
// last stable offset, ConfirmRecent waits, as Confirm does, until the view
// has applied the last record below that offset, and returns the role's
// state. Otherwise, and when maxAge <= 0, it is Confirm.
//
// So the state holds every record committed before some moment at most
// maxAge before the call (when that request was sent: the broker answered
// it later, and a last stable offset only grows), where Confirm's holds
// every record committed before the call. An answer the network held is
// judged by when its request was sent, so after a hold longer than maxAge
// ConfirmRecent makes the round trip. Ages are differences of this
// process's monotonic clock. Package processor bounds maxAge
// (docs/DESIGN.md, "Confirmations from the source's own reads"). Each
// answer used is counted in [Stats].ConfirmsFromAnswers.
func (v *View) ConfirmRecent(ctx context.Context, role codec.Role, maxAge time.Duration) (rolestate.Confirmed, error) {
	return v.confirm(ctx, role, maxAge)
}

// recentConfirms is what ConfirmRecent keeps between calls.
type recentConfirms struct {
	used     atomic.Uint64 // confirmations taken from the consumer's answers
	mu       sync.Mutex
	probedAt map[int32]time.Time // per partition: when a confirmation's probes last returned
}

// probed records that a confirmation's probes of partition p returned at
// at: an answer of the consumer sent before that may be older than what
// that confirmation saw (an open transaction it reported, say), and is
// not used after it.
func (r *recentConfirms) probed(p int32, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probedAt == nil {
		r.probedAt = map[int32]time.Time{}
	}
	if at.After(r.probedAt[p]) {
		r.probedAt[p] = at
	}
}

func (r *recentConfirms) lastProbe(p int32) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.probedAt[p]
}

// recentEnds returns the ends of partition p as the consumer's latest
// fetch answer showed them, when that answer can stand for a
// confirmation's Fetch from mark.read at the time of the call (see
// ConfirmRecent); ok false otherwise.
func (v *View) recentEnds(p int32, mark readMark, maxAge time.Duration, now time.Time) (ends, bool) {
	cp := v.glue.consumer.Load()
	if cp == nil {
		return ends{}, false
	}
	fc, isOurs := (*cp).(*fetchConsumer)
	if !isOurs {
		return ends{}, false
	}
	a := fc.recentAnswer(v.topic, p)
	switch {
	case a == nil,
		now.Sub(a.sent) > maxAge, // too old, or held by the network
		!a.sent.After(v.recent.lastProbe(p)),
		a.lso < 0 || a.hwm != a.lso, // a transaction may be open: Confirm's second fetch says whose
		a.next < a.lso,              // the answer stopped short of the last stable offset
		a.lso < mark.read:           // below what the view read: Confirm's probe says why
		return ends{}, false
	}
	return ends{lso: a.lso, hwm: a.hwm, tail: tail{last: a.last, scanned: a.next, end: true}}, true
}

// answer is what one fetch answer of a partition consumer showed.
type answer struct {
	sent     time.Time // when its request was sent (read before the send)
	lso, hwm int64     // the answer's last stable offset and high watermark
	next     int64     // the consumer's next offset after taking the answer
	last     int64     // the highest offset of a record the consumer has handed over, this answer's or before; -1 none
}

// noteAnswer records the answer blk to the request sent at pc.sentAt,
// once its records were taken (chunk).
func (pc *fetchPartition) noteAnswer(blk *sarama.FetchResponseBlock, chunk []fetched) {
	if n := len(chunk); n > 0 {
		pc.handedTo = chunk[n-1].off + 1
	}
	pc.recent.Store(&answer{sent: pc.sentAt, lso: blk.LastStableOffset, hwm: blk.HighWaterMarkOffset,
		next: pc.next, last: pc.handedTo - 1})
}

// recentAnswer returns the latest answer of the consumer of topic/p, or
// nil.
func (c *fetchConsumer) recentAnswer(topic string, p int32) *answer {
	c.mu.Lock()
	pc := c.partitions[topic][p]
	c.mu.Unlock()
	if pc == nil {
		return nil
	}
	return pc.recent.Load()
}
