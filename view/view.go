package view

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// fetchMaxWait bounds the view consumer's idle long poll. It does not delay
// records: the broker answers at once when one is committed.
const fetchMaxWait = 100 * time.Millisecond

// View is the local table of the role topic: for each role its latest lease
// and its candidates in rank order. [View.Run] keeps it following the
// topic; the lookups ([View.Lookup], [View.Holder], [View.Candidates],
// [View.Roles], [View.Snapshot]) and [View.Watch] read it without a broker
// round trip. All methods are safe for concurrent use.
type View struct {
	opts  Options
	cfg   fencing.Config
	log   *slog.Logger
	topic string

	runOnce   atomic.Bool
	started   chan struct{} // closed once Run has read the topic's metadata
	seeded    chan struct{} // closed once every partition's storage is open
	ready     chan struct{} // closed at the first successful catch-up
	done      chan struct{} // closed when Run returns
	readyOnce sync.Once
	stopOnce  sync.Once

	// Set by Run before started is closed, read-only afterwards.
	prober   *prober
	partIDs  []int32
	nparts   int32
	consumer atomic.Pointer[sarama.Consumer]
	gv       atomic.Pointer[goka.View] // for tests: goka's own Recovered()

	mu        sync.RWMutex
	roles     map[codec.Role]*roleEntry
	parts     map[int32]*partState
	nseeded   int
	waiters   []*waiter
	subs      map[*subscriber]struct{}
	subWG     sync.WaitGroup
	stopped   bool
	applied   int64
	skipped   map[SkipReason]int64
	runCtx    context.Context
	fatal     context.CancelCauseFunc
	caughtAt  time.Time
	lastProbe error

	health viewHealth // see health.go
}

// partState is what the view knows of one partition.
type partState struct {
	last       int64 // offset of the last record applied or skipped, or restored from the state dir; -1 none
	seeded     bool
	caughtUpTo int64 // LSO that the latest catch-up confirmed; -1 none

	// live is the highest offset the partition's consumer has handed to
	// the view in this Run, replays included; -1 none. Catch-up waiters
	// wait on it: a record handed proves the consumer is fetching.
	live int64

	// goka's side of the partition (see goka.go).
	gokaRecovered bool          // goka's recovery phase has ended (it reads nothing)
	reported      int64         // the offset the storage last reported to goka
	from          int64         // where the consumer that follows the topic started; -1 before
	consuming     chan struct{} // closed once that consumer has started
	consumers     int           // consumers goka started for the partition (each ConsumePartition)
}

func newPartState() *partState {
	return &partState{last: -1, caughtUpTo: -1, live: -1, reported: -1, from: -1, consuming: make(chan struct{})}
}

type waiter struct {
	p      int32
	target int64
	ch     chan struct{}
}

// New validates opts and returns a View that does nothing until
// [View.Run] is called. New does no I/O.
func New(opts Options) (*View, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &View{
		opts:    opts,
		cfg:     opts.Config,
		log:     opts.Logger.With("component", "view", "topic", opts.Config.Topic),
		topic:   opts.Config.Topic,
		started: make(chan struct{}),
		seeded:  make(chan struct{}),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
		roles:   map[codec.Role]*roleEntry{},
		parts:   map[int32]*partState{},
		subs:    map[*subscriber]struct{}{},
		skipped: map[SkipReason]int64{},
	}, nil
}

// Run connects to the cluster, loads the table (from StateDir when set,
// then from the topic) and keeps it following the topic until ctx ends. It
// blocks until then, or until a fatal error: the topic is missing, no
// broker answers at start, the state dir cannot be opened (another process
// holds it, for one) or written. Other errors after the start (a broker
// going away, a failed fetch) are not fatal: the view logs them and
// reconnects the partition (see [Options].ReconnectBackoff), and lookups
// keep answering from the table meanwhile. A reconnected partition's new
// consumer reads from where the old one stopped; like any new sarama
// partition consumer, it fetches ~100ms after it starts.
//
// Run returns nil when ctx ends. Before returning it closes its connections
// and the state dir, closes every [View.Watch] channel, and fails lookups
// still waiting with [ErrStopped]. A View runs once: a second call returns
// [ErrAlreadyRun].
func (v *View) Run(ctx context.Context) (err error) {
	if !v.runOnce.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	parent := ctx
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	defer v.stop()
	v.mu.Lock()
	v.fatal = cancelCause
	v.mu.Unlock()

	sc, err := v.cfg.Sarama()
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	// The broker answers a fetch as soon as a record is committed
	// (MinBytes 1); the wait only bounds an idle long poll, and with it
	// how long closing the consumer takes.
	sc.Consumer.MaxWaitTime = fetchMaxWait
	client, err := sarama.NewClient(v.cfg.Brokers, sc)
	if err != nil {
		return fmt.Errorf("view: no broker answered at %v: %w", v.cfg.Brokers, err)
	}
	defer client.Close()
	pr := &prober{client: client, topic: v.topic}
	parts, err := pr.partitions()
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	for i, p := range parts {
		if int32(i) != p {
			return fmt.Errorf("view: topic %s: partitions %v are not numbered 0..%d", v.topic, parts, len(parts)-1)
		}
	}
	v.mu.Lock()
	v.prober, v.partIDs, v.nparts, v.runCtx = pr, parts, int32(len(parts)), ctx
	for _, p := range parts {
		v.parts[p] = newPartState()
	}
	v.mu.Unlock()

	res := &gokaResources{}
	defer res.close(v.log)
	gv, err := goka.NewView(v.cfg.Brokers, goka.Table(v.topic), new(gokacodec.Bytes),
		goka.WithViewClientID(v.cfg.ClientID+"-view"),
		goka.WithViewLogger(gokaLogger{v.opts.Logger.With("component", "goka", "topic", v.topic)}),
		goka.WithViewCallback(v.update),
		goka.WithViewStorageBuilder(v.storageBuilder()),
		goka.WithViewConsumerSaramaBuilder(res.consumerBuilder(v, sc)),
		goka.WithViewTopicManagerBuilder(res.topicManagerBuilder(v, sc)),
		goka.WithViewAutoReconnect(),
		goka.WithViewBackoffBuilder(func() (goka.Backoff, error) {
			return goka.NewSimpleBackoff(v.opts.ReconnectBackoff, 10*v.opts.ReconnectBackoff), nil
		}),
	)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	v.gv.Store(gv)
	close(v.started)
	v.log.Debug("view starting", "partitions", len(parts), "state_dir", v.opts.StateDir)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		v.initialCatchUp(ctx)
	}()
	go func() {
		defer wg.Done()
		v.monitor(ctx)
	}()
	err = gv.Run(ctx)
	cause := context.Cause(ctx)
	cancel()
	wg.Wait()
	// Stop before the deferred closes of the connections, so that a lookup
	// or probe racing with the shutdown sees ErrStopped, not a closed
	// client.
	v.stop()
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	if cause != nil && parent.Err() == nil {
		return cause // a fatal error (see failRun)
	}
	return nil
}

// failRun ends Run with err. It is for errors that following the topic
// cannot repair, such as a failed write to the state dir: retrying would
// leave the state dir without the record while goka moves its offset past
// it.
func (v *View) failRun(err error) {
	v.mu.RLock()
	fatal := v.fatal
	v.mu.RUnlock()
	if fatal != nil {
		fatal(err)
	}
}

// initialCatchUp runs WaitCaughtUp until it succeeds once, so that lookups
// start answering; a failed probe is retried after a pause.
func (v *View) initialCatchUp(ctx context.Context) {
	pause := 100 * time.Millisecond
	for {
		start := time.Now()
		err := v.WaitCaughtUp(ctx)
		if err == nil {
			v.log.Info("view caught up with the role topic", "took", time.Since(start).Round(time.Millisecond))
			return
		}
		if ctx.Err() != nil || errors.Is(err, ErrStopped) {
			return
		}
		v.log.Warn("view catch-up probe failed; retrying", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 10*v.opts.ReconnectBackoff)
	}
}

// stop marks the view stopped, wakes every waiter and subscriber, and waits
// for the subscribers' goroutines.
func (v *View) stop() { v.stopOnce.Do(v.doStop) }

func (v *View) doStop() {
	v.mu.Lock()
	v.stopped = true
	close(v.done)
	v.waiters = nil
	v.mu.Unlock()
	v.subWG.Wait()
}

// CaughtUp reports whether the table has caught up with the role topic
// since Run started and Run is still running: lookups answer at once. It
// does not block. It does not promise that the table holds a record written
// a moment ago: the table follows the topic with the consumer's lag. To
// fence on the topic's end at a given moment, call [View.WaitCaughtUp].
func (v *View) CaughtUp() bool {
	select {
	case <-v.ready:
	default:
		return false
	}
	select {
	case <-v.done:
		return false
	default:
		return true
	}
}

// WaitCaughtUp blocks until the table holds every committed record of the
// role topic that was stable when the call started, then returns nil.
//
// Exactly: after the call starts, it asks each partition's leader for the
// partition's last stable offset (LSO, ListOffsets with read_committed
// isolation). The LSO is the high watermark, or the first offset of the
// oldest transaction still open. A partition is caught up when the view has
// been handed every record below its LSO that a read_committed consumer is
// handed. Transaction markers and aborted records are never handed to a
// consumer, so the view cannot wait for their offsets; instead it reads the
// partition's tail back from the LSO (a few hundred bytes in the usual
// case) to find the last record below the LSO that is neither, and waits
// until it has applied (or skipped) that one. Hence:
//
//   - an empty partition is caught up at once;
//   - a partition that ends in a transaction marker (every committed lease
//     write does) is caught up once its last data record is applied;
//   - a partition with an open transaction is caught up once every record
//     below the transaction's first offset is applied: records written
//     inside the open transaction are not awaited, and do not show until
//     it commits (nor ever, if it aborts).
//
// WaitCaughtUp costs one ListOffsets round trip per leader, plus a fetch or
// two per partition that is behind; it never rereads the partition. The
// first success marks the view ready: lookups stop waiting and
// [View.CaughtUp] turns true. Run performs that first call itself.
//
// Until the first success, a call also waits for each partition's consumer
// (the one that follows the topic for the rest of the Run) to have started
// and handed the view the last record below the LSO that it can be handed,
// which proves that it is fetching: a record committed afterwards reaches
// the table one fetch later. A partition that holds no such record cannot
// be proven this way and may show its first records up to ~100ms late;
// see the package doc, "A view's first moments".
//
// Called before Run, it waits for Run to start. When ctx ends first it
// returns an error matching both [ErrNotCaughtUp] and ctx.Err(); once Run
// has returned it returns [ErrStopped]; a failed probe returns its error
// (wrapped). A probe round trip in flight is not interrupted by ctx: it is
// bounded by the config's RequestTimeout.
func (v *View) WaitCaughtUp(ctx context.Context) error {
	if err := v.waitChan(ctx, v.started); err != nil {
		return err
	}
	if err := v.waitChan(ctx, v.seeded); err != nil {
		return err
	}
	first := !v.isReady()
	lsos, err := v.prober.listOffsets(ctx, v.partIDs, sarama.OffsetNewest)
	if err != nil {
		return v.probeErr(ctx, err)
	}
	for _, p := range v.partIDs {
		if err := v.catchUpPartition(ctx, p, lsos[p], first); err != nil {
			return err
		}
	}
	v.mu.Lock()
	for _, p := range v.partIDs {
		if ps := v.parts[p]; lsos[p] > ps.caughtUpTo {
			ps.caughtUpTo = lsos[p]
		}
	}
	v.caughtAt = v.opts.Clock()
	v.lastProbe = nil
	stopped := v.stopped
	v.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	v.readyOnce.Do(func() { close(v.ready) })
	return nil
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
	v.mu.Lock()
	v.lastProbe = err
	v.mu.Unlock()
	return fmt.Errorf("view: probing the end of the role topic: %w", err)
}

func notCaughtUp(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrNotCaughtUp, context.Cause(ctx))
}

// waitChan waits for ch, giving ErrStopped once Run returned and
// ErrNotCaughtUp when ctx ends first.
func (v *View) waitChan(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-v.done:
		return ErrStopped
	default:
	}
	select {
	case <-ch:
		return nil
	default:
	}
	select {
	case <-ch:
		return nil
	case <-v.done:
		return ErrStopped
	case <-ctx.Done():
		return notCaughtUp(ctx)
	}
}

// await is the gate of every lookup: it returns nil once the view has
// caught up (at once, after the first time) and Run still runs.
func (v *View) await(ctx context.Context) error {
	if err := v.waitChan(ctx, v.ready); err != nil {
		return err
	}
	select {
	case <-v.done:
		return ErrStopped
	default:
		return nil
	}
}

// catchUpPartition waits until partition p is caught up to lso (see
// WaitCaughtUp).
//
// The first catch-up also proves that the partition's consumer is the one
// that follows the topic from then on and that it is fetching: it waits
// for goka to start that consumer, and for the consumer to hand the view
// the last record below lso that it can be handed (the consumer starts at
// the last record restored from the state dir, so a restart with nothing
// new still hands one). A consumer that has handed a record is subscribed
// at the broker, so a record committed afterwards reaches the view one
// fetch later. Only a partition that holds no such record (empty, or only
// transaction markers and aborted records from where the consumer
// started) cannot be proven this way; see the package doc, "A view's
// first moments".
func (v *View) catchUpPartition(ctx context.Context, p int32, lso int64, first bool) error {
	var floor int64
	if first {
		from, err := v.waitConsumer(ctx, p)
		if err != nil {
			return err
		}
		live := v.liveOf(p)
		if live >= from && live >= lso-1 {
			return nil
		}
		floor = max(from, live+1)
	} else {
		last := v.lastOf(p)
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

// isReady reports whether the first catch-up has succeeded.
func (v *View) isReady() bool {
	select {
	case <-v.ready:
		return true
	default:
		return false
	}
}

// waitConsumer waits until goka has started the consumer that follows
// partition p (after its recovery phase) and returns its start offset.
func (v *View) waitConsumer(ctx context.Context, p int32) (int64, error) {
	v.mu.RLock()
	ps := v.parts[p]
	v.mu.RUnlock()
	if err := v.waitChan(ctx, ps.consuming); err != nil {
		return 0, err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return ps.from, nil
}

func (v *View) lastOf(p int32) int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if ps := v.parts[p]; ps != nil {
		return ps.last
	}
	return -1
}

func (v *View) liveOf(p int32) int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if ps := v.parts[p]; ps != nil {
		return ps.live
	}
	return -1
}

// waitHanded blocks until the partition's consumer has handed the view
// the record at offset target of partition p (or a later one) in this Run.
func (v *View) waitHanded(ctx context.Context, p int32, target int64) error {
	v.mu.Lock()
	if v.stopped {
		v.mu.Unlock()
		return ErrStopped
	}
	if v.parts[p].live >= target {
		v.mu.Unlock()
		return nil
	}
	w := &waiter{p: p, target: target, ch: make(chan struct{})}
	v.waiters = append(v.waiters, w)
	v.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-v.done:
		return ErrStopped
	case <-ctx.Done():
		v.mu.Lock()
		for i, x := range v.waiters {
			if x == w {
				v.waiters = append(v.waiters[:i], v.waiters[i+1:]...)
				break
			}
		}
		v.mu.Unlock()
		return notCaughtUp(ctx)
	}
}

// handed records that partition p's consumer handed the view the record at
// offset (a replay or not), and wakes the waiters it satisfies. v.mu must
// be held.
func (v *View) handed(ps *partState, p int32, offset int64) {
	if offset <= ps.live {
		return
	}
	ps.live = offset
	if len(v.waiters) == 0 {
		return
	}
	keep := v.waiters[:0]
	for _, w := range v.waiters {
		if w.p == p && offset >= w.target {
			close(w.ch)
			continue
		}
		keep = append(keep, w)
	}
	for i := len(keep); i < len(v.waiters); i++ {
		v.waiters[i] = nil
	}
	v.waiters = keep
}
