package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/krabka/krole/internal/testdb"
	"github.com/krabka/krole/sqlfence"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantIDs fails t unless data holds exactly ids.
func (e env) wantIDs(t *testing.T, data string, ids ...string) {
	t.Helper()
	got := e.ids(t, data)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows of %s: %v, want %v", data, got, want)
	}
}

// wantStale fails t unless err is a *StaleError of held against (number, holder).
func wantStale(t *testing.T, err error, held sqlfence.Holding, number int64, holder string) {
	t.Helper()
	var se *sqlfence.StaleError
	if !errors.Is(err, sqlfence.ErrStale) || !errors.As(err, &se) {
		t.Fatalf("Do: %v, want ErrStale", err)
	}
	if se.Held != held || se.Number != number || se.Holder != holder {
		t.Fatalf("StaleError %+v, want Held %+v, Number %d, Holder %q", *se, held, number, holder)
	}
}

func TestAdvanceAndWrite(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, data := e.fence(t)
		h1 := sqlfence.Holding{Role: "billing", Number: 5, Holder: "m1"}
		must(t, f.Do(ctx(t), h1, e.insert(data, "a", 5)))
		e.wantRow(t, f, "billing", 5, "m1")
		h2 := sqlfence.Holding{Role: "billing", Number: 9, Holder: "m2"}
		must(t, f.Do(ctx(t), h2, e.insert(data, "b", 9)))
		e.wantRow(t, f, "billing", 9, "m2")
		// Roles are fenced apart.
		must(t, f.Do(ctx(t), sqlfence.Holding{Role: "other", Number: 1, Holder: "m3"}, e.insert(data, "c", 1)))
		e.wantRow(t, f, "other", 1, "m3")
		e.wantRow(t, f, "billing", 9, "m2")
		e.wantIDs(t, data, "a", "b", "c")
		// A nil fn only fences.
		must(t, f.Do(ctx(t), sqlfence.Holding{Role: "billing", Number: 12, Holder: "m4"}, nil))
		e.wantRow(t, f, "billing", 12, "m4")
		must(t, f.CreateTable(ctx(t))) // idempotent
		// Close releases the prepared statements; Do prepares them again.
		must(t, f.Close())
		must(t, f.Do(ctx(t), sqlfence.Holding{Role: "billing", Number: 12, Holder: "m4"}, e.insert(data, "d", 12)))
		must(t, f.Close())
		e.wantIDs(t, data, "a", "b", "c", "d")
	})
}

// A pool of one connection serves Do: the fence's statements are prepared
// before its transaction takes the connection, for every statement path
// (a new holding, a known one, a stale one).
func TestOneConnectionPool(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		table, data := e.tables(t)
		db := e.srv.Open(t)
		db.SetMaxOpenConns(1)
		f, err := sqlfence.New(db, sqlfence.WithTable(table))
		must(t, err)
		must(t, f.CreateTable(ctx(t)))
		c, cancel := context.WithTimeout(ctx(t), 20*time.Second)
		defer cancel()
		h := sqlfence.Holding{Role: "pool", Number: 3, Holder: "m1"}
		must(t, f.Do(c, h, e.insert(data, "a", 3)))
		must(t, f.Do(c, h, e.insert(data, "b", 3)))
		err = f.Do(c, sqlfence.Holding{Role: "pool", Number: 2, Holder: "m0"}, e.insert(data, "c", 2))
		if !errors.Is(err, sqlfence.ErrStale) {
			t.Fatalf("an older holding on a one-connection pool: got %v, want ErrStale", err)
		}
		must(t, f.Close())
		e.wantIDs(t, data, "a", "b")
	})
}

func TestStaleRefused(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, data := e.fence(t)
		old := sqlfence.Holding{Role: "r", Number: 5, Holder: "m1"}
		newer := sqlfence.Holding{Role: "r", Number: 9, Holder: "m2"}
		must(t, f.Do(ctx(t), old, e.insert(data, "old-1", 5)))
		must(t, e.fenceOn(t, f.Table()).Do(ctx(t), newer, e.insert(data, "new-1", 9)))
		// f remembers old (a shared lock first); a new Fence does not (a write first).
		for name, g := range map[string]*sqlfence.Fence{"known": f, "unknown": e.fenceOn(t, f.Table())} {
			ran := false
			err := g.Do(ctx(t), old, func(tx *sql.Tx) error {
				ran = true
				return e.insert(data, "old-2-"+name, 5)(tx)
			})
			wantStale(t, err, old, 9, "m2")
			if ran {
				t.Fatalf("%s: fn ran for a stale holding", name)
			}
		}
		e.wantIDs(t, data, "old-1", "new-1")
		e.wantRow(t, f, "r", 9, "m2")
	})
}

// TestWithoutCheckTheStaleWriteLands runs TestStaleRefused's stale write
// with the number check taken out: it lands, so the check is what refuses it.
func TestWithoutCheckTheStaleWriteLands(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, data := e.fence(t, sqlfence.WithoutCheck())
		old := sqlfence.Holding{Role: "r", Number: 5, Holder: "m1"}
		must(t, f.Do(ctx(t), old, e.insert(data, "old-1", 5)))
		must(t, e.fenceOn(t, f.Table()).Do(ctx(t), sqlfence.Holding{Role: "r", Number: 9, Holder: "m2"}, e.insert(data, "new-1", 9)))
		must(t, e.fenceOn(t, f.Table(), sqlfence.WithoutCheck()).Do(ctx(t), old, e.insert(data, "old-2", 5)))
		e.wantIDs(t, data, "old-1", "new-1", "old-2")
		e.wantRow(t, f, "r", 5, "m1")
	})
}

// TestOlderBlockedByNewer: an older holding whose fence waits for the row
// lock of a newer holding's open transaction is refused once that commits,
// at every isolation level, on the shared and exclusive paths. PostgreSQL
// gets there through a serialization failure above READ COMMITTED; InnoDB's
// locking reads see the newer row at every level, with MariaDB's
// innodb_snapshot_isolation too (the default from 11.8): the fence's
// statement comes before any read view.
func TestOlderBlockedByNewer(t *testing.T) {
	type level struct {
		name    string
		level   sql.IsolationLevel
		mariadb string // DSN parameters, MariaDB only
	}
	levels := []level{
		{"default", sql.LevelDefault, ""},
		{"read-committed", sql.LevelReadCommitted, ""},
		{"repeatable-read", sql.LevelRepeatableRead, ""},
		{"serializable", sql.LevelSerializable, ""},
	}
	each(t, func(t *testing.T, e env) {
		levels := levels
		if !e.pg() {
			levels = append(levels, level{"repeatable-read-snapshot-isolation", sql.LevelRepeatableRead, "&innodb_snapshot_isolation=ON"})
		}
		for _, lv := range levels {
			for _, path := range []string{"shared", "exclusive"} {
				t.Run(lv.name+"/"+path, func(t *testing.T) {
					e := e
					if lv.mariadb != "" {
						db, err := sql.Open(e.srv.Driver, e.srv.DSN+lv.mariadb)
						must(t, err)
						t.Cleanup(func() { db.Close() })
						var on string
						must(t, db.QueryRow("SELECT @@innodb_snapshot_isolation").Scan(&on))
						if on != "1" {
							t.Fatalf("innodb_snapshot_isolation is %q", on)
						}
						e.db = db
					}
					table, data := e.tables(t)
					var retried []error
					older := e.fenceOn(t, table, sqlfence.WithIsolation(lv.level),
						sqlfence.WithOnRetry(func(err error) { retried = append(retried, err) }))
					newer := e.fenceOn(t, table, sqlfence.WithIsolation(lv.level))
					oldH := sqlfence.Holding{Role: "r", Number: 1, Holder: "m1"}
					newH := sqlfence.Holding{Role: "r", Number: 2, Holder: "m2"}
					must(t, older.Do(ctx(t), oldH, e.insert(data, "old-1", 1)))
					if path == "exclusive" { // a Fence that has not seen oldH commit writes first
						older = e.fenceOn(t, table, sqlfence.WithIsolation(lv.level),
							sqlfence.WithOnRetry(func(err error) { retried = append(retried, err) }))
					}

					inside := make(chan struct{})
					release, free := releaser(t)
					newDone := make(chan error, 1)
					go func() {
						newDone <- newer.Do(ctx(t), newH, func(tx *sql.Tx) error {
							if err := e.insert(data, "new", 2)(tx); err != nil {
								return err
							}
							close(inside)
							<-release
							return nil
						})
					}()
					select {
					case <-inside:
					case err := <-newDone:
						t.Fatalf("newer Do: %v", err)
					}
					var ran atomic.Bool
					oldDone := make(chan error, 1)
					go func() {
						oldDone <- older.Do(ctx(t), oldH, func(tx *sql.Tx) error {
							ran.Store(true)
							return e.insert(data, "old-2", 1)(tx)
						})
					}()
					e.waitLockWait(t, table, oldDone)
					free()
					must(t, <-newDone)
					wantStale(t, <-oldDone, oldH, 2, "m2")
					if ran.Load() {
						t.Fatal("fn ran for the stale holding")
					}
					e.wantIDs(t, data, "old-1", "new")

					upgraded := e.pg() && (lv.level == sql.LevelRepeatableRead || lv.level == sql.LevelSerializable)
					switch {
					case upgraded && len(retried) == 0:
						t.Fatal("PostgreSQL above READ COMMITTED: no serialization failure was retried")
					case !upgraded && len(retried) > 0:
						t.Fatalf("retried %v", retried)
					}
					for _, err := range retried {
						if !sqlfence.IsConflict(err) {
							t.Fatalf("retried a non-conflict: %v", err)
						}
					}
					t.Logf("retried %d", len(retried))
				})
			}
		}
	})
}

func TestSameNumberOtherHolder(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, data := e.fence(t)
		h := sqlfence.Holding{Role: "r", Number: 5, Holder: "m1"}
		other := sqlfence.Holding{Role: "r", Number: 5, Holder: "m2"}
		must(t, f.Do(ctx(t), h, e.insert(data, "h", 5)))
		for name, g := range map[string]*sqlfence.Fence{"known": f, "unknown": e.fenceOn(t, f.Table())} {
			ran := false
			err := g.Do(ctx(t), other, func(tx *sql.Tx) error { ran = true; return nil })
			var re *sqlfence.ReusedError
			if !errors.Is(err, sqlfence.ErrNumberReused) || !errors.As(err, &re) || errors.Is(err, sqlfence.ErrStale) {
				t.Fatalf("%s: Do: %v, want ErrNumberReused", name, err)
			}
			if re.Held != other || re.Holder != "m1" || ran {
				t.Fatalf("%s: ReusedError %+v (fn ran: %v)", name, *re, ran)
			}
		}
		e.wantRow(t, f, "r", 5, "m1")
		// The operator resets the row: the new numbering writes.
		must(t, f.Reset(ctx(t), "r"))
		if _, _, ok := e.row(t, f, "r"); ok {
			t.Fatal("Reset left the row")
		}
		must(t, f.Do(ctx(t), other, e.insert(data, "other", 5)))
		e.wantRow(t, f, "r", 5, "m2")
		e.wantIDs(t, data, "h", "other")
	})
}

func TestReentry(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, data := e.fence(t)
		h := sqlfence.Holding{Role: "r", Number: 7, Holder: "m1"}
		must(t, f.Do(ctx(t), h, e.insert(data, "1", 7)))
		must(t, f.Do(ctx(t), h, e.insert(data, "2", 7)))
		must(t, e.fenceOn(t, f.Table()).Do(ctx(t), h, e.insert(data, "3", 7))) // the exclusive path
		e.wantIDs(t, data, "1", "2", "3")
		e.wantRow(t, f, "r", 7, "m1")
	})
}

// TestSameHoldingSideBySide: transactions of a holding that has committed
// before run at the same time (a shared lock each).
func TestSameHoldingSideBySide(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, data := e.fence(t)
		h := sqlfence.Holding{Role: "r", Number: 3, Holder: "m1"}
		must(t, f.Do(ctx(t), h, nil))
		aIn, bIn := make(chan struct{}), make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			aDone <- f.Do(ctx(t), h, func(tx *sql.Tx) error {
				close(aIn)
				select {
				case <-bIn:
				case <-time.After(10 * time.Second):
					return errors.New("the second transaction did not get in while the first was open")
				}
				return e.insert(data, "a", 3)(tx)
			})
		}()
		<-aIn
		must(t, f.Do(ctx(t), h, func(tx *sql.Tx) error {
			close(bIn)
			return e.insert(data, "b", 3)(tx)
		}))
		must(t, <-aDone)
		e.wantIDs(t, data, "a", "b")
	})
}

func TestFnErrorRollsBack(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, data := e.fence(t)
		must(t, f.Do(ctx(t), sqlfence.Holding{Role: "r", Number: 5, Holder: "a"}, e.insert(data, "a", 5)))
		boom := errors.New("boom")
		err := f.Do(ctx(t), sqlfence.Holding{Role: "r", Number: 7, Holder: "b"}, func(tx *sql.Tx) error {
			if err := e.insert(data, "b", 7)(tx); err != nil {
				return err
			}
			return boom
		})
		if err != boom {
			t.Fatalf("Do: %v, want fn's error as it is", err)
		}
		// The fence row rolled back with fn's writes: 5 still writes.
		e.wantRow(t, f, "r", 5, "a")
		must(t, f.Do(ctx(t), sqlfence.Holding{Role: "r", Number: 6, Holder: "c"}, e.insert(data, "c", 6)))
		e.wantIDs(t, data, "a", "c")
		e.wantRow(t, f, "r", 6, "c")
	})
}

func TestCancelledWhileBlocked(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, data := e.fence(t)
		oldH := sqlfence.Holding{Role: "r", Number: 1, Holder: "m1"}
		must(t, f.Do(ctx(t), oldH, nil))
		inside := make(chan struct{})
		release, free := releaser(t)
		newDone := make(chan error, 1)
		go func() {
			newDone <- e.fenceOn(t, f.Table()).Do(ctx(t), sqlfence.Holding{Role: "r", Number: 2, Holder: "m2"}, func(tx *sql.Tx) error {
				close(inside)
				<-release
				return nil
			})
		}()
		<-inside
		c, cancel := contextWithCancel(t)
		oldDone := make(chan error, 1)
		go func() { oldDone <- f.Do(c, oldH, e.insert(data, "old", 1)) }()
		e.waitLockWait(t, f.Table(), oldDone)
		cancel()
		if err := <-oldDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Do: %v", err)
		} else {
			t.Logf("cancelled Do: %v", err)
		}
		free()
		must(t, <-newDone)
		e.wantIDs(t, data)
		e.wantRow(t, f, "r", 2, "m2")
	})
}

// TestMySQLClientFoundRows: with clientFoundRows in the DSN, MySQL counts
// matched rows rather than changed ones; the fence does not depend on
// which.
func TestMySQLClientFoundRows(t *testing.T) {
	srv := testdb.MariaDB(t)
	db, err := sql.Open(srv.Driver, srv.DSN+"&clientFoundRows=true")
	must(t, err)
	t.Cleanup(func() { db.Close() })
	e := env{name: "mariadb", srv: srv, db: db}
	f, data := e.fence(t)
	h := sqlfence.Holding{Role: "r", Number: 4, Holder: "m1"}
	must(t, f.Do(ctx(t), h, e.insert(data, "1", 4)))
	must(t, e.fenceOn(t, f.Table()).Do(ctx(t), h, e.insert(data, "2", 4))) // equal, on the write path
	older := sqlfence.Holding{Role: "r", Number: 3, Holder: "m0"}
	wantStale(t, e.fenceOn(t, f.Table()).Do(ctx(t), older, e.insert(data, "3", 3)), older, 4, "m1")
	err = e.fenceOn(t, f.Table()).Do(ctx(t), sqlfence.Holding{Role: "r", Number: 4, Holder: "m2"}, e.insert(data, "4", 4))
	if !errors.Is(err, sqlfence.ErrNumberReused) {
		t.Fatalf("same number, other holder: %v", err)
	}
	e.wantIDs(t, data, "1", "2")
	e.wantRow(t, f, "r", 4, "m1")
}
