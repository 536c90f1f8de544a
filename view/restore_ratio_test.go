package view

import (
	"testing"
	"time"

	"github.com/krabka/krole/internal/testcluster"
)

// restoreFloor is the lowest rate of an in-memory restore TestRestoreRatio
// accepts, as a share of a plain sarama consumer's rate. The goal is 0.8
// (docs/BENCHMARKS.md, "Restore"); the floor sits far below it, so that
// load on the machine cannot trip it, and far above a view that asks the
// coordinator about each role alone (about 0.1 here).
const restoreFloor = 0.3

// TestRestoreRatio guards the restore rate: a view reads 10,000 roles x 10
// registrations and a lease per role into memory, verifying each lease's
// author at its coordinator, and a plain read_committed sarama consumer
// reads the same topic, three times each in turn. Each is timed from its
// start until it holds every record; the view's best rate must be at least
// restoreFloor of the consumer's best.
func TestRestoreRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 110,000 records")
	}
	const nparts, roles, regs = 3, 10_000, 10
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	total := fillTopic(t, c, nparts, roles, regs)
	timed := func(run func(read func())) time.Duration {
		start := time.Now()
		var took time.Duration
		run(func() { took = time.Since(start) })
		return took
	}
	var view, raw time.Duration
	for i := range 3 {
		dv := timed(func(read func()) { restoreView(t, c.Config, "", roles, read) })
		dr := timed(func(read func()) { readAll(t, c.Config, nparts, total, read) })
		if i == 0 || dv < view {
			view = dv
		}
		if i == 0 || dr < raw {
			raw = dr
		}
	}
	ratio := raw.Seconds() / view.Seconds()
	t.Logf("%d records: view %v, sarama consumer %v (best of 3): the view at %.0f%% of the consumer's rate",
		total, view.Round(time.Millisecond), raw.Round(time.Millisecond), 100*ratio)
	if ratio < restoreFloor {
		t.Errorf("the view restores at %.0f%% of a sarama consumer's rate, under the floor of %.0f%%", 100*ratio, 100*restoreFloor)
	}
}
