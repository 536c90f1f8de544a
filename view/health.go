package view

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
)

// This file is the view's account of its own freshness ([View.Health]) and
// the observer's clock on leases ([rolestate.State].LeaseSeenAt).
//
// Freshness rests on two readings of the view's clock ([Options].Clock):
//
//   - the last contact: when a broker last answered the view. A probe of
//     the topic's end that succeeds is one (the view probes every
//     [Options].HealthInterval, and [View.WaitCaughtUp] and [View.Confirm]
//     probe too), and so is a fetch that hands the view records (the
//     consumer calls viewHealth.contact);
//   - the last catch-up: when the view was last confirmed to hold every
//     record of the whole topic that was stable when the probe started.
//     The periodic probe confirms it with one ListOffsets round trip per
//     leader while nothing new is committed (a partition whose last stable
//     offset has not moved since the last confirmation needs nothing
//     more), and waits for the records when something is.
//
// Neither reading says anything about what the broker enforces; they only
// bound how old the table's picture of the topic may be.

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
	// StaleAfter, and no partition's offsets went backwards.
	Healthy bool

	// Reason says why the view is not healthy, in one sentence; "" when
	// it is.
	Reason string

	// Unreachable: no broker has answered the view for longer than
	// StaleAfter (since LastContact, or since Run started when none has).
	// A view that cannot reach the cluster keeps answering lookups from
	// its table, as it was at CaughtUpAt.
	Unreachable bool

	// LastContact is when a broker last answered the view (a probe of the
	// topic's end, or a fetch that handed it records), by the view's
	// clock; zero when none has.
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
	rewound string    // the latest probe's finding that offsets went back; "" none
}

// contact records that a broker answered the view at now. The view's
// consumer calls it for each fetch answer it gets (today: each record
// handed to the view); it never blocks on the view.
func (h *viewHealth) contact(now time.Time) {
	h.mu.Lock()
	if now.After(h.last) {
		h.last = now
	}
	h.mu.Unlock()
}

func (h *viewHealth) read() (started, last time.Time, rewound string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started, h.last, h.rewound
}

// Health returns the view's freshness at this moment, by its clock. It
// does not block and does no I/O: it reads what the view's probes and
// consumer have recorded.
//
// The view is unhealthy when Run is not running, before its first
// catch-up, when no broker has answered it for longer than
// [Options].StaleAfter, when it has not been confirmed caught up for
// longer than StaleAfter, or when a probe found a partition's last stable
// offset below what the view has read (the topic was recreated, or the
// cluster lost its data). The view probes every [Options].HealthInterval,
// so a healthy view reaching a healthy cluster stays healthy; a cluster
// that stops answering makes it unhealthy within StaleAfter plus one
// HealthInterval.
func (v *View) Health() Health {
	now := v.opts.Clock()
	started, last, rewound := v.health.read()
	v.mu.RLock()
	caught, stopped := v.caughtAt, v.stopped
	v.mu.RUnlock()
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
	case rewound != "":
		h.Reason = rewound
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
	if v.waitChan(ctx, v.started) != nil || v.waitChan(ctx, v.seeded) != nil {
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
// leader, then, once the view is ready, a catch-up of every partition,
// bounded by StaleAfter.
func (v *View) healthProbe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, v.opts.StaleAfter)
	defer cancel()
	read := v.readSoFar()
	lsos, err := v.prober.listOffsets(ctx, v.partIDs, sarama.OffsetNewest)
	if err != nil {
		_ = v.probeErr(ctx, err)
		return
	}
	v.health.contact(v.opts.Clock())
	rewound := ""
	for _, p := range v.partIDs {
		if r := rewoundAt(p, lsos[p], read[p]); r != "" {
			rewound = r
			break
		}
	}
	v.health.mu.Lock()
	v.health.rewound = rewound
	v.health.mu.Unlock()
	if rewound != "" || !v.isReady() {
		return
	}
	for _, p := range v.partIDs {
		if err := v.confirmPartition(ctx, p, lsos[p]); err != nil {
			return
		}
	}
	v.mu.Lock()
	v.caughtAt = v.opts.Clock()
	v.lastProbe = nil
	v.mu.Unlock()
}

// readSoFar returns, per partition, the offset up to which the view has
// read it: past the last record applied (or restored), and at least the
// last stable offset of the latest confirmed catch-up. Taken before a
// probe, it is below every last stable offset the probe can see.
func (v *View) readSoFar() map[int32]int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make(map[int32]int64, len(v.parts))
	for p, ps := range v.parts {
		out[p] = max(ps.last+1, ps.caughtUpTo)
	}
	return out
}

// rewoundAt returns, when partition p's last stable offset lso (probed
// after read was taken) is below read, a sentence saying so; "" otherwise.
// The last stable offset never moves back on a partition that keeps its
// log, and every record the view applied was below it when applied.
func rewoundAt(p int32, lso, read int64) string {
	if lso >= read {
		return ""
	}
	return fmt.Sprintf("the role topic's offsets went backwards: partition %d ends at %d, below the %d the view has read (the topic was recreated or the cluster lost its data); restart the view, and delete its state dir",
		p, lso, read)
}

// leaseApplied stamps the role's lease with the view's clock when the
// record just applied (or restored) to e is a lease: it is
// [rolestate.State].LeaseSeenAt.
func (v *View) leaseApplied(e *roleEntry, k codec.Key) {
	if k.Kind == codec.KindLease {
		e.leaseSeenAt = v.opts.Clock()
	}
}
