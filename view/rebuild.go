package view

// When a partition's offsets go backwards (the topic was deleted and
// created again, or the cluster restarted without its data), the view
// rebuilds that partition's part of the table from the partition's start.
// The steps, each owned by one part of the view:
//
//  1. The consumer (consumer.go) fetches at the offset after the last one
//     it handed over and is answered OFFSET_OUT_OF_RANGE; ListOffsets
//     shows the partition's end below that offset. It calls wentBackwards,
//     sends the error on Errors and stops fetching.
//  2. wentBackwards marks the partition rewound (progress: Confirm fails
//     with ErrRewound and Health reports it from now until step 4) and
//     for a reset (gokaGlue), and counts the rebuild; nothing else changes
//     yet, because goka may still be applying records the consumer
//     fetched from the old log. A probe (WaitCaughtUp, Confirm, the health
//     monitor) that finds the partition's end below what the view had
//     read before it probed does the same (probedBackwards), and tells
//     the partition's consumer, which stops and reports the error as in
//     step 1: by its next fetch the new log may have grown past its
//     offset, and it would never find out itself.
//  3. goka, handed the error, closes the partition consumer, drains it and,
//     after its backoff, asks the partition's storage for its offset again.
//     The storage (goka.go) takes the reset there, on goka's partition
//     goroutine, after the last old record: it forgets its contents and
//     offset and answers "nothing stored", the catch-up protocol forgets
//     the partition's offsets, and the index starts an empty table for the
//     partition's roles, invisible to lookups. goka then reads the
//     partition from its start.
//  4. The Run's catch-up loop runs WaitCaughtUp until it succeeds; at that
//     success the index adopts the rebuilt table (index.adopt) and
//     subscribers get each changed role, old state Before, new state
//     After, and the partition's rewound mark is cleared (Confirm and
//     Health recover). Until then lookups answer from the old table,
//     WaitCaughtUp fails (it cannot be caught up with a log that no longer
//     holds what the table holds), Confirm fails with ErrRewound, and
//     Health reports the offsets went backwards. The adopted table's
//     leases are stamped (LeaseSeenAt) at the adoption.
//
// The limit: a partition is seen going backwards only while its end is
// below the view's next offset, by the consumer or by a probe. A partition recreated and written past
// that offset before the view fetches again is read on from that offset,
// and the new records below it are never read (Kafka's topic ids, Fetch
// v13, would tell; sarama's fetch does not send them). A view that
// restarts after the change, from a state dir, is in the same position.

// wentBackwards is called by the consumer when partition e.Partition's
// offsets went backwards (step 2 above).
func (v *View) wentBackwards(e *OffsetsWentBackwardsError) {
	if e.Topic != v.topic {
		return
	}
	v.progress.wentBackwards(e)
	if !v.glue.markReset(e.Partition) {
		return
	}
	v.progress.countRebuild()
	v.log.Warn("view: the role topic's offsets went backwards (topic recreated, or the cluster lost its data); rebuilding the partition's table from its start",
		"partition", e.Partition, "offset", e.Offset, "end", e.End)
}

// resetPartition is step 3 above; it runs on goka's partition goroutine,
// from the storage's GetOffset, and reports whether a reset was pending.
func (v *View) resetPartition(p int32) bool {
	if !v.glue.takeReset(p) {
		return false
	}
	v.progress.reset(p)
	v.index.startRebuild(p)
	select {
	case v.rebuildc <- struct{}{}:
	default:
	}
	return true
}

// probedBackwards records what a probe (WaitCaughtUp, Confirm, the health
// monitor) found: partition e.Partition's end below what the view had
// read before the probe, with reset count resets. Unless the partition
// was reset since, it goes through step 2 above as if its consumer had
// found it, and the consumer, if goka runs one for the partition, stops
// and reports it, so that goka resets the partition. Without this, a
// partition written past the view's next offset before the consumer
// fetched again (a member's heartbeats come every renew interval) would
// never be found gone backwards by the consumer, never be reset, and
// stay marked rewound for ever.
func (v *View) probedBackwards(e *OffsetsWentBackwardsError, resets int) {
	if !v.progress.markRewound(e, resets) {
		return
	}
	if reset, _ := v.progress.resetSince(e.Partition, resets); reset {
		return // reset since the probe's mark was read: rebuilt already
	}
	v.wentBackwards(e)
	if c := v.glue.consumer.Load(); c != nil {
		if fc, ok := (*c).(*fetchConsumer); ok {
			fc.rewind(e)
		}
	}
}
