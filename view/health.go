package view

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// This file is the view's account of its own freshness ([View.Health]) and
// the observer's clock on leases ([rolestate.State].LeaseSeenAt).
// Freshness rests on two readings of the view's clock ([Options].Clock):
//
//   - the last contact: when a broker last answered a probe (every
//     [Options].HealthInterval, and those of WaitCaughtUp and Confirm) or a
//     fetch of the view's consumer;
//   - the last catch-up: when the view was last confirmed to hold every
//     record of the topic stable when the probe started (one ListOffsets
//     per leader while nothing new is committed).
//
// Beside them, Health reports a partition whose offsets went backwards
// while it is marked rewound (rebuild.go). Neither reading says what the
// broker enforces; they bound how old the table's picture may be.

// Defaults of [Options].
const (
	DefaultHealthInterval = time.Second
	DefaultStaleAfter     = 5 * time.Second
)

// Health is the view's account of its own freshness at one moment; see
// [View.Health].
type Health struct {
	// Healthy: Run is running, the view has caught up, a broker answered
	// it within [Options].StaleAfter, it was confirmed caught up within
	// StaleAfter, and no partition whose offsets went backwards is still
	// waiting for its rebuilt table.
	Healthy bool

	// Reason says why the view is not healthy, in one sentence; "" when
	// it is.
	Reason string

	// Unreachable: no broker has answered the view for longer than
	// StaleAfter (since LastContact, or since Run started when none has).
	// A view that cannot reach the cluster keeps answering lookups from
	// its table, as it was at CaughtUpAt.
	Unreachable bool

	// LastContact is when a broker last answered the view (a probe round
	// trip, or a fetch of the view's consumer, with records or without),
	// by the view's clock; zero when none has.
	LastContact time.Time

	// CaughtUpAt is when the view was last confirmed caught up with the
	// whole role topic (by its own periodic probe or by
	// [View.WaitCaughtUp]), by the view's clock; zero when it never was.
	// The table held every record committed before then: its data is
	// current as of CaughtUpAt at least.
	CaughtUpAt time.Time
}

// viewHealth is the view's freshness state. Its zero value is ready.
type viewHealth struct {
	mu      sync.Mutex
	started time.Time // when the health monitor started (Run)
	last    time.Time // the last contact with a broker
}

// contact records that a broker answered the view, now by the view's
// clock. The view's consumer calls it for each fetch answer it gets, and
// the prober for each probe answer; it never blocks on the view.
func (v *View) contact() { v.health.contact(v.opts.Clock()) }

// contact records that a broker answered the view at now.
func (h *viewHealth) contact(now time.Time) {
	h.mu.Lock()
	if now.After(h.last) {
		h.last = now
	}
	h.mu.Unlock()
}

func (h *viewHealth) read() (started, last time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started, h.last
}

// Health returns the view's freshness at this moment, by its clock,
// without blocking or I/O. The view is unhealthy when Run is not running,
// before its first catch-up, when no broker has answered it or it has not
// been confirmed caught up for longer than [Options].StaleAfter, or while
// a partition whose offsets went backwards is not rebuilt (package doc,
// "When the topic starts over"). It probes every [Options].HealthInterval,
// so a view reaching a healthy cluster stays healthy, and one the cluster
// stops answering turns unhealthy within StaleAfter plus one
// HealthInterval.
func (v *View) Health() Health {
	now := v.opts.Clock()
	started, last := v.health.read()
	caught, stopped, rewound := v.progress.freshness()
	if caught.After(last) {
		last = caught // a catch-up is an answer of the brokers
	}
	h := Health{LastContact: last, CaughtUpAt: caught}
	switch {
	case !last.IsZero():
		h.Unreachable = now.Sub(last) > v.opts.StaleAfter
	case !started.IsZero():
		h.Unreachable = now.Sub(started) > v.opts.StaleAfter
	}
	switch {
	case stopped:
		h.Reason = "the view has stopped"
	case started.IsZero():
		h.Reason = "the view is not running"
	case h.Unreachable && last.IsZero():
		h.Reason = fmt.Sprintf("no broker has answered the view since it started %v ago", roundAge(now.Sub(started)))
	case h.Unreachable:
		h.Reason = fmt.Sprintf("no broker has answered the view for %v (since %s)", roundAge(now.Sub(last)), last.UTC().Format(time.RFC3339))
	case rewound != nil:
		h.Reason = rewoundReason(rewound)
	case !v.isReady():
		h.Reason = "the view has not caught up with the role topic yet"
	case now.Sub(caught) > v.opts.StaleAfter:
		h.Reason = fmt.Sprintf("the view has not been confirmed caught up with the role topic for %v (since %s)", roundAge(now.Sub(caught)), caught.UTC().Format(time.RFC3339))
	default:
		h.Healthy = true
	}
	return h
}

func roundAge(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// monitor probes the topic's end every HealthInterval until ctx ends (see
// the top of this file). Run starts it.
func (v *View) monitor(ctx context.Context) {
	v.health.mu.Lock()
	v.health.started = v.opts.Clock()
	v.health.mu.Unlock()
	if v.waitChan(ctx, v.started) != nil || v.waitChan(ctx, v.progress.seeded) != nil {
		return
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v.healthProbe(ctx)
		t.Reset(v.opts.HealthInterval)
	}
}

// healthProbe is one round of the monitor: one ListOffsets round trip per
// leader, then, once the view is ready and no partition is marked rewound,
// a catch-up of every partition, bounded by StaleAfter. A partition found
// gone backwards is marked rewound (see rebuild.go).
func (v *View) healthProbe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, v.opts.StaleAfter)
	defer cancel()
	marks := v.progress.marks()
	asOf := v.opts.Clock() // every record committed before is at or below lsos
	lsos, err := v.prober.listOffsets(ctx, v.partIDs, sarama.OffsetNewest)
	if err != nil {
		_ = v.probeErr(ctx, err)
		return
	}
	rewound := false
	for _, p := range v.partIDs {
		m := marks[p]
		if lsos[p] < m.read {
			e := &OffsetsWentBackwardsError{Topic: v.topic, Partition: p, Offset: m.read, End: lsos[p]}
			v.probedBackwards(e, m.resets)
		}
		if v.progress.rewoundOf(p) != nil {
			rewound = true
		}
	}
	if rewound || !v.isReady() {
		return
	}
	for _, p := range v.partIDs {
		if err := v.confirmPartition(ctx, p, lsos[p], marks[p]); err != nil {
			return
		}
	}
	v.progress.caughtUp(nil, nil, asOf)
}

// rewoundReason is Health's reason for a partition marked rewound.
func rewoundReason(e *OffsetsWentBackwardsError) string {
	return fmt.Sprintf("the role topic's offsets went backwards: partition %d ends at %d, below the %d the view had read (the topic was recreated or the cluster lost its data); the view is unhealthy until it has rebuilt the partition's table from the new log",
		e.Partition, e.End, e.Offset)
}
