package sqlfence_test

import (
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/krabka/krole/internal/testdb"
	"github.com/krabka/krole/sqlfence"
)

// TestDeadlockInFn: two transactions of one holding lock two rows in
// opposite orders; the database aborts one (PostgreSQL 40P01, MariaDB's
// 1213 with SQLSTATE 40001). Without reruns its Do returns ErrConflict and
// wrote nothing; with them, fn runs again and both commit.
func TestDeadlockInFn(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		for _, reruns := range []int{0, 2} {
			f, data := e.fence(t, sqlfence.WithConflictRetries(reruns))
			h := sqlfence.Holding{Role: "r", Number: 1, Holder: "m1"}
			must(t, f.Do(ctx(t), h, nil)) // known: both take the shared lock
			e.exec(t, "INSERT INTO "+data+" (id, number) VALUES ('x', 0), ('y', 0)")
			update := e.q("UPDATE " + data + " SET seq = seq + 1 WHERE id = ?")
			var runs atomic.Int32
			lockBoth := func(first, second string, mine, theirs chan struct{}) func(*sql.Tx) error {
				var once atomic.Bool
				return func(tx *sql.Tx) error {
					runs.Add(1)
					if _, err := tx.Exec(update, first); err != nil {
						return err
					}
					if once.CompareAndSwap(false, true) {
						close(mine)
					}
					<-theirs
					_, err := tx.Exec(update, second)
					return err
				}
			}
			xIn, yIn := make(chan struct{}), make(chan struct{})
			errs := make(chan error, 2)
			go func() { errs <- f.Do(ctx(t), h, lockBoth("x", "y", xIn, yIn)) }()
			go func() { errs <- f.Do(ctx(t), h, lockBoth("y", "x", yIn, xIn)) }()
			err1, err2 := <-errs, <-errs
			var seqX, seqY int64
			must(t, e.db.QueryRow("SELECT seq FROM "+data+" WHERE id = 'x'").Scan(&seqX))
			must(t, e.db.QueryRow("SELECT seq FROM "+data+" WHERE id = 'y'").Scan(&seqY))
			if reruns == 0 {
				failed := err1
				if err1 == nil {
					failed = err2
				}
				if (err1 == nil) == (err2 == nil) || !errors.Is(failed, sqlfence.ErrConflict) || !sqlfence.IsConflict(failed) {
					t.Fatalf("no reruns: Do returned %v and %v, want nil and ErrConflict", err1, err2)
				}
				if seqX != 1 || seqY != 1 || runs.Load() != 2 {
					t.Fatalf("no reruns: x %d, y %d after %d runs of fn; want the one commit's 1 each, after 2", seqX, seqY, runs.Load())
				}
				t.Logf("no reruns: %v", failed)
				continue
			}
			must(t, err1)
			must(t, err2)
			if seqX != 2 || seqY != 2 || runs.Load() < 3 {
				t.Fatalf("reruns: x %d, y %d after %d runs of fn; want 2 each, after 3 or more", seqX, seqY, runs.Load())
			}
		}
	})
}

// TestPostgresRepeatableReadConflictInFn: at REPEATABLE READ, fn's update
// of a row changed since its snapshot fails with 40001: ErrConflict, or a
// rerun that sees the change.
func TestPostgresRepeatableReadConflictInFn(t *testing.T) {
	e := env{name: "postgres", srv: testdb.Postgres(t)}
	e.db = e.srv.Open(t)
	for _, reruns := range []int{0, 1} {
		f, data := e.fence(t, sqlfence.WithIsolation(sql.LevelRepeatableRead), sqlfence.WithConflictRetries(reruns))
		e.exec(t, "INSERT INTO "+data+" (id, number) VALUES ('x', 0)")
		h := sqlfence.Holding{Role: "r", Number: 1, Holder: "m1"}
		var runs atomic.Int32
		err := f.Do(ctx(t), h, func(tx *sql.Tx) error {
			var n int64
			if err := tx.QueryRow("SELECT number FROM " + data + " WHERE id = 'x'").Scan(&n); err != nil {
				return err
			}
			if runs.Add(1) == 1 { // another transaction changes x after the snapshot
				if _, err := e.db.Exec("UPDATE " + data + " SET number = 10 WHERE id = 'x'"); err != nil {
					return err
				}
			}
			_, err := tx.Exec("UPDATE "+data+" SET number = $1 WHERE id = 'x'", n+1)
			return err
		})
		var n int64
		must(t, e.db.QueryRow("SELECT number FROM "+data+" WHERE id = 'x'").Scan(&n))
		if reruns == 0 {
			if !errors.Is(err, sqlfence.ErrConflict) || n != 10 {
				t.Fatalf("no reruns: Do: %v, x %d; want ErrConflict, 10", err, n)
			}
			if _, _, ok := e.row(t, f, "r"); ok {
				t.Fatal("no reruns: the fence row was written by a transaction that rolled back")
			}
			continue
		}
		if err != nil || n != 11 || runs.Load() != 2 {
			t.Fatalf("one rerun: Do: %v, x %d after %d runs; want nil, 11, 2", err, n, runs.Load())
		}
	}
}
