// Package sqlfence has PostgreSQL or MySQL/MariaDB refuse the writes of a
// role's holder once a newer holding of the role has written, by the
// holding's fencing number. It uses database/sql and imports no driver.
//
//	f, err := sqlfence.New(db) // the dialect is pgx's, lib/pq's or go-sql-driver/mysql's
//	defer f.Close()            // its prepared statements
//	err = f.CreateTable(ctx)   // once; idempotent
//	h := sqlfence.Holding{Role: "billing", Number: number, Holder: "node-1"}
//	err = f.Do(ctx, h, func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO invoices ...")
//		return err
//	})
//	if errors.Is(err, sqlfence.ErrStale) { ... } // deposed: nothing was written
//
// # The fence
//
// A fence table holds a row per role: the largest number that has written
// and its holder. [Fence.Do] begins a transaction whose first statement
// locks the role's row and compares: a smaller number is raised to the
// holding's, the holding's own number and holder let it through, and a
// larger number ([ErrStale]) or the same number under another holder
// ([ErrNumberReused]) roll the transaction back before fn runs. The lock
// is held until the transaction ends, so fn's statements commit or roll
// back with the fence's verdict.
//
// The guarantee: of two transactions of one role that commit through Do on
// one fence table, the one with the smaller number committed before the
// other took the row's lock. So a role's committed writes are in the order
// of its holdings, and once a holding has committed a Do, every Do of an
// older one is refused. It rests on the numbers (each holding's exceeds
// every earlier one's) and on the row lock, held to commit, with a locking
// read that sees the latest committed row (PostgreSQL at READ COMMITTED,
// InnoDB at every level).
//
// A deposed holder is refused only once its successor has written to the
// table (or holds the row's lock): until then its writes still commit,
// ordered before all of the successor's. A new holder that wants its
// predecessor refused at once calls Do with a nil fn when it takes the role.
//
// # Isolation
//
// Do's transactions run at the level [WithIsolation] sets (the server's
// default by default). At PostgreSQL's REPEATABLE READ and SERIALIZABLE a
// fence row written by another transaction after this one's snapshot gives
// a serialization failure (SQLSTATE 40001) instead of the newer row: Do
// then begins again in a new transaction, where it reads the newer row
// (up to 4 transactions, before fn runs). A conflict after fn ran (fn's
// own statements, or the commit) is returned, matching [ErrConflict],
// unless [WithConflictRetries] allows Do to run fn again.
//
// # Cost and concurrency
//
// Do adds one statement to the transaction while the holding stays the
// same: a read under a shared lock, so one holding's transactions run side
// by side. A new holding's first Do writes its number under an exclusive
// lock instead. MySQL's first Do of a role also creates the row, in a
// transaction of its own. Statements are prepared once per connection.

// # What it does not cover
//
// Writes that do not go through Do (another connection, a trigger, an
// operator) are not fenced, nor are writes to other databases. Each fence
// table orders its own writers only. If fn fails, the transaction rolls
// back, fence row included: a holding that has committed nothing has not
// raised the row. When the role's numbers start over (its topic was
// recreated), Do refuses the new holdings, with [ErrNumberReused] or
// [ErrStale], until the operator resets the row ([Fence.Reset]).
package sqlfence
