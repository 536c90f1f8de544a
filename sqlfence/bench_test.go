package sqlfence_test

import (
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/krabka/krole/internal/testdb"
	"github.com/krabka/krole/sqlfence"
)

// BenchmarkFence measures transactions that insert one row, on each server:
//   - one-at-a-time: each iteration runs, in turn, the plain transaction
//     (BEGIN, INSERT, COMMIT), the same fenced by a holding that has
//     written before (the shared-lock path), and fenced by a new holding
//     (the write path), so that the three share the machine's noise; it
//     reports each one's median and 99th percentile;
//   - 8-goroutines: plain, fenced, and fenced by a new Fence each time (the
//     exclusive path, which a known holding avoids), from 8 goroutines.
//
// BENCH_MYSQL_PARAMS adds DSN parameters for MariaDB (say
// "&interpolateParams=true").
//
// postgres-durable is a PostgreSQL server with its default durability
// (every commit flushed to disk), where the test servers run with fsync
// off.
//
//	go test -run '^$' -bench BenchmarkFence -benchtime 5000x ./sqlfence
func BenchmarkFence(b *testing.B) {
	durable := []struct {
		name  string
		start func(testing.TB) *testdb.Server
	}{{"postgres-durable", testdb.DurablePostgres}}
	for _, s := range append(servers, durable...) {
		b.Run(s.name, func(b *testing.B) {
			srv := s.start(b)
			e := env{name: s.name, srv: srv, db: srv.Open(b)}
			if p := os.Getenv("BENCH_MYSQL_PARAMS"); p != "" && !e.pg() {
				db, err := sql.Open(srv.Driver, srv.DSN+p)
				must(b, err)
				b.Cleanup(func() { db.Close() })
				e.db = db
			}
			e.db.SetMaxIdleConns(16)
			table, data := e.tables(b)
			f := e.fenceOn(b, table)
			insert := e.q("INSERT INTO " + data + " (id, number) VALUES (?, ?)")
			var ids atomic.Int64
			write := func(tx *sql.Tx) error {
				_, err := tx.Exec(insert, fmt.Sprint(ids.Add(1)), 1)
				return err
			}
			plain := func() error {
				tx, err := e.db.BeginTx(ctx(b), nil)
				if err != nil {
					return err
				}
				if err := write(tx); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			}
			held := sqlfence.Holding{Role: "bench", Number: 1, Holder: "m1"}
			fenced := func() error { return f.Do(ctx(b), held, write) }
			var number atomic.Int64
			newHolding := func() error {
				return f.Do(ctx(b), sqlfence.Holding{Role: "bench-new", Number: number.Add(1), Holder: "m1"}, write)
			}
			exclusive := func() error {
				g, err := sqlfence.New(e.db, sqlfence.WithTable(table))
				if err != nil {
					return err
				}
				return g.Do(ctx(b), held, write)
			}
			ops := []struct {
				name string
				op   func() error
			}{{"plain", plain}, {"fenced", fenced}, {"new-holding", newHolding}}
			warm := func(op func() error) {
				for range 100 {
					must(b, op())
				}
			}

			b.Run("one-at-a-time", func(b *testing.B) {
				for _, o := range ops {
					warm(o.op)
				}
				times := make([][]time.Duration, len(ops))
				for i := 0; b.Loop(); i++ {
					for j := range ops {
						k := (i + j) % len(ops)
						start := time.Now()
						must(b, ops[k].op())
						times[k] = append(times[k], time.Since(start))
					}
				}
				for k, o := range ops {
					reportPercentiles(b, o.name+"-", times[k])
				}
			})
			for _, o := range []struct {
				name string
				op   func() error
			}{{"plain", plain}, {"fenced", fenced}, {"fenced-exclusive", exclusive}} {
				b.Run("8-goroutines/"+o.name, func(b *testing.B) {
					warm(o.op)
					b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0))) // 8 goroutines
					var mu sync.Mutex
					var all []time.Duration
					b.RunParallel(func(pb *testing.PB) {
						var mine []time.Duration
						for pb.Next() {
							start := time.Now()
							if err := o.op(); err != nil {
								b.Error(err)
								return
							}
							mine = append(mine, time.Since(start))
						}
						mu.Lock()
						all = append(all, mine...)
						mu.Unlock()
					})
					reportPercentiles(b, "", all)
				})
			}
		})
	}
}

// reportPercentiles reports the median and 99th percentile of ds in µs.
func reportPercentiles(b *testing.B, prefix string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), prefix+"p50-µs")
	b.ReportMetric(at(0.99), prefix+"p99-µs")
}
