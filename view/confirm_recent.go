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
// view's own consumer instead of sending one: when the consumer's latest
// fetch answer for the role's partition was to a request sent at most
// maxAge before the call (and after every probe of the partition an
// earlier confirmation made), that answer already carries what Confirm's
// own Fetch would: the partition's last stable offset and high watermark,
// and every committed record below the last stable offset, handed to the
// view. It is used when it shows no transaction open (high watermark ==
// last stable offset) and the consumer had read up to the last stable
// offset with it; then ConfirmRecent waits, as Confirm does, until the
// view has applied the last record below that offset, and returns the
// role's state without a round trip. Otherwise, and when maxAge is 0 or
// less, it is Confirm.
//
// What it promises, exactly: the state it returns holds every record of
// the partition that was committed before some moment T at most maxAge
// before the call (T: the moment the consumer sent the request whose
// answer it used; the broker answered it at T or later, and its last
// stable offset only grows), where Confirm's holds every record committed
// before the call. An answer the network held (a partition of the view
// from the cluster, both ways) arrives late, but its request was sent
// before the hold, so once the hold is longer than maxAge it is too old
// to be used, and ConfirmRecent makes the round trip, which waits for the
// network as Confirm's does. The freshness is measured on this process's
// monotonic clock, between two of its own readings: no other clock
// enters. Package processor says how it bounds maxAge and why that keeps
// its guarantees (no takeover from a stale view).
//
// Each answer used is counted in [Stats].ConfirmsFromAnswers.
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
