package sqlfence_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/krabka/krole/sqlfence"
)

// TestCommitOrder: goroutines write under random numbers of one role, each
// transaction taking a sequence number from a counter row it holds locked
// until it commits, so the sequence is the commit order. The committed
// numbers never decrease in that order, refused holdings wrote nothing,
// and the fence row ends at the largest committed number.
func TestCommitOrder(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		const goroutines, calls = 12, 12
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		table, data := e.tables(t)
		counter := "counter_" + table
		e.exec(t, "CREATE TABLE "+counter+" (id INT PRIMARY KEY, n BIGINT NOT NULL)")
		e.exec(t, "INSERT INTO "+counter+" (id, n) VALUES (1, 0)")
		// Three Fences, as three processes; each goroutine uses one.
		fences := []*sqlfence.Fence{e.fenceOn(t, table), e.fenceOn(t, table), e.fenceOn(t, table)}

		type result struct {
			id  string
			h   sqlfence.Holding
			err error
		}
		results := make(chan result, goroutines*calls)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(g)))
				f := fences[g%len(fences)]
				for c := range calls {
					n := int64(c)*3 + rng.Int64N(10) // holdings overlap, as when deposed holders lag
					h := sqlfence.Holding{Role: "r", Number: n, Holder: fmt.Sprintf("m%d", n)}
					id := fmt.Sprintf("%d-%d", g, c)
					err := f.Do(ctx(t), h, func(tx *sql.Tx) error {
						var seq int64
						if err := tx.QueryRow(e.q("SELECT n FROM " + counter + " WHERE id = 1 FOR UPDATE")).Scan(&seq); err != nil {
							return err
						}
						seq++
						if _, err := tx.Exec(e.q("UPDATE "+counter+" SET n = ? WHERE id = 1"), seq); err != nil {
							return err
						}
						_, err := tx.Exec(e.q("INSERT INTO "+data+" (id, number, seq) VALUES (?, ?, ?)"), id, n, seq)
						return err
					})
					results <- result{id, h, err}
				}
			}()
		}
		wg.Wait()
		close(results)

		committed := e.ids(t, data)
		var ok, refused int
		largest := int64(-1)
		for r := range results {
			var se *sqlfence.StaleError
			switch {
			case r.err == nil:
				ok++
				largest = max(largest, r.h.Number)
				if !committed[r.id] {
					t.Errorf("%s (number %d): Do returned nil, and its row is missing", r.id, r.h.Number)
				}
			case errors.As(r.err, &se):
				refused++
				if se.Number <= r.h.Number {
					t.Errorf("%s (number %d): stale against %d", r.id, r.h.Number, se.Number)
				}
				if committed[r.id] {
					t.Errorf("%s (number %d): refused, and its row is there", r.id, r.h.Number)
				}
			default:
				t.Errorf("%s: %v", r.id, r.err)
			}
		}

		rows, err := e.db.QueryContext(ctx(t), "SELECT seq, number FROM "+data)
		must(t, err)
		type commit struct{ seq, number int64 }
		var order []commit
		for rows.Next() {
			var c commit
			must(t, rows.Scan(&c.seq, &c.number))
			order = append(order, c)
		}
		must(t, rows.Err())
		rows.Close()
		sort.Slice(order, func(i, j int) bool { return order[i].seq < order[j].seq })
		distinct := 0
		for i := 1; i < len(order); i++ {
			if order[i].number < order[i-1].number {
				t.Errorf("commit %d wrote under %d after commit %d under %d", order[i].seq, order[i].number, order[i-1].seq, order[i-1].number)
			}
			if order[i].number != order[i-1].number {
				distinct++
			}
		}
		t.Logf("%d committed, %d refused, %d changes of number", ok, refused, distinct)
		if refused == 0 || distinct == 0 {
			t.Fatalf("the run tested nothing: %d refused, %d changes of number", refused, distinct)
		}
		var n int64
		var holder string
		n, holder, _ = e.row(t, fences[0], "r")
		if n != largest || holder != fmt.Sprintf("m%d", largest) {
			t.Errorf("fence row (%d, %q), want the largest committed number %d", n, holder, largest)
		}
	})
}

// TestFirstWritesAtOnce: many holdings write a role's first row at the
// same moment (MySQL creates it in transactions of their own); each Do
// commits or is refused as stale, nothing else.
func TestFirstWritesAtOnce(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, _ := e.fence(t)
		const roles, writers = 5, 16
		var wg sync.WaitGroup
		errs := make(chan error, roles*writers)
		for r := range roles {
			start := make(chan struct{})
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					h := sqlfence.Holding{Role: fmt.Sprintf("r%d", r), Number: int64(w), Holder: fmt.Sprintf("m%d", w)}
					if err := f.Do(ctx(t), h, nil); err != nil && !errors.Is(err, sqlfence.ErrStale) {
						errs <- err
					}
				}()
			}
			close(start)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for r := range roles {
			e.wantRow(t, f, fmt.Sprintf("r%d", r), writers-1, fmt.Sprintf("m%d", writers-1))
		}
	})
}
