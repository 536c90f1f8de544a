package view

// When a partition's offsets go backwards (docs/DESIGN.md, "The view: when
// the topic starts over"), the view rebuilds its part of the table from the
// partition's start, in four steps:
//
//  1. The consumer (consumer.go), answered OFFSET_OUT_OF_RANGE with the
//     partition's end below its offset, calls wentBackwards, sends the
//     error on Errors and stops fetching.
//  2. wentBackwards marks the partition rewound (Confirm fails with
//     ErrRewound and Health reports it until step 4) and for a reset, and
//     changes nothing else: goka may still be applying old records. A
//     probe that finds the end below what the view had read does the same
//     (probedBackwards) and stops the consumer as in step 1.
//  3. goka closes and drains the partition's consumer and asks the storage
//     (goka.go) for its offset: there, after the last old record, the
//     storage, the progress and the index forget the partition (the index
//     into an empty table, invisible to lookups), and goka reads it again.
//  4. The catch-up loop's next success adopts the rebuilt table
//     (index.adopt): subscribers get each changed role, its leases are
//     stamped then, the rewound mark clears. Until then lookups answer from
//     the old table and WaitCaughtUp waits.

// wentBackwards is called by the consumer when partition e.Partition's
// offsets went backwards (step 2 above). The consumer is live, so its
// partition was not reset since it started.
func (v *View) wentBackwards(e *OffsetsWentBackwardsError) {
	if e.Topic != v.topic {
		return
	}
	v.progress.wentBackwards(e)
	if v.glue.markReset(e.Partition, -1) {
		v.countRebuild(e)
	}
}

func (v *View) countRebuild(e *OffsetsWentBackwardsError) {
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

// probedBackwards records what a probe found: partition e.Partition's end
// below what the view had read before it, at reset count resets. Unless
// reset since, the partition goes through step 2 and its consumer stops,
// so that goka resets it: a partition written past the consumer's offset
// before its next fetch would never be found otherwise.
func (v *View) probedBackwards(e *OffsetsWentBackwardsError, resets int) {
	if !v.progress.markRewound(e, resets) {
		return
	}
	// Marked only if not reset since: a reset taken after the probe read
	// its mark has rebuilt the partition already.
	if !v.glue.markReset(e.Partition, resets) {
		return
	}
	v.countRebuild(e)
	if c := v.glue.consumer.Load(); c != nil {
		if fc, ok := (*c).(*fetchConsumer); ok {
			fc.rewind(e)
		}
	}
}
