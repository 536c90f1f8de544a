package view

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
)

// fetchMaxWait bounds the view consumer's idle long poll. It does not delay
// records: the broker answers at once when one is committed.
const fetchMaxWait = 100 * time.Millisecond

// View is the local table of the role topic: for each role its latest lease
// and its candidates in rank order. [View.Run] keeps it following the
// topic; the lookups ([View.Lookup], [View.Holder], [View.Candidates],
// [View.Roles], [View.Snapshot]) and [View.Watch] read it without a broker
// round trip. All methods are safe for concurrent use.
//
// Its parts, each with its own state and lock, tied by the run lifecycle
// kept here: the index (index.go, table.go, watch.go, lookup.go), the
// catch-up protocol (catchup.go, probe.go) and the goka glue (goka.go,
// consumer.go); apply.go takes a record through all three. health.go and
// confirm.go answer [View.Health] and [View.Confirm] from them.
type View struct {
	opts  Options
	cfg   fencing.Config
	log   *slog.Logger
	topic string

	index     *index
	progress  *progress
	glue      *gokaGlue
	health    viewHealth     // see health.go
	predecode *predecoder    // set by Run before goka starts; nil offline
	verify    *verifier      // settles the producer ids of lease records (author.go)
	recent    recentConfirms // ConfirmRecent's (confirm_recent.go)

	storesMu    sync.Mutex
	stores      map[int32]storage.Storage // each partition's state-dir storage once open
	disks       []*diskStore              // the state-dir storages goka built in this Run
	disksClosed bool                      // Run closed them: no more may open
	firstForged atomic.Bool               // a lease was skipped as not its role's own (logged at warn)

	// The run lifecycle.
	runOnce atomic.Bool
	started chan struct{} // closed once Run has read the topic's metadata
	ready   chan struct{} // closed at the first successful catch-up
	done    chan struct{} // closed when Run returns
	// readyFlag and stopped mirror ready and done for the checks that do
	// not wait: readyFlag is set after ready is closed, stopped before done.
	readyFlag, stopped atomic.Bool
	readyOnce          sync.Once
	stopOnce           sync.Once
	rebuildc           chan struct{} // capacity 1: a partition started a rebuild (see rebuild.go)

	// Set by Run before started is closed, read-only afterwards.
	prober  *prober
	partIDs []int32
	nparts  int32
	runCtx  context.Context
	fatal   context.CancelCauseFunc
}

// New validates opts and returns a View that does nothing until
// [View.Run] is called. New does no I/O.
func New(opts Options) (*View, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	v := &View{
		opts:     opts,
		cfg:      opts.Config,
		log:      opts.Logger.With("component", "view", "topic", opts.Config.Topic),
		topic:    opts.Config.Topic,
		index:    newIndex(opts.Clock),
		progress: newProgress(),
		glue:     newGokaGlue(),
		started:  make(chan struct{}),
		ready:    make(chan struct{}),
		done:     make(chan struct{}),
		rebuildc: make(chan struct{}, 1),
		stores:   map[int32]storage.Storage{},
	}
	v.verify = newVerifier(v, opts.Authors)
	v.index.ask = v.verify.ask
	return v, nil
}

// Run connects to the cluster, loads the table (from StateDir when set,
// then from the topic) and keeps it following the topic until ctx ends,
// or until a fatal error: the topic is missing, no broker answers at
// start, the state dir cannot be opened or written. Other errors are not
// fatal: a partition's consumer fetches again, goka restarts it after
// three failures in a row ([Options].ReconnectBackoff) from where it
// stopped, and lookups answer from the table meanwhile. A partition whose
// offsets went backwards is rebuilt (package doc, "When the topic starts
// over").
//
// Run returns nil when ctx ends, promptly whatever the cluster does
// (package doc, "Stopping"), having closed its connections, the state dir
// and every [View.Watch] channel, and failed waiting lookups with
// [ErrStopped]. A second call returns [ErrAlreadyRun].
func (v *View) Run(ctx context.Context) (err error) {
	if !v.runOnce.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	parent := ctx
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	defer v.stop()
	v.fatal = cancelCause

	sc, err := v.cfg.Sarama()
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	sc.Consumer.MaxWaitTime = fetchMaxWait
	// Every connection of the view is dialed through conns and shut as
	// soon as ctx ends: a cluster that does not answer must not hold Run.
	conns := trackConns(sc)
	shutAtEnd := context.AfterFunc(ctx, func() { conns.Shut() })
	var (
		inflight sync.WaitGroup // the prober's calls, abandoned ones included
		client   sarama.Client
	)
	// Run's last deferred call: each wait bounded.
	defer func() {
		shutAtEnd()
		conns.Shut()
		waitBounded(&inflight, stopWait)
		if client != nil {
			closeBounded(client, stopWait)
		}
	}()
	client, err = sarama.NewClient(v.cfg.Brokers, sc)
	if err != nil {
		client = nil
		if parent.Err() != nil {
			return nil // stopped while connecting
		}
		return fmt.Errorf("view: no broker answered at %v: %w", v.cfg.Brokers, err)
	}
	pr := &prober{client: client, topic: v.topic, answered: v.contact, conns: conns, inflight: &inflight}
	parts, err := pr.partitions(ctx)
	if err != nil {
		if parent.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("view: %w", err)
	}
	for i, p := range parts {
		if int32(i) != p {
			return fmt.Errorf("view: topic %s: partitions %v are not numbered 0..%d", v.topic, parts, len(parts)-1)
		}
	}
	v.prober, v.partIDs, v.nparts, v.runCtx = pr, parts, int32(len(parts)), ctx
	v.progress.addPartitions(parts)
	v.glue.addPartitions(parts)
	v.index.setPartitions(int32(len(parts)))
	v.predecode = newPredecoder(v, parts)

	res := &gokaResources{}
	defer res.close(v.log)
	gv, err := goka.NewView(v.cfg.Brokers, goka.Table(v.topic), new(gokacodec.Bytes),
		goka.WithViewClientID(v.cfg.ClientID+"-view"),
		goka.WithViewLogger(gokaLogger{v.opts.Logger.With("component", "goka", "topic", v.topic)}),
		goka.WithViewCallback(v.update),
		goka.WithViewStorageBuilder(v.storageBuilder()),
		goka.WithViewConsumerSaramaBuilder(res.consumerBuilder(v, client, sc)),
		goka.WithViewTopicManagerBuilder(res.topicManagerBuilder(v, sc)),
		goka.WithViewAutoReconnect(),
		goka.WithViewBackoffBuilder(func() (goka.Backoff, error) {
			return goka.NewSimpleBackoff(v.opts.ReconnectBackoff, 10*v.opts.ReconnectBackoff), nil
		}),
	)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	v.glue.gv.Store(gv)
	close(v.started)
	v.log.Debug("view starting", "partitions", len(parts), "state_dir", v.opts.StateDir)

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		v.verify.run(ctx)
	}()
	go func() {
		defer wg.Done()
		v.catchUpLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		v.monitor(ctx)
	}()
	err = gv.Run(ctx)
	cause := context.Cause(ctx)
	cancel()
	conns.Shut() // at once: a probe or consumer waiting on a broker ends now
	wg.Wait()
	v.closeDisks()
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

// stopWait bounds Run's waits, once its connections are shut, for the
// prober's calls and the client's close: a call that does not end then is
// left behind.
const stopWait = 2 * time.Second

// trackConns makes sc dial every connection through a ctxcall.Conns,
// which it returns, keeping sc's own dialer (the TLS one, when TLS is on).
func trackConns(sc *sarama.Config) *ctxcall.Conns {
	var d ctxcall.Dialer = &net.Dialer{Timeout: sc.Net.DialTimeout, KeepAlive: sc.Net.KeepAlive}
	if sc.Net.Proxy.Enable && sc.Net.Proxy.Dialer != nil {
		d = sc.Net.Proxy.Dialer
	}
	conns := ctxcall.NewConns(d)
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = conns
	return conns
}

// waitBounded waits for wg, at most d.
func waitBounded(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// closeBounded closes client, waiting at most d: sarama's Close waits for
// the client's background metadata refresh.
func closeBounded(client sarama.Client, d time.Duration) {
	done := make(chan struct{})
	go func() { _ = client.Close(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// failRun ends Run with err. It is for errors that following the topic
// cannot repair, such as a failed write to the state dir: retrying would
// leave the state dir without the record while goka moves its offset past
// it.
func (v *View) failRun(err error) {
	if v.fatal != nil { // set by Run before goka starts
		v.fatal(err)
	}
}

// stop marks the view stopped, wakes every waiter and subscriber, and waits
// for the subscribers' goroutines.
func (v *View) stop() { v.stopOnce.Do(v.doStop) }

func (v *View) doStop() {
	v.progress.stop()
	v.stopped.Store(true)
	close(v.done)
	v.index.stop()
}

// CaughtUp reports, without blocking, whether the table has caught up since
// Run started and Run still runs: lookups answer at once, with the
// consumer's lag. For the topic's end at a given moment, [View.WaitCaughtUp].
func (v *View) CaughtUp() bool { return v.serving() }

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

// markReady records the first successful catch-up: lookups answer from
// then on.
func (v *View) markReady() {
	v.readyOnce.Do(func() {
		v.index.mu.Lock()
		v.index.readyLocked()
		v.index.mu.Unlock()
		close(v.ready)
		v.readyFlag.Store(true)
	})
}

// await is the gate of every lookup: it returns nil once the view has
// caught up (at once, after the first time) and Run still runs.
func (v *View) await(ctx context.Context) error {
	if v.serving() {
		return nil // caught up and running: the lookups' path
	}
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

// isReady reports whether the first catch-up has succeeded.
func (v *View) isReady() bool { return v.readyFlag.Load() }

// serving reports whether the view has caught up and Run still runs: the
// lookups answer at once.
func (v *View) serving() bool { return v.readyFlag.Load() && !v.stopped.Load() }
