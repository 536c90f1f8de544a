package view

import "time"

// Stats is a point-in-time account of the view, for metrics.
type Stats struct {
	// Applied counts the records folded into the table since Run started
	// (records restored from the state dir are not counted).
	Applied int64

	// Skipped counts the records skipped, by reason; every reason of
	// [SkipReasons] is present.
	Skipped map[SkipReason]int64

	// Roles is the number of roles the table knows.
	Roles int

	// CaughtUp is [View.CaughtUp].
	CaughtUp bool

	// LastCatchUp is when the latest successful [View.WaitCaughtUp]
	// returned (by the view's clock); zero if none has.
	LastCatchUp time.Time

	// ProbeError is the error of the latest failed probe of the topic's end,
	// nil once a later one succeeds.
	ProbeError error

	// Rebuilds counts the partitions whose offsets went backwards (the
	// topic recreated, the cluster restarted without its data) since Run
	// started, each rebuilt from its start (see the package doc, "When the
	// topic starts over").
	Rebuilds int64

	// ConfirmsFromAnswers counts the confirmations [View.ConfirmRecent]
	// took from the view's own fetch answers, without a round trip.
	ConfirmsFromAnswers uint64

	// Partitions holds one entry per partition, by partition id.
	Partitions []PartitionStats
}

// PartitionStats is one partition's progress.
type PartitionStats struct {
	// Partition is the partition's id.
	Partition int32

	// Next is the offset after the last record the view has applied,
	// skipped or restored from the state dir: where it reads next.
	Next int64

	// HighWatermark is the partition's high watermark (transaction markers
	// and open transactions included) as the view's consumer's latest
	// fetch answer gave it. -1 when unknown, or 0 (an empty partition).
	HighWatermark int64

	// Lag is HighWatermark - Next (0 when unknown). It is an upper bound of
	// the records the view has yet to read: transaction markers, aborted
	// records and records of open transactions count too, so a partition
	// that ends in a marker shows a lag of 1 when fully read. Use
	// CaughtUpTo or [View.WaitCaughtUp] for the exact notion.
	Lag int64

	// CaughtUpTo is the last stable offset up to which the latest
	// successful [View.WaitCaughtUp] found the partition read; -1 if none.
	CaughtUpTo int64
}

// Stats returns the view's counters. It does not block on the view nor do
// any I/O. The table's counters and the partitions' progress are read one
// after the other, not at one instant.
func (v *View) Stats() Stats {
	var hwms map[string]map[int32]int64
	if c := v.glue.consumer.Load(); c != nil {
		hwms = (*c).HighWaterMarks()
	}
	s := Stats{
		Skipped:  make(map[SkipReason]int64, len(SkipReasons)),
		CaughtUp: v.CaughtUp(),

		ConfirmsFromAnswers: v.recent.used.Load(),
	}
	ix := v.index
	ix.mu.RLock()
	s.Applied, s.Roles = ix.applied, len(ix.roles)
	for _, r := range SkipReasons {
		s.Skipped[r] = ix.skipped[r]
	}
	ix.mu.RUnlock()
	pg := v.progress
	pg.mu.Lock()
	defer pg.mu.Unlock()
	s.LastCatchUp, s.ProbeError, s.Rebuilds = pg.caughtAt, pg.lastProbe, pg.rebuilds
	for p := int32(0); p < int32(len(pg.parts)); p++ {
		ps := pg.parts[p]
		st := PartitionStats{Partition: p, Next: ps.last + 1, HighWatermark: -1, CaughtUpTo: ps.caughtUpTo}
		if h, ok := hwms[v.topic][p]; ok && h > 0 {
			st.HighWatermark = h
			st.Lag = max(0, h-st.Next)
		}
		s.Partitions = append(s.Partitions, st)
	}
	return s
}
