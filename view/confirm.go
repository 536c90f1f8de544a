package view

import (
	"context"
	"errors"
	"fmt"

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
// Exactly: it asks the partition's leader for the partition's last stable
// offset (one ListOffsets round trip with read_committed isolation) and
// waits until the view has applied the last record below it, as
// [View.WaitCaughtUp] does for every partition. A partition whose last
// stable offset has not moved since the view last confirmed it needs no
// more. It then fetches the partition at its last stable offset with
// read_uncommitted isolation (one Fetch round trip): when a transaction
// starts there (an open transaction holds the last stable offset below the
// high watermark), Confirmed.OpenProducerID is that transaction's producer
// id, from its first batch's header, and Confirmed.OpenOffset its first
// offset (the last stable offset); otherwise both are -1. The records of that
// transaction, and everything after its first offset, are not in State,
// even if the transaction has committed since. A transaction that began at
// the last stable offset just after the ListOffsets answered may be
// reported too.
//
// Errors: when ctx ends first, an error matching both [ErrNotCaughtUp] and
// ctx.Err(); once Run has returned, [ErrStopped]; while the partition's
// offsets have gone backwards (its last stable offset found below what the
// view had read, by this call's probe or earlier by the view) and the view
// has not yet replaced its table with one rebuilt from the partition's new
// log, an error matching both [ErrRewound] and [*OffsetsWentBackwardsError]
// (without a round trip when the view knew it already); a failed probe,
// its error wrapped. No state is returned with
// an error. A round trip in flight is not interrupted by ctx: it is
// bounded by the config's RequestTimeout. Called before Run, it waits for
// Run to start.
func (v *View) Confirm(ctx context.Context, role codec.Role) (rolestate.Confirmed, error) {
	none := rolestate.Confirmed{State: rolestate.State{Role: role, LeaseOffset: -1}, OpenProducerID: -1, OpenOffset: -1}
	if err := v.waitChan(ctx, v.started); err != nil {
		return none, err
	}
	if err := v.waitChan(ctx, v.progress.seeded); err != nil {
		return none, err
	}
	p := codec.Partition(role, v.nparts)
	if e := v.progress.rewoundOf(p); e != nil {
		return none, rewound(e)
	}
	first := !v.isReady()
	mark := v.progress.marks()[p]
	lsos, err := v.prober.listOffsets(ctx, []int32{p}, sarama.OffsetNewest)
	if err != nil {
		return none, v.probeErr(ctx, err)
	}
	lso := lsos[p]
	if lso < mark.read {
		v.progress.markRewound(&OffsetsWentBackwardsError{Topic: v.topic, Partition: p, Offset: mark.read, End: lso}, mark.resets)
	}
	if e := v.progress.rewoundOf(p); e != nil {
		return none, rewound(e)
	}
	open, err := v.prober.openProducer(p, lso)
	if err != nil {
		return none, v.probeErr(ctx, err)
	}
	if first {
		err = v.catchUpPartition(ctx, p, lso, mark, true)
		if err == nil {
			v.progress.confirmedTo(p, lso, mark.resets)
		}
	} else {
		err = v.confirmPartition(ctx, p, lso, mark)
	}
	if err != nil {
		return none, err
	}
	if e := v.progress.rewoundOf(p); e != nil {
		return none, rewound(e) // it went backwards while the view caught up
	}
	ix := v.index
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	select {
	case <-v.done:
		return none, ErrStopped
	default:
	}
	if ix.rebuilding[p] { // cannot be without a mark: a reset follows one
		return none, rewound(&OffsetsWentBackwardsError{Topic: v.topic, Partition: p, Offset: mark.read, End: lso})
	}
	c := rolestate.Confirmed{State: ix.roles[role].state(role), OpenProducerID: open, OpenOffset: -1}
	if open >= 0 {
		c.OpenOffset = lso
	}
	return c, nil
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
