package view

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// Benchmarks. The restore benchmark writes its table once and then reads it
// back; its size is opt-in, so that `go test -bench .` stays quick:
//
//	KROLE_BENCH_1M=1        10,000 roles x 100 registrations + 10,000 leases
//	                        (1,010,000 records)
//	KROLE_BENCH_ROLES=n     n roles x 100 registrations + n leases
//	(default)               100 roles: 10,100 records
//
//	KROLE_BENCH_1M=1 go test -run '^$' -bench Restore -benchtime 3x ./view/

const benchRegsPerRole = 100

func benchRoles() int {
	if os.Getenv("KROLE_BENCH_1M") != "" {
		return 10_000
	}
	if n, err := strconv.Atoi(os.Getenv("KROLE_BENCH_ROLES")); err == nil && n > 0 {
		return n
	}
	return 100
}

// fillTopic writes roles x regs registrations (interleaved, as members of
// many roles join over time) and one lease per role (in transactions of
// 100 leases), and returns the number of records a read_committed
// consumer is handed.
func fillTopic(b testing.TB, c *testcluster.Cluster, nparts int32, roles, regs int) int64 {
	b.Helper()
	sc, err := c.Config.Sarama()
	require.NoError(b, err)
	sc.Producer.Flush.Messages = 1000
	sc.Producer.Flush.Frequency = 5 * time.Millisecond
	sc.Producer.Flush.MaxMessages = 10_000
	sc.Producer.Return.Successes = true
	prod, err := sarama.NewAsyncProducer(c.Config.Brokers, sc)
	require.NoError(b, err)
	var acked, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range prod.Successes() {
			acked.Add(1)
		}
	}()
	go func() {
		defer wg.Done()
		for range prod.Errors() {
			failed.Add(1)
		}
	}()
	name := func(i int) codec.Role { return codec.Role(fmt.Sprintf("role-%05d", i)) }
	for m := 0; m < regs; m++ {
		member := codec.MemberID(fmt.Sprintf("member-%03d", m))
		val, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: member, RegisteredAt: 1_700_000_000_000 + int64(m)}})
		require.NoError(b, err)
		for r := 0; r < roles; r++ {
			role := name(r)
			prod.Input() <- &sarama.ProducerMessage{Topic: c.Config.Topic, Partition: codec.Partition(role, nparts),
				Key: sarama.StringEncoder(codec.RegistrationKey(role, member).String()), Value: sarama.ByteEncoder(val)}
		}
	}
	prod.AsyncClose()
	wg.Wait()
	require.Zero(b, failed.Load(), "failed appends")

	w := &writer{t: b, cfg: c.Config, nparts: nparts}
	tp := w.txnProducer("bench")
	defer tp.Close()
	now := time.UnixMilli(1_700_000_000_000)
	for r := 0; r < roles; r += 100 {
		require.NoError(b, tp.BeginTxn())
		var msgs []*sarama.ProducerMessage
		for i := r; i < min(r+100, roles); i++ {
			msgs = append(msgs, leaseMsg(b, w, name(i), mkLease("member-000", 1, now, time.Hour)))
		}
		require.NoError(b, tp.SendMessages(msgs))
		require.NoError(b, tp.CommitTxn())
	}
	return acked.Load() + int64(roles)
}

func BenchmarkRestore(b *testing.B) {
	const nparts = 3
	roles := benchRoles()
	c := testcluster.Start(b, testcluster.Options{Partitions: nparts})
	start := time.Now()
	total := fillTopic(b, c, nparts, roles, benchRegsPerRole)
	b.Logf("wrote %d records (%d roles) in %v", total, roles, time.Since(start).Round(time.Millisecond))

	var cpu time.Duration // process CPU time (user+sys) while timed
	restoreOnce := func(b *testing.B, dir string) {
		cpu0 := cpuTime()
		restoreView(b, c.Config, dir, roles, func() {
			b.StopTimer()
			cpu += cpuTime() - cpu0
		})
		b.StartTimer()
	}
	restore := func(b *testing.B, dir func() string) {
		cpu = 0
		for i := 0; i < b.N; i++ {
			restoreOnce(b, dir())
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(total)/float64(b.N), "cpu-ns/record")
	}
	b.Run("view-memory", func(b *testing.B) { restore(b, func() string { return "" }) })
	b.Run("view-leveldb", func(b *testing.B) { restore(b, func() string { return b.TempDir() }) })
	b.Run("view-leveldb-resume", func(b *testing.B) {
		dir := b.TempDir()
		restoreOnce(b, dir) // fill the state dir once, untimed
		b.ResetTimer()
		restore(b, func() string { return dir })
	})
	b.Run("sarama-consumer", func(b *testing.B) {
		cpu = 0
		for i := 0; i < b.N; i++ {
			cpu0 := cpuTime()
			readAll(b, c.Config, nparts, total, b.StopTimer) // closing waits out the consumer's long poll: untimed
			cpu += cpuTime() - cpu0                          // includes closing the consumer, untimed
			b.StartTimer()
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(total)/float64(b.N), "cpu-ns/record")
	})
}

// restoreView starts a view of cfg (state in dir, "" for memory), waits
// until it has caught up, calls read, checks that it holds roles roles
// and stops it.
func restoreView(tb testing.TB, cfg fencing.Config, dir string, roles int, read func()) {
	v, err := New(Options{Config: cfg, StateDir: dir})
	require.NoError(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- v.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
	defer wcancel()
	require.NoError(tb, v.WaitCaughtUp(wctx))
	read()
	rs, err := v.Roles(ctx)
	require.NoError(tb, err)
	require.Len(tb, rs, roles)
	cancel()
	require.NoError(tb, <-errc)
}

// readAll reads the topic from its start with a plain read_committed sarama
// consumer until it has been handed total records, calls read, and closes
// the consumer: the baseline.
func readAll(tb testing.TB, cfg fencing.Config, nparts int32, total int64, read func()) {
	sc, err := cfg.Sarama()
	require.NoError(tb, err)
	cons, err := sarama.NewConsumer(cfg.Brokers, sc)
	require.NoError(tb, err)
	var n atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var pcs []sarama.PartitionConsumer
	for p := int32(0); p < nparts; p++ {
		pc, err := cons.ConsumePartition(cfg.Topic, p, sarama.OffsetOldest)
		require.NoError(tb, err)
		pcs = append(pcs, pc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-pc.Messages():
					if n.Add(1) == total {
						once.Do(func() { close(done) })
					}
				case <-done:
					return
				}
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		tb.Fatalf("read %d of %d records", n.Load(), total)
	}
	read()
	wg.Wait()
	for _, pc := range pcs {
		_ = pc.Close()
	}
	_ = cons.Close()
}

// lookupView is an offline view holding roles x cands candidates and a
// lease per role.
func lookupView(b *testing.B, roles, cands int) *View {
	v, err := New(Options{Config: fencing.Config{Brokers: []string{"127.0.0.1:1"}}})
	require.NoError(b, err)
	v.setOffline(1)
	close(v.started)
	v.markReady()
	b.Cleanup(v.stop)
	off := int64(0)
	l := mkLease("member-000", 1, time.UnixMilli(1_700_000_000_000), time.Hour)
	for r := 0; r < roles; r++ {
		role := codec.Role(fmt.Sprintf("role-%05d", r))
		for m := 0; m < cands; m++ {
			mem := codec.MemberID(fmt.Sprintf("member-%03d", m))
			v.apply(0, off, codec.RegistrationKey(role, mem), codec.Record{Registration: &codec.Registration{Member: mem}}, "")
			off++
		}
		v.apply(0, off, codec.LeaseKey(role), codec.Record{Lease: &l}, "")
		off++
	}
	return v
}

func BenchmarkHolder(b *testing.B) {
	for _, size := range []struct{ roles, cands int }{{100, 100}, {10_000, 100}, {10_000, 10}} {
		b.Run(fmt.Sprintf("roles=%d/candidates=%d", size.roles, size.cands), func(b *testing.B) {
			v := lookupView(b, size.roles, size.cands)
			ctx := context.Background()
			now := time.UnixMilli(1_700_000_001_000)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, held, err := v.Holder(ctx, "role-00042", now)
				if err != nil || !held {
					b.Fatal(held, err)
				}
			}
		})
	}
}

func BenchmarkCandidates(b *testing.B) {
	for _, size := range []struct{ roles, cands int }{{100, 100}, {10_000, 100}, {10_000, 10}} {
		b.Run(fmt.Sprintf("roles=%d/candidates=%d", size.roles, size.cands), func(b *testing.B) {
			v := lookupView(b, size.roles, size.cands)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cs, err := v.Candidates(ctx, "role-00042")
				if err != nil || len(cs) != size.cands {
					b.Fatal(len(cs), err)
				}
			}
		})
	}
}

// BenchmarkWatchLatency measures the hot path of a waiting candidate: from
// the start of a write until a Watch subscriber holds the change. The lease
// case includes the transaction (begin, produce, commit) itself.
func BenchmarkWatchLatency(b *testing.B) {
	c := testcluster.Start(b, testcluster.Options{Partitions: 3})
	w := newWriter(b, c, 3)
	tp := w.txnProducer("bench")
	v, _ := runView(b, c.Config, Options{})
	caughtUp(b, v)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const role = codec.Role("hot")
	ch := v.Watch(ctx, role)
	wait := func(b *testing.B) {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			b.Fatal("no change delivered")
		}
	}
	now := time.UnixMilli(1_700_000_000_000)
	n := 0 // every lease differs from the last, or there is no change to see
	b.Run("lease-txn", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			n++
			w.lease(tp, role, mkLease("a", 1, now, time.Duration(n)*time.Millisecond+time.Hour), true)
			wait(b)
		}
	})
	b.Run("register", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			w.register(role, codec.MemberID(fmt.Sprintf("m%d", i%2)))
			wait(b)
		}
	})
}

// BenchmarkFirstRecordAfterCatchUp measures a view's first moments: a new
// view is started, WaitCaughtUp returns, and a registration is written at
// once; the figure is from the start of that write until a Watch
// subscriber holds the change (first-record-ms), beside the time from Run
// to WaitCaughtUp's return (catch-up-ms). Each iteration starts a cluster
// and a view, so the timer runs over the whole iteration and ns/op is
// suppressed. Run it with a fixed count:
//
//	go test -run '^$' -bench FirstRecordAfterCatchUp -benchtime 10x ./view/
//
// "with-records": every partition holds a record when the view starts, so
// its first catch-up proves that the consumer that follows the topic is
// fetching. "empty": the partitions are empty, which the first catch-up
// cannot prove (see docs/DESIGN.md, "The view: catching up").
func BenchmarkFirstRecordAfterCatchUp(b *testing.B) {
	for _, prefill := range []bool{true, false} {
		name := "empty"
		if prefill {
			name = "with-records"
		}
		b.Run(name, func(b *testing.B) {
			var first, worst, catchUp time.Duration
			for i := 0; i < b.N; i++ {
				c := testcluster.Start(b, testcluster.Options{Partitions: 3})
				w := newWriter(b, c, 3)
				if prefill {
					for p, rs := range rolesInPartitions("pre", 3, 1) {
						require.Equal(b, p, w.part(rs[0]))
						w.register(rs[0], "x")
					}
				}
				start := time.Now()
				v, stop := runView(b, c.Config, Options{})
				caughtUp(b, v)
				catchUp += time.Since(start)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				ch := v.Watch(ctx, "hot")
				t0 := time.Now()
				w.register("hot", "m")
				select {
				case <-ch:
				case <-ctx.Done():
					b.Fatal("no change delivered")
				}
				d := time.Since(t0)
				first += d
				worst = max(worst, d)
				cancel()
				stop()
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "first-record-ms")
			b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
			b.ReportMetric(float64(catchUp.Microseconds())/1000/float64(b.N), "catch-up-ms")
		})
	}
}

// BenchmarkApply measures the view's own work per record, without Kafka:
// decoding a record and folding it into the index, for the shape of
// BenchmarkRestore (benchRoles() roles x 100 registrations, interleaved,
// then a lease per role), in memory, with no subscriber. One op is one
// whole table. "update" hands View.update one record at a time (decoding
// in the callback); "chunk" decodes chunks as the view's consumer does and
// hands View.update one chunk message each, as a running view's goka does;
// "decode" is codec.DecodeKey and codec.DecodeRecord alone over the same
// records.
func BenchmarkApply(b *testing.B) {
	const nparts = 3
	roles := benchRoles()
	type rec struct {
		p     int32
		key   string
		value []byte
	}
	var recs []rec
	name := func(i int) codec.Role { return codec.Role(fmt.Sprintf("role-%05d", i)) }
	for m := 0; m < benchRegsPerRole; m++ {
		member := codec.MemberID(fmt.Sprintf("member-%03d", m))
		val, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: member, RegisteredAt: 1_700_000_000_000 + int64(m)}})
		require.NoError(b, err)
		for r := 0; r < roles; r++ {
			recs = append(recs, rec{codec.Partition(name(r), nparts), codec.RegistrationKey(name(r), member).String(), val})
		}
	}
	l := mkLease("member-000", 1, time.UnixMilli(1_700_000_000_000), time.Hour)
	lval, err := codec.EncodeRecord(codec.Record{Lease: &l})
	require.NoError(b, err)
	for r := 0; r < roles; r++ {
		recs = append(recs, rec{codec.Partition(name(r), nparts), codec.LeaseKey(name(r)).String(), lval})
	}
	perRecord := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/record")
		b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("update", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			v, err := New(Options{Config: fencing.Config{Brokers: []string{"127.0.0.1:1"}}})
			require.NoError(b, err)
			v.setOffline(nparts)
			next := make([]int64, nparts)
			b.StartTimer()
			for _, r := range recs {
				if err := v.update(updateCtx{p: r.p, off: next[r.p]}, nil, r.key, r.value); err != nil {
					b.Fatal(err)
				}
				next[r.p]++
			}
			b.StopTimer()
			require.Len(b, v.index.roles, roles)
			v.stop()
			b.StartTimer()
		}
		perRecord(b)
	})
	// "chunk" is the path a running view takes: the consumer's fetch
	// goroutine decodes each fetched chunk (here 1,000 records of a
	// partition) and goka hands the update callback one chunk message.
	const chunkLen = 1000
	type chunk struct {
		p    int32
		recs []fetched
	}
	var chunks []chunk
	{
		next := make([]int64, nparts)
		open := make([]*chunk, nparts)
		rb := &sarama.RecordBatch{ProducerID: 1, ProducerEpoch: 1, IsTransactional: true}
		for _, r := range recs {
			if open[r.p] == nil {
				open[r.p] = &chunk{p: r.p}
			}
			c := open[r.p]
			c.recs = append(c.recs, fetched{off: next[r.p], rb: rb, r: &sarama.Record{Key: []byte(r.key), Value: r.value}})
			next[r.p]++
			if len(c.recs) == chunkLen {
				chunks, open[r.p] = append(chunks, *c), nil
			}
		}
		for _, c := range open {
			if c != nil {
				chunks = append(chunks, *c)
			}
		}
	}
	b.Run("chunk", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			v, err := New(Options{Config: fencing.Config{Brokers: []string{"127.0.0.1:1"}}})
			require.NoError(b, err)
			v.setOffline(nparts)
			v.predecode = newPredecoder(v, v.partIDs)
			b.StartTimer()
			for _, c := range chunks {
				require.True(b, v.prepare(v.topic, c.p, c.recs))
				m := chunkMessage(v.topic, c.p, c.recs)
				uc := chunkCtx{updateCtx: updateCtx{p: c.p, off: m.Offset}, hdrs: goka.HeadersFromSarama(m.Headers)}
				if err := v.update(uc, nil, "", nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			require.Len(b, v.index.roles, roles)
			v.stop()
			b.StartTimer()
		}
		perRecord(b)
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			for _, r := range recs {
				if _, err := codec.DecodeKey([]byte(r.key)); err != nil {
					b.Fatal(err)
				}
				if _, err := codec.DecodeRecord(r.value); err != nil {
					b.Fatal(err)
				}
			}
		}
		perRecord(b)
	})
}

// cpuTime is the CPU time (user and system) the test process has used: the
// cluster's, the view's and the writer's, all in-process. Unlike wall time
// it hardly depends on the machine's other load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPublishFollowed measures applying one lease record of a role
// while K roles are followed (one subscriber per role, as a member's
// Follow of each of its roles makes) and one subscriber watches every
// role: the cost per record must not grow with K (it must not walk all K
// subscribers). One op is one record applied and taken by its two
// subscribers.
func BenchmarkPublishFollowed(b *testing.B) {
	for _, k := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			ix := newIndex(time.Now)
			subs := make([]*subscriber, k)
			for i := range subs {
				subs[i] = &subscriber{filter: map[codec.Role]bool{codec.Role(fmt.Sprintf("role-%05d", i)): true},
					pending: map[codec.Role]*pendingChange{}, wake: make(chan struct{}, 1)}
				ix.addSub(subs[i])
			}
			all := &subscriber{pending: map[codec.Role]*pendingChange{}, wake: make(chan struct{}, 1)}
			ix.addSub(all)
			role := codec.Role("role-00000")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l := mkLease("member-000", 1, time.UnixMilli(1_700_000_000_000+int64(i)), time.Hour)
				ix.apply(0, codec.LeaseKey(role), codec.Record{Lease: &l}, int64(i))
				if _, ok := ix.next(subs[0]); !ok {
					b.Fatal("the role's follower got no change")
				}
				if _, ok := ix.next(all); !ok {
					b.Fatal("the watcher of every role got no change")
				}
			}
		})
	}
}
