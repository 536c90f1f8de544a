package view

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// Confirm blocks until the table holds every record of role's partition
// that was committed when the call started, then returns the role's state
// (which may hold later records too). A member calls it before it
// challenges, so that it never challenges from a view that lags, cannot
// reach the cluster, or reads a topic that started over.
//
// How, in one round trip when no transaction is open, and what it reports of
// an open one (Confirmed.OpenProducerID, OpenOffset) and of the session's
// partition: docs/DESIGN.md, "The view: what Confirm reads".
//
// Errors, with no state: when ctx ends first, one matching [ErrNotCaughtUp]
// and ctx.Err(); once Run has returned, [ErrStopped]; while the partition's
// offsets have gone backwards and its table is not yet rebuilt, one matching
// [ErrRewound] and [*OffsetsWentBackwardsError]; a failed probe's, wrapped.
// A round trip in flight ignores ctx (RequestTimeout bounds it). Called
// before Run, it waits for Run to start.
func (v *View) Confirm(ctx context.Context, role codec.Role) (rolestate.Confirmed, error) {
	return v.confirm(ctx, role, 0)
}

// confirm is Confirm, and ConfirmRecent when maxAge > 0.
func (v *View) confirm(ctx context.Context, role codec.Role, maxAge time.Duration) (rolestate.Confirmed, error) {
	none := rolestate.Confirmed{State: rolestate.State{Role: role, LeaseOffset: -1}, OpenProducerID: -1, OpenOffset: -1}
	if err := v.waitChan(ctx, v.started); err != nil {
		return none, err
	}
	if err := v.waitChan(ctx, v.progress.seeded); err != nil {
		return none, err
	}
	p := codec.Partition(role, v.nparts)
	lso, open, recent, err := v.confirmPart(ctx, p, maxAge)
	if err != nil {
		return none, err
	}
	// A lease record of the role read so far whose producer id waits for
	// a verdict is settled first (see author.go).
	if err := v.awaitVerified(ctx, role, false, lso); err != nil {
		return none, err
	}
	// The lease's session: its partition is confirmed too, so that the
	// heartbeats the state is judged with are every one committed before
	// the confirmation (see session.go). A transaction open there of a
	// producer other than the session's may hide its heartbeats: it is
	// reported as held back, as one in the role's partition is, when the
	// role's partition has none.
	ix := v.index
	ix.mu.RLock()
	var sess *codec.Lease
	if e := ix.roles[role]; e != nil && e.hasLease() && e.lease.Session != nil && !e.lease.Released() {
		l := e.lease
		sess = &l
	}
	ix.mu.RUnlock()
	openOff := int64(-1)
	if open >= 0 {
		openOff = lso
	}
	if sess != nil {
		below := lso
		if sp := codec.SessionPartition(sess.Member, v.nparts); sp != p {
			slso, sopen, _, err := v.confirmPart(ctx, sp, maxAge)
			if err != nil {
				return none, err
			}
			if open < 0 && sopen >= 0 && sopen != sess.Session.ProducerID {
				open, openOff = sopen, slso
			}
			below = slso
		}
		// A session record read so far whose producer id waits for a
		// verdict is settled first, as a lease's is.
		if err := v.awaitBeat(ctx, sess.Member, below); err != nil {
			return none, err
		}
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	select {
	case <-v.done:
		return none, ErrStopped
	default:
	}
	if ix.rebuilding[p] { // cannot be without a mark: a reset follows one
		return none, rewound(&OffsetsWentBackwardsError{Topic: v.topic, Partition: p, Offset: v.progress.marks()[p].read, End: lso})
	}
	if recent {
		v.recent.used.Add(1)
	}
	return rolestate.Confirmed{State: ix.stateLocked(ix.roles[role], role), OpenProducerID: open, OpenOffset: openOff}, nil
}

// confirmPart is Confirm's work on partition p: it returns p's last
// stable offset once the view has applied every record below it, and the
// producer id of the transaction open there (-1 for none). With maxAge >
// 0 it may take the round trip from the view's own consumer (see
// ConfirmRecent); recent says it did.
func (v *View) confirmPart(ctx context.Context, p int32, maxAge time.Duration) (lso, open int64, recent bool, err error) {
	if e := v.progress.rewoundOf(p); e != nil {
		return -1, -1, false, rewound(e)
	}
	first := !v.isReady()
	mark := v.progress.marks()[p]
	// After the first catch-up, one read_committed Fetch from what the
	// view has read answers the last stable offset and the records below
	// it; ListOffsets is the way when it cannot (the first catch-up, whose
	// consumer must be proven fetching, and an offset outside the
	// partition: a log that went backwards, or was deleted below it).
	var fetched *ends
	if !first && maxAge > 0 {
		if e, ok := v.recentEnds(p, mark, maxAge, time.Now()); ok {
			fetched, recent = &e, true
		}
	}
	if !first && !recent {
		e, err := v.prober.fetchEnds(ctx, p, mark.read)
		switch {
		case err == nil:
			fetched = &e
		case !errors.Is(err, errOutOfRange):
			return -1, -1, false, v.probeErr(ctx, err)
		}
	}
	if fetched != nil {
		lso = fetched.lso
	} else {
		lsos, err := v.prober.listOffsets(ctx, []int32{p}, sarama.OffsetNewest)
		if err != nil {
			return -1, -1, false, v.probeErr(ctx, err)
		}
		lso = lsos[p]
	}
	if lso < mark.read {
		v.probedBackwards(&OffsetsWentBackwardsError{Topic: v.topic, Partition: p, Offset: mark.read, End: lso}, mark.resets)
	}
	if e := v.progress.rewoundOf(p); e != nil {
		return -1, -1, false, rewound(e)
	}
	open = -1
	if fetched == nil || fetched.hwm > lso {
		var err error
		if open, err = v.prober.openProducer(p, lso); err != nil {
			return -1, -1, false, v.probeErr(ctx, err)
		}
	}
	if !recent {
		v.recent.probed(p, time.Now())
	}
	switch {
	case first:
		err = v.catchUpPartition(ctx, p, lso, mark, true)
		if err == nil {
			v.progress.confirmedTo(p, lso, mark.resets)
		}
	case fetched != nil:
		err = v.confirmFetched(ctx, p, *fetched, mark)
	default:
		err = v.confirmPartition(ctx, p, lso, mark)
	}
	if err != nil {
		return -1, -1, false, err
	}
	if e := v.progress.rewoundOf(p); e != nil {
		return -1, -1, false, rewound(e) // it went backwards while the view caught up
	}
	return lso, open, recent, nil
}

// rewound is Confirm's error for a partition whose offsets went backwards
// and that the view has not rebuilt yet: it matches both ErrRewound and e.
func rewound(e *OffsetsWentBackwardsError) error {
	return fmt.Errorf("%w: %w", ErrRewound, e)
}

// confirmPartition waits until partition p is caught up to lso (its last
// stable offset, probed after mark was taken and after the view's first
// catch-up), and records it. A partition already confirmed up to lso
// needs no round trip.
func (v *View) confirmPartition(ctx context.Context, p int32, lso int64, mark readMark) error {
	if lso > v.progress.caughtUpToOf(p) || lso < mark.read {
		if err := v.catchUpPartition(ctx, p, lso, mark, false); err != nil {
			return err
		}
	}
	v.progress.confirmedTo(p, lso, mark.resets)
	return nil
}

// confirmFetched is confirmPartition for the ends one Fetch from mark.read
// found: it waits for the last record below the last stable offset that
// the Fetch held, looking further (lastRecordBefore) only when the Fetch's
// answer stopped short of the last stable offset.
func (v *View) confirmFetched(ctx context.Context, p int32, e ends, mark readMark) error {
	if e.lso > v.progress.caughtUpToOf(p) {
		target := e.tail.last
		if !e.tail.end {
			more, err := v.prober.lastRecordBefore(ctx, p, e.tail.scanned, e.lso)
			if err != nil {
				return v.probeErr(ctx, err)
			}
			target = max(target, more)
		}
		if target > v.progress.lastOf(p) {
			if err := v.waitHanded(ctx, p, target); err != nil {
				return err
			}
		}
	}
	v.progress.confirmedTo(p, e.lso, mark.resets)
	return nil
}

// openProducer fetches partition p at lso with read_uncommitted isolation
// and returns the producer id of the transaction whose first batch is
// there, or -1 when none is (lso is the high watermark, or the batch there
// is not transactional).
func (pr *prober) openProducer(p int32, lso int64) (int64, error) {
	b, err := pr.client.Leader(pr.topic, p)
	if err != nil {
		return -1, fmt.Errorf("leader of %s/%d: %w", pr.topic, p, err)
	}
	req := &sarama.FetchRequest{
		Version:      11,
		MaxWaitTime:  0,
		MinBytes:     0,
		MaxBytes:     probeMaxBytes,
		Isolation:    sarama.ReadUncommitted,
		SessionID:    0,
		SessionEpoch: -1,
	}
	req.AddBlock(pr.topic, p, lso, probeMaxBytes, -1)
	resp, err := b.Fetch(req)
	if err != nil {
		return -1, fmt.Errorf("fetch %s/%d at %d: %w", pr.topic, p, lso, err)
	}
	pr.answer()
	blk := resp.GetBlock(pr.topic, p)
	if blk == nil {
		return -1, fmt.Errorf("fetch %s/%d: %w", pr.topic, p, sarama.ErrIncompleteResponse)
	}
	if !errors.Is(blk.Err, sarama.ErrNoError) {
		return -1, fmt.Errorf("fetch %s/%d at %d: %w", pr.topic, p, lso, blk.Err)
	}
	if blk.HighWaterMarkOffset <= lso {
		return -1, nil
	}
	for _, rs := range blk.RecordsSet {
		if rs == nil || rs.RecordBatch == nil || rs.RecordBatch.PartialTrailingRecord {
			continue
		}
		rb := rs.RecordBatch
		if rb.FirstOffset+int64(rb.LastOffsetDelta) < lso {
			continue // a batch that began below lso (compaction keeps batches whole)
		}
		if rb.IsTransactional && !rb.Control {
			return rb.ProducerID, nil
		}
		return -1, nil
	}
	return -1, nil
}
