package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// failover is how a holder's term ends in TestExactlyOnceAcrossFailovers.
type failover int

const (
	final              failover = iota // runs until the input is done, then is cancelled
	pausedMidTxn                       // stalls inside a transaction while the next holder acquires and commits, then goes on
	fencedAfterOutputs                 // the next holder acquires after the outputs are written: the offset commit is refused
	fencedAfterOffsets                 // the next holder acquires after the offsets are committed: the commit is refused
	fencedBetweenTxns                  // the next holder acquires while this one transforms a batch: its next write is refused
	cancelledMidTxn                    // ctx ends inside a transaction: it is aborted
	cancelledCleanly                   // ctx ends between transactions
)

func (f failover) String() string {
	return [...]string{"final", "paused mid-transaction", "fenced after outputs", "fenced after offsets",
		"fenced between transactions", "cancelled mid-transaction", "cancelled cleanly"}[f]
}

func (f failover) fenced() bool { return f >= pausedMidTxn && f <= fencedBetweenTxns }

// chain runs holders of one role one after the other; each term ends in
// the failover its place in the schedule names, and starts the next term.
type chain struct {
	t        *testing.T
	e        *env
	ctx      context.Context
	role     codec.Role
	base     Config
	end      map[int32]int64
	schedule []failover
	started  chan *holder

	mu       sync.Mutex
	holders  []*holder
	progress map[int32]int64

	transforms atomic.Int64 // Transform calls of every holder
}

type holder struct {
	c        *chain
	i        int
	kind     failover
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	commits  atomic.Int64
	fired    atomic.Bool
	first    chan struct{} // closed at the first commit
	firstOne sync.Once
}

// start starts holder i (once): a fresh transport acquires the role,
// fencing holder i-1, and runs Run.
func (c *chain) start(i int) *holder {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < len(c.holders) {
		return c.holders[i]
	}
	kind := final
	if i < len(c.schedule) {
		kind = c.schedule[i]
	}
	h := &holder{c: c, i: i, kind: kind, done: make(chan struct{}), first: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(c.ctx)
	c.holders = append(c.holders, h)
	c.started <- h

	tr := c.e.c.Transport(c.e.t)
	tok, err := tr.AcquireEpoch(c.ctx, c.role)
	if !assert.NoError(c.t, err, "holder %d acquires", i) {
		h.err = err
		close(h.done)
		return h
	}
	cfg := c.base
	cfg.Transport = tr
	transform := transformFor(i, &c.transforms)
	cfg.Transform = func(in Message) ([]fencing.Message, error) {
		if kind == fencedBetweenTxns && h.trigger() {
			c.start(i + 1)
		}
		return transform(in)
	}
	cfg.OnCommit = h.onCommit
	switch kind {
	case pausedMidTxn:
		cfg.hooks.afterOutputs = func() error {
			if h.trigger() {
				next := c.start(i + 1)
				select { // stalled while the next holder acquires and commits
				case <-next.first:
				case <-c.ctx.Done():
				}
			}
			return nil
		}
	case fencedAfterOutputs:
		cfg.hooks.afterOutputs = func() error {
			if h.trigger() {
				c.start(i + 1)
			}
			return nil
		}
	case fencedAfterOffsets:
		cfg.hooks.afterOffsets = func() error {
			if h.trigger() {
				c.start(i + 1)
			}
			return nil
		}
	case cancelledMidTxn:
		cfg.hooks.afterOutputs = func() error {
			if h.trigger() {
				h.cancel()
			}
			return nil
		}
	}
	go func() {
		h.err = Run(h.ctx, cfg, c.role, tok)
		close(h.done)
		if kind == cancelledMidTxn || kind == cancelledCleanly {
			c.start(i + 1)
		}
	}()
	return h
}

// trigger reports, once, that the term's failover is due: after two
// commits, so every term makes progress.
func (h *holder) trigger() bool {
	return h.commits.Load() >= 2 && h.fired.CompareAndSwap(false, true)
}

func (h *holder) onCommit(cm Commit) {
	n := h.commits.Add(1)
	h.firstOne.Do(func() { close(h.first) })
	h.c.mu.Lock()
	for p, off := range cm.Offsets {
		assert.Greater(h.c.t, off, h.c.progress[p], "holder %d commits partition %d backwards", h.i, p)
		h.c.progress[p] = off
	}
	complete := done(h.c.progress, h.c.end)
	h.c.mu.Unlock()
	switch {
	case h.kind == cancelledCleanly && n >= 2 && h.trigger():
		h.cancel()
	case h.kind == final && complete:
		h.cancel()
	}
}

// The processor's output has every input record exactly once, in key
// order, through six failovers in the middle of the stream: a holder
// paused inside a transaction while the next one takes over and commits,
// holders fenced after writing outputs, after committing offsets and
// between transactions (each still running when the next one starts),
// and holders cancelled inside and between transactions.
func TestExactlyOnceAcrossFailovers(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		const n = 1500
		input, output := e.topic("input", 3), e.topic("output", 4)
		end := e.produce(input, 0, n)
		c := &chain{
			t: t, e: e, ctx: e.ctx(), role: "pipeline",
			base:     Config{Group: e.c.Name("group"), Input: input, Output: output, BatchSize: 50},
			end:      end,
			schedule: []failover{pausedMidTxn, fencedAfterOffsets, cancelledMidTxn, fencedBetweenTxns, cancelledCleanly, fencedAfterOutputs},
			started:  make(chan *holder, 16),
			progress: map[int32]int64{},
		}
		c.start(0)
		for i := 0; i <= len(c.schedule); i++ {
			var h *holder
			select {
			case h = <-c.started:
			case <-c.ctx.Done():
				t.Fatalf("holder %d never started (the input ran out before the schedule did?)", i)
			}
			select {
			case <-h.done:
			case <-c.ctx.Done():
				t.Fatalf("holder %d (%s) never returned", i, h.kind)
			}
			t.Logf("holder %d (%s): %d commits, Run returned %v", i, h.kind, h.commits.Load(), h.err)
			if h.kind.fenced() {
				assert.True(t, fencing.IsFenced(h.err), "holder %d (%s) should end fenced, got %v", i, h.kind, h.err)
			} else {
				assert.NoError(t, h.err, "holder %d (%s)", i, h.kind)
			}
			assert.GreaterOrEqual(t, h.commits.Load(), int64(1), "holder %d (%s) committed", i, h.kind)
		}
		require.NoError(t, c.ctx.Err(), "the test's time ran out")
		require.Len(t, c.holders, len(c.schedule)+1)
		fenced := 0
		for _, h := range c.holders {
			if fencing.IsFenced(h.err) {
				fenced++
			}
		}
		assert.GreaterOrEqual(t, fenced, 3, "failovers that fenced a running holder")

		outs := outputs(t, e.read(output, sarama.ReadCommitted))
		requireExactlyOnce(t, outs, n)
		writers := map[int]bool{}
		for _, o := range outs {
			writers[o.holder] = true
		}
		assert.Len(t, writers, len(c.holders), "every holder's committed outputs show")
		assert.Equal(t, end, e.committedOffsets(c.base.Group, input), "the group's offsets are at the end of the input")

		// The failovers did cut through work in progress: the log holds
		// outputs of aborted transactions, which read_committed hides,
		// and records were transformed more than once.
		assert.Greater(t, len(e.read(output, sarama.ReadUncommitted)), n, "aborted outputs are in the log")
		assert.Greater(t, c.transforms.Load(), int64(n), "some records were processed again")
	})
}

// A holder that stops cleanly commits its position: the next Run, of the
// same token or of a new holder, transforms only records it has not seen,
// starting exactly where the last one stopped.
func TestResumesFromTheCommittedOffsets(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		role := codec.Role("resumer")
		input, output := e.topic("input", 3), e.topic("output", 3)
		group := e.c.Name("group")
		a, b := e.c.Transport(e.t), e.c.Transport(e.t)
		tokA, err := a.AcquireEpoch(ctx, role)
		require.NoError(t, err)

		// runUntil runs one Run until the group's position reaches end,
		// and returns the first input offset it transformed per partition
		// and its number of Transform calls.
		runUntil := func(tr *fencing.BrokerTransport, tok codec.Token, holder int, end map[int32]int64) (map[int32]int64, int64) {
			t.Helper()
			var calls atomic.Int64
			first := map[int32]int64{}
			transform := transformFor(holder, &calls)
			err := e.runToEnd(ctx, Config{
				Transport: tr, Group: group, Input: input, Output: output, BatchSize: 64,
				Transform: func(in Message) ([]fencing.Message, error) {
					if _, ok := first[in.Partition]; !ok {
						first[in.Partition] = in.Offset
					}
					return transform(in)
				},
			}, role, tok, end)
			require.NoError(t, err, "a cancelled Run returns nil")
			return first, calls.Load()
		}

		end1 := e.produce(input, 0, 300)
		first, calls := runUntil(a, tokA, 0, end1)
		assert.Equal(t, int64(300), calls)
		for p := range end1 {
			if end1[p] > 0 {
				assert.Equal(t, int64(0), first[p], "the first run starts at the beginning of partition %d", p)
			}
		}
		assert.Equal(t, end1, e.committedOffsets(group, input))

		end2 := e.produce(input, 300, 400)
		first, calls = runUntil(a, tokA, 1, end2)
		assert.Equal(t, int64(100), calls, "the same token's next Run transforms only the new records")
		for p, off := range first {
			assert.Equal(t, end1[p], off, "partition %d resumes at the committed offset", p)
		}

		tokB, err := b.AcquireEpoch(ctx, role)
		require.NoError(t, err)
		end3 := e.produce(input, 400, 500)
		first, calls = runUntil(b, tokB, 2, end3)
		assert.Equal(t, int64(100), calls, "a new holder transforms only the new records")
		for p, off := range first {
			assert.Equal(t, end2[p], off, "partition %d resumes at the committed offset", p)
		}
		requireExactlyOnce(t, outputs(t, e.read(output, sarama.ReadCommitted)), 500)
		assert.Equal(t, end3, e.committedOffsets(group, input))
	})
}

// Run reports a lost role as fenced: when a later member acquired it (the
// next write is refused), and when the transport does not hold the token.
func TestRunReportsTheLostRole(t *testing.T) {
	e := newEnv(t, 1)
	ctx := e.ctx()
	role := codec.Role("loser")
	input, output := e.topic("input", 3), e.topic("output", 3)
	a, b := e.c.Transport(e.t), e.c.Transport(e.t)
	tokA, err := a.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	var calls atomic.Int64
	cfg := Config{Transport: a, Group: e.c.Name("group"), Input: input, Output: output, Transform: transformFor(0, &calls)}

	// A token the transport never minted: refused before anything is read.
	err = Run(ctx, Config{Transport: b, Group: cfg.Group, Input: input, Output: output}, role, tokA)
	assert.True(t, fencing.IsFenced(err), "got %v", err)
	assert.ErrorIs(t, err, fencing.ErrNotHeld)

	// The holder runs; a later member acquires; the holder's next
	// transaction is refused and Run ends fenced. The record it read is
	// never committed by it.
	committed := make(chan struct{}, 16)
	cfg.OnCommit = func(Commit) { committed <- struct{}{} }
	res := make(chan error, 1)
	go func() { res <- Run(ctx, cfg, role, tokA) }()
	e.produce(input, 0, 10)
	select {
	case <-committed:
	case <-ctx.Done():
		t.Fatal("the holder never committed")
	}
	_, err = b.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	e.produce(input, 10, 20)
	select {
	case err = <-res:
	case <-ctx.Done():
		t.Fatal("Run did not return after the fence")
	}
	assert.True(t, fencing.IsFenced(err), "got %v", err)
	assert.ErrorIs(t, err, fencing.ErrFenced)
	outs := outputs(t, e.read(output, sarama.ReadCommitted))
	for _, o := range outs {
		assert.Less(t, o.n, 10, "the fenced holder wrote %d", o.n)
	}

	// The transport forgot the fenced token: a new Run is refused at once.
	err = Run(ctx, cfg, role, tokA)
	assert.True(t, fencing.IsFenced(err), "got %v", err)
	assert.ErrorIs(t, err, fencing.ErrNotHeld)
}

// A Transform error stops Run with that error, and nothing of the failing
// batch is committed; the next Run with a working Transform completes the
// stream exactly once.
func TestTransformErrorCommitsNothingOfItsBatch(t *testing.T) {
	e := newEnv(t, 1)
	ctx := e.ctx()
	role := codec.Role("picky")
	input, output := e.topic("input", 3), e.topic("output", 3)
	group := e.c.Name("group")
	tr := e.c.Transport(e.t)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	end := e.produce(input, 0, 200)

	boom := errors.New("boom")
	var calls atomic.Int64
	ok := transformFor(0, &calls)
	err = Run(ctx, Config{Transport: tr, Group: group, Input: input, Output: output, BatchSize: 10,
		Transform: func(in Message) ([]fencing.Message, error) {
			if string(in.Value) == "150" {
				return nil, boom
			}
			return ok(in)
		}}, role, tok)
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "transform of "+input)
	assert.False(t, fencing.IsFenced(err))
	before := outputs(t, e.read(output, sarama.ReadCommitted))
	for _, o := range before {
		assert.NotEqual(t, 150, o.n)
	}
	assert.Less(t, len(before), 200)

	require.NoError(t, e.runToEnd(ctx, Config{Transport: tr, Group: group, Input: input, Output: output, BatchSize: 10,
		Transform: transformFor(1, &calls)}, role, tok, end))
	requireExactlyOnce(t, outputs(t, e.read(output, sarama.ReadCommitted)), 200)
}

// Transactions that fail for reasons other than a fence (the commit
// refused, an offset commit that was applied but answered
// REQUEST_TIMED_OUT) are aborted, and Run resumes from the committed
// offsets without returning: the output is still exactly once, and the
// records of the failed batches were transformed again.
func TestFailedTransactionsResumeFromTheCommittedOffsets(t *testing.T) {
	e := newEnv(t, 1)
	e.c.RequireFake(t)
	ctx := e.ctx()
	role := codec.Role("resilient")
	input, output := e.topic("input", 3), e.topic("output", 3)
	group := e.c.Name("group")
	tr := e.c.Transport(e.t)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	const n = 600
	end := e.produce(input, 0, n)
	txnID := e.c.Config.TransactionalID(string(role))

	var calls atomic.Int64
	var faults []*kfake.FaultHandle
	commits := 0
	err = e.runToEnd(ctx, Config{Transport: tr, Group: group, Input: input, Output: output, BatchSize: 25,
		Transform: transformFor(0, &calls),
		OnCommit: func(cm Commit) {
			commits++
			switch commits {
			case 3:
				faults = append(faults, e.c.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: txnID, Err: kerr.UnknownServerError, Count: 1}))
			case 6:
				faults = append(faults, e.c.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Group: group, Err: kerr.RequestTimedOut, Count: 1}))
			}
		}}, role, tok, end)
	require.NoError(t, err)
	for i, f := range faults {
		assert.Equal(t, 1, f.Hits(), "fault %d answered a request", i)
	}
	require.Len(t, faults, 2)
	requireExactlyOnce(t, outputs(t, e.read(output, sarama.ReadCommitted)), n)
	assert.Greater(t, calls.Load(), int64(n), "the failed batches were transformed again")
	assert.Equal(t, end, e.committedOffsets(group, input))
}

// An idle Run returns nil as soon as its ctx ends.
func TestRunReturnsNilWhenItsContextEnds(t *testing.T) {
	e := newEnv(t, 1)
	ctx := e.ctx()
	role := codec.Role("idle")
	tr := e.c.Transport(e.t)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() {
		res <- Run(rctx, Config{Transport: tr, Group: e.c.Name("group"), Input: e.topic("input", 2), Output: "out"}, role, tok)
	}()
	time.Sleep(100 * time.Millisecond) // let it reach its read
	cancel()
	select {
	case err := <-res:
		assert.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Run did not return after its ctx ended")
	}
}

// An invalid configuration is refused before anything is sent.
func TestRunRefusesAnInvalidConfig(t *testing.T) {
	tr := &fencing.BrokerTransport{}
	tf := func(Message) ([]fencing.Message, error) { return nil, nil }
	for name, cfg := range map[string]Config{
		"no transport":               {Group: "g", Input: "in", Output: "out"},
		"no group":                   {Transport: tr, Input: "in", Output: "out"},
		"no input":                   {Transport: tr, Group: "g", Output: "out"},
		"no output and no transform": {Transport: tr, Group: "g", Input: "in"},
		"negative batch size":        {Transport: tr, Group: "g", Input: "in", Transform: tf, BatchSize: -1},
		"negative linger":            {Transport: tr, Group: "g", Input: "in", Transform: tf, Linger: -time.Second},
	} {
		err := Run(context.Background(), cfg, "role", codec.Token{})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "stream: Config.", name)
	}
}

// Without a Transform, Run forwards key and value to Output by key, and
// Linger gathers records into fewer, larger transactions.
func TestDefaultTransformForwardsAndLingerBatches(t *testing.T) {
	e := newEnv(t, 1)
	ctx := e.ctx()
	role := codec.Role("forwarder")
	input, output := e.topic("input", 2), e.topic("output", 3)
	tr := e.c.Transport(e.t)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	end := e.produce(input, 0, 120)
	var batches []int
	require.NoError(t, e.runToEnd(ctx, Config{Transport: tr, Group: e.c.Name("group"), Input: input, Output: output,
		BatchSize: 1000, Linger: 200 * time.Millisecond,
		OnCommit: func(cm Commit) {
			batches = append(batches, cm.Records)
			assert.Equal(t, cm.Records, cm.Outputs)
		}}, role, tok, end))
	got := e.read(output, sarama.ReadCommitted)
	require.Len(t, got, 120)
	seen := map[string]bool{}
	for _, m := range got {
		assert.Equal(t, fencing.KeyPartition(m.Key, 3), m.Partition, "key %s", m.Key)
		assert.Equal(t, fmt.Sprintf("key-%s", mod(string(m.Value))), string(m.Key))
		seen[string(m.Value)] = true
	}
	assert.Len(t, seen, 120)
	assert.Less(t, len(batches), 120/2, "linger gathers records: batches %v", batches)
}

func mod(v string) string {
	var n int
	_, _ = fmt.Sscan(v, &n)
	return fmt.Sprint(n % inputKeys)
}
