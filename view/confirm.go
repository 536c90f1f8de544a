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
// ctx.Err(); once Run has returned, [ErrStopped]; when the partition's
// last stable offset is below what the view has read, [ErrRewound]
// (wrapped); a failed probe, its error wrapped. No state is returned with
// an error. A round trip in flight is not interrupted by ctx: it is
// bounded by the config's RequestTimeout. Called before Run, it waits for
// Run to start.
func (v *View) Confirm(ctx context.Context, role codec.Role) (rolestate.Confirmed, error) {
	none := rolestate.Confirmed{State: rolestate.State{Role: role, LeaseOffset: -1}, OpenProducerID: -1, OpenOffset: -1}
	if err := v.waitChan(ctx, v.started); err != nil {
		return none, err
	}
	if err := v.waitChan(ctx, v.seeded); err != nil {
		return none, err
	}
	p := codec.Partition(role, v.nparts)
	first := !v.isReady()
	read := v.readSoFar()[p]
	lsos, err := v.prober.listOffsets(ctx, []int32{p}, sarama.OffsetNewest)
	if err != nil {
		return none, v.probeErr(ctx, err)
	}
	v.health.contact(v.opts.Clock())
	lso := lsos[p]
	if r := rewoundAt(p, lso, read); r != "" {
		return none, fmt.Errorf("view: %w: %s", ErrRewound, r)
	}
	open, err := v.prober.openProducer(p, lso)
	if err != nil {
		return none, v.probeErr(ctx, err)
	}
	if first {
		err = v.catchUpPartition(ctx, p, lso, true)
		if err == nil {
			v.confirmedTo(p, lso)
		}
	} else {
		err = v.confirmPartition(ctx, p, lso)
	}
	if err != nil {
		return none, err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.stopped {
		return none, ErrStopped
	}
	c := rolestate.Confirmed{State: v.roles[role].state(role), OpenProducerID: open, OpenOffset: -1}
	if open >= 0 {
		c.OpenOffset = lso
	}
	return c, nil
}

// confirmPartition waits until partition p is caught up to lso (its last
// stable offset, probed after the view's first catch-up), and records it.
// A partition already confirmed up to lso needs no round trip.
func (v *View) confirmPartition(ctx context.Context, p int32, lso int64) error {
	v.mu.RLock()
	done := lso <= v.parts[p].caughtUpTo
	v.mu.RUnlock()
	if !done {
		if err := v.catchUpPartition(ctx, p, lso, false); err != nil {
			return err
		}
	}
	v.confirmedTo(p, lso)
	return nil
}

// confirmedTo records that partition p was found caught up to lso.
func (v *View) confirmedTo(p int32, lso int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if ps := v.parts[p]; lso > ps.caughtUpTo {
		ps.caughtUpTo = lso
	}
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
