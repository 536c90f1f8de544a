package view

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// progress is the view's second concept: the catch-up protocol. It knows,
// per partition, which offsets the view has been handed and applied, and
// it keeps the waiters of [View.WaitCaughtUp] until the offsets they wait
// for arrive. It knows nothing of roles or of goka.
//
// Ownership: a partition's last and live offsets are written only by the
// goroutine that hands that partition's records to the view (goka runs
// one per partition), and by seed before that goroutine starts; every
// field is read and written under mu.
type progress struct {
	seeded chan struct{} // closed once every partition's storage is open

	mu        sync.Mutex
	parts     map[int32]*partProgress
	nseeded   int
	waiters   []*waiter
	stopped   bool
	caughtAt  time.Time
	lastProbe error
	rebuilds  int64
	resetc    chan struct{} // closed and replaced at each partition reset
}

// partProgress is what the view knows of one partition's progress.
type partProgress struct {
	last       int64 // offset of the last record applied or skipped, or restored from the state dir; -1 none
	seeded     bool
	caughtUpTo int64 // LSO that the latest catch-up confirmed; -1 none

	// live is the highest offset the partition's consumer has handed to
	// the view in this Run, replays included; -1 none. Catch-up waiters
	// wait on it: a record handed proves the consumer is fetching.
	live int64

	// resets counts the partition's resets (see rebuild.go), so that a
	// catch-up adopts only a rebuild that began before it probed.
	resets int

	// rewound is set when the partition's offsets were found to have gone
	// backwards (by the consumer or by a probe), and cleared when the
	// rebuilt table of a later reset is adopted (rebuilt): while it is
	// set, the table does not describe the partition's log, and Confirm
	// and Health say so. rewoundResets is resets when it was set.
	rewound       *OffsetsWentBackwardsError
	rewoundResets int
}

// readMark is what the view had read of a partition before a probe: a
// probed end below read means the offsets went backwards, unless the
// partition was reset since (resets moved on).
type readMark struct {
	read   int64 // past the last record applied, and at least the last confirmed LSO
	resets int
}

type waiter struct {
	p      int32
	target int64
	ch     chan struct{}
}

func newProgress() *progress {
	return &progress{seeded: make(chan struct{}), parts: map[int32]*partProgress{}, resetc: make(chan struct{})}
}

// addPartitions registers the topic's partitions; called once, before
// any record is handed.
func (pg *progress) addPartitions(parts []int32) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for _, p := range parts {
		pg.parts[p] = &partProgress{last: -1, caughtUpTo: -1, live: -1}
	}
}

// replay reports whether the record at offset off of partition p is at or
// below the partition's last offset (goka reconnected, or the consumer
// started at the last record restored from the state dir), and records it
// as handed either way.
func (pg *progress) replay(p int32, off int64) bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	ps := pg.parts[p]
	if ps == nil { // not a partition the view knows: cannot happen with goka
		return true
	}
	if off <= ps.last {
		pg.handedLocked(ps, p, off)
		return true
	}
	return false
}

// done records that the record at off of partition p has been applied or
// skipped, and wakes the waiters it satisfies.
func (pg *progress) done(p int32, off int64) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	ps := pg.parts[p]
	if ps == nil {
		return
	}
	if off > ps.last {
		ps.last = off
	}
	pg.handedLocked(ps, p, off)
}

// seed records partition p's stored offset; it reports whether this was
// the last partition to be seeded.
func (pg *progress) seed(p int32, offset int64) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	ps := pg.parts[p]
	if ps == nil || ps.seeded {
		return
	}
	ps.seeded = true
	if offset > ps.last {
		ps.last = offset
	}
	pg.nseeded++
	if pg.nseeded == len(pg.parts) {
		close(pg.seeded)
	}
}

// handedLocked records that partition p's consumer handed the view the
// record at offset (a replay or not), and wakes the waiters it satisfies.
// pg.mu must be held.
func (pg *progress) handedLocked(ps *partProgress, p int32, offset int64) {
	if offset <= ps.live {
		return
	}
	ps.live = offset
	if len(pg.waiters) == 0 {
		return
	}
	keep := pg.waiters[:0]
	for _, w := range pg.waiters {
		if w.p == p && offset >= w.target {
			close(w.ch)
			continue
		}
		keep = append(keep, w)
	}
	for i := len(keep); i < len(pg.waiters); i++ {
		pg.waiters[i] = nil
	}
	pg.waiters = keep
}

// replaysTo returns the offset at or below which a record of partition p
// is a replay (see replay), and whether the view knows p.
func (pg *progress) replaysTo(p int32) (int64, bool) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if ps := pg.parts[p]; ps != nil {
		return ps.last, true
	}
	return 0, false
}

func (pg *progress) lastOf(p int32) int64 {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if ps := pg.parts[p]; ps != nil {
		return ps.last
	}
	return -1
}

func (pg *progress) liveOf(p int32) int64 {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if ps := pg.parts[p]; ps != nil {
		return ps.live
	}
	return -1
}

// caughtUp records a successful catch-up to lsos, probed after marks were
// taken and at or after at: the view then holds every record committed
// before at. A partition reset since its mark keeps no LSO of the old log.
func (pg *progress) caughtUp(lsos map[int32]int64, marks map[int32]readMark, at time.Time) (stopped bool) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for p, lso := range lsos {
		pg.confirmedToLocked(p, lso, marks[p].resets)
	}
	if at.After(pg.caughtAt) {
		pg.caughtAt = at
	}
	pg.lastProbe = nil
	return pg.stopped
}

// confirmedTo records that partition p was found caught up to lso, probed
// when the partition's reset count was resets.
func (pg *progress) confirmedTo(p int32, lso int64, resets int) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.confirmedToLocked(p, lso, resets)
}

func (pg *progress) confirmedToLocked(p int32, lso int64, resets int) {
	if ps := pg.parts[p]; ps != nil && ps.resets == resets && lso > ps.caughtUpTo {
		ps.caughtUpTo = lso
	}
}

// caughtUpTo returns the LSO partition p was last confirmed caught up to;
// -1 none.
func (pg *progress) caughtUpToOf(p int32) int64 {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if ps := pg.parts[p]; ps != nil {
		return ps.caughtUpTo
	}
	return -1
}

// marks returns, per partition, what the view has read of it (see
// readMark). Taken before a probe, each read is at or below every last
// stable offset the probe can see on a log that was not started over.
func (pg *progress) marks() map[int32]readMark {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	out := make(map[int32]readMark, len(pg.parts))
	for p, ps := range pg.parts {
		out[p] = readMark{read: max(ps.last+1, ps.caughtUpTo), resets: ps.resets}
	}
	return out
}

// markRewound records that partition e.Partition went backwards, found by
// a probe made after a mark with reset count resets; a partition reset
// since is being rebuilt already and is not marked again. It reports
// whether the partition is (still) marked.
func (pg *progress) markRewound(e *OffsetsWentBackwardsError, resets int) bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	ps := pg.parts[e.Partition]
	if ps == nil {
		return false
	}
	if ps.resets == resets && ps.rewound == nil {
		ps.rewound, ps.rewoundResets = e, resets
	}
	return ps.rewound != nil
}

// wentBackwards records that the consumer found partition e.Partition
// gone backwards; the partition is reset next (see rebuild.go).
func (pg *progress) wentBackwards(e *OffsetsWentBackwardsError) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if ps := pg.parts[e.Partition]; ps != nil && (ps.rewound == nil || ps.rewoundResets < ps.resets) {
		ps.rewound, ps.rewoundResets = e, ps.resets
	}
}

// rebuilt records that the rebuilt tables of parts were adopted: a mark
// set before the reset that led to the rebuild is cleared.
func (pg *progress) rebuilt(parts []int32) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for _, p := range parts {
		if ps := pg.parts[p]; ps != nil && ps.rewound != nil && ps.rewoundResets < ps.resets {
			ps.rewound = nil
		}
	}
}

// rewoundOf returns partition p's mark (see partProgress.rewound), nil
// when the partition is not marked.
func (pg *progress) rewoundOf(p int32) *OffsetsWentBackwardsError {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if ps := pg.parts[p]; ps != nil {
		return ps.rewound
	}
	return nil
}

// freshness returns what Health reads of the catch-up protocol: the last
// catch-up, whether the view stopped, and the marked partition of lowest
// id (nil none).
func (pg *progress) freshness() (caughtAt time.Time, stopped bool, rewound *OffsetsWentBackwardsError) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for _, ps := range pg.parts {
		if ps.rewound != nil && (rewound == nil || ps.rewound.Partition < rewound.Partition) {
			rewound = ps.rewound
		}
	}
	return pg.caughtAt, pg.stopped, rewound
}

func (pg *progress) probeFailed(err error) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.lastProbe = err
}

// stop drops every waiter (they are woken by the view's done channel).
func (pg *progress) stop() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.stopped = true
	pg.waiters = nil
}

// reset forgets partition p's offsets: the partition is read again from
// its start (see rebuild.go).
func (pg *progress) reset(p int32) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if ps := pg.parts[p]; ps != nil {
		ps.last, ps.live, ps.caughtUpTo = -1, -1, -1
		ps.resets++
	}
	close(pg.resetc)
	pg.resetc = make(chan struct{})
}

// resetSince returns whether partition p was reset since its reset count
// was resets, and a channel closed at the next partition reset.
func (pg *progress) resetSince(p int32, resets int) (bool, <-chan struct{}) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	ps := pg.parts[p]
	return ps == nil || ps.resets != resets, pg.resetc
}

func (pg *progress) countRebuild() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.rebuilds++
}

// resetCounts returns each partition's reset count.
func (pg *progress) resetCounts() map[int32]int {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	out := make(map[int32]int, len(pg.parts))
	for p, ps := range pg.parts {
		out[p] = ps.resets
	}
	return out
}

// waitHanded blocks until the partition's consumer has handed the view
// the record at offset target of partition p (or a later one) in this Run.
func (v *View) waitHanded(ctx context.Context, p int32, target int64) error {
	pg := v.progress
	pg.mu.Lock()
	if pg.stopped {
		pg.mu.Unlock()
		return ErrStopped
	}
	if pg.parts[p].live >= target {
		pg.mu.Unlock()
		return nil
	}
	w := &waiter{p: p, target: target, ch: make(chan struct{})}
	pg.waiters = append(pg.waiters, w)
	pg.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-v.done:
		return ErrStopped
	case <-ctx.Done():
		pg.mu.Lock()
		for i, x := range pg.waiters {
			if x == w {
				pg.waiters = append(pg.waiters[:i], pg.waiters[i+1:]...)
				break
			}
		}
		pg.mu.Unlock()
		return notCaughtUp(ctx)
	}
}

// WaitCaughtUp blocks until the table holds every committed record of the
// role topic that was stable when the call started, then returns nil.
//
// It probes each partition's last stable offset (LSO) and waits for the last
// record below it that a read_committed consumer is handed, its author's
// verdict included (an open transaction's records are not awaited); the
// first call also waits for each partition's consumer to prove it fetches
// (docs/DESIGN.md, "The view: catching up"). It costs one ListOffsets per
// leader plus a fetch or two per partition behind. The first success marks
// the view ready (lookups stop waiting, [View.CaughtUp] turns true); Run
// makes that first call itself.
//
// A partition whose LSO is below the offset the view has read has gone
// backwards (the topic was recreated, or the cluster restarted without its
// data): the view rebuilds its table (see the package doc, "When the
// topic starts over"), and the call returns once the rebuilt table has
// caught up.
//
// Called before Run, it waits for Run to start. When ctx ends first it
// returns an error matching both [ErrNotCaughtUp] and ctx.Err(); once Run
// has returned it returns [ErrStopped]; a failed probe returns its error
// (wrapped). A probe round trip in flight is abandoned when ctx ends, and
// the connections to its broker are reset.
func (v *View) WaitCaughtUp(ctx context.Context) error {
	if err := v.waitChan(ctx, v.started); err != nil {
		return err
	}
	if err := v.waitChan(ctx, v.progress.seeded); err != nil {
		return err
	}
	for {
		again, err := v.catchUpOnce(ctx)
		if err != nil || again {
			if err != nil {
				return err
			}
			continue
		}
		// Lease and session records read so far whose producer ids
		// wait for a verdict are settled before the table counts as
		// caught up: a session end waiting for its verdict would leave
		// its member's roles shown as held.
		if err := v.awaitVerified(ctx, "", true, -1); err != nil {
			return err
		}
		if err := v.awaitBeats(ctx); err != nil {
			return err
		}
		v.markReady()
		return nil
	}
}

// catchUpOnce probes every partition's end and waits until the view has
// read up to it. A partition whose rebuild (see rebuild.go) began before
// the probe is caught up with its new log then, and the index adopts its
// rebuilt table; again is true when a partition is still being rebuilt
// (its reset came during the call), so that the caller probes again.
func (v *View) catchUpOnce(ctx context.Context) (again bool, err error) {
	first := !v.isReady()
	marks := v.progress.marks()
	asOf := v.opts.Clock() // every record committed before is at or below lsos
	lsos, err := v.prober.listOffsets(ctx, v.partIDs, sarama.OffsetNewest)
	if err != nil {
		return false, v.probeErr(ctx, err)
	}
	for _, p := range v.partIDs {
		if err := v.catchUpPartition(ctx, p, lsos[p], marks[p], first); err != nil {
			return false, err
		}
	}
	if v.progress.caughtUp(lsos, marks, asOf) {
		return false, ErrStopped
	}
	var stable []int32
	for p, n := range v.progress.resetCounts() {
		if marks[p].resets == n {
			stable = append(stable, p)
		}
	}
	if done := v.index.adopt(stable); len(done) > 0 {
		v.progress.rebuilt(done)
		v.log.Info("view rebuilt the table of partitions whose offsets went backwards", "partitions", done)
	}
	return v.index.rebuildPending(), nil
}

func (v *View) probeErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return notCaughtUp(ctx)
	}
	select {
	case <-v.done:
		return ErrStopped
	default:
	}
	if v.runCtx != nil && v.runCtx.Err() != nil {
		return ErrStopped // Run is stopping: its connections are shut
	}
	v.progress.probeFailed(err)
	return fmt.Errorf("view: probing the end of the role topic: %w", err)
}

// catchUpPartition waits until partition p is caught up to lso (see
// WaitCaughtUp); the first catch-up also waits for the partition's consumer
// to prove it fetches (docs/DESIGN.md, "The view: catching up"). mark is
// what the view had read of p before lso was probed: an lso below it means
// p went backwards, and the call waits for the view to reset p (rebuild.go),
// then reads it from its start. (The offsets applied after the probe cannot
// tell: a record committed after the probe may be applied before this call.)
func (v *View) catchUpPartition(ctx context.Context, p int32, lso int64, mark readMark, first bool) error {
	if lso < mark.read {
		e := &OffsetsWentBackwardsError{Topic: v.topic, Partition: p, Offset: mark.read, End: lso}
		v.probedBackwards(e, mark.resets)
		for {
			done, reset := v.progress.resetSince(p, mark.resets)
			if done {
				break
			}
			select {
			case <-reset:
			case <-v.done:
				return ErrStopped
			case <-ctx.Done():
				v.progress.probeFailed(e)
				return notCaughtUp(ctx)
			}
		}
	}
	var floor int64
	if first {
		from, err := v.glue.waitConsumer(ctx, v.done, p)
		if err != nil {
			return err
		}
		live := v.progress.liveOf(p)
		if live >= from && live >= lso-1 {
			return nil
		}
		floor = max(from, live+1)
	} else {
		last := v.progress.lastOf(p)
		if last >= lso-1 {
			return nil
		}
		floor = last + 1
	}
	target, err := v.prober.lastRecordBefore(ctx, p, floor, lso)
	if err != nil {
		return v.probeErr(ctx, err)
	}
	if target < 0 {
		return nil
	}
	return v.waitHanded(ctx, p, target)
}

// catchUpLoop runs WaitCaughtUp until it succeeds once, so that lookups
// start answering, and again after each partition reset until it
// succeeds, so that the rebuilt table is adopted (see rebuild.go). It
// returns when ctx ends or the view stops.
func (v *View) catchUpLoop(ctx context.Context) {
	msg := "view caught up with the role topic"
	for {
		if !v.catchUp(ctx, msg) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-v.rebuildc:
		}
		msg = "view caught up again after a rebuild"
	}
}

// catchUp runs WaitCaughtUp until it succeeds (true) or ctx ends or the
// view stops (false); a failed probe is retried after a pause.
func (v *View) catchUp(ctx context.Context, msg string) bool {
	pause := 100 * time.Millisecond
	for {
		start := time.Now()
		err := v.WaitCaughtUp(ctx)
		if err == nil {
			v.log.Info(msg, "took", time.Since(start).Round(time.Millisecond))
			return true
		}
		if ctx.Err() != nil || errors.Is(err, ErrStopped) {
			return false
		}
		v.log.Warn("view catch-up probe failed; retrying", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
		pause = min(2*pause, 10*v.opts.ReconnectBackoff)
	}
}
