package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Holding is one holding of a role, as its holder knows it.
type Holding struct {
	Role   string // 1 to 255 bytes
	Number int64  // the fencing number, >= 0, larger than every earlier holding's
	Holder string // the holder's member id, 1 to 255 bytes
}

func (h Holding) validate() error {
	switch {
	case len(h.Role) == 0 || len(h.Role) > 255:
		return invalid("role %q: 1 to 255 bytes", h.Role)
	case len(h.Holder) == 0 || len(h.Holder) > 255:
		return invalid("holder %q: 1 to 255 bytes", h.Holder)
	case h.Number < 0:
		return invalid("role %q: fencing number %d is negative", h.Role, h.Number)
	}
	return nil
}

// Fence fences the writes of a role's holdings to one fence table. It is
// safe for concurrent use.
type Fence struct {
	db      *sql.DB
	dialect Dialect
	table   string
	txOpts  *sql.TxOptions
	reruns  int
	check   bool
	onRetry func(error)
	sql     statements
	prep    prepared
	// known holds, per role, the last holding whose Do committed here: its
	// next Do starts with a shared lock instead of a write.
	known sync.Map
}

// New returns a Fence on db's table [DefaultTable] (see the options). It
// does no I/O; [Fence.CreateTable] creates the table.
func New(db *sql.DB, opts ...Option) (*Fence, error) {
	c := config{table: DefaultTable, isolation: sql.LevelDefault, check: true}
	for _, o := range opts {
		o(&c)
	}
	if c.dialect == 0 {
		if db == nil {
			return nil, invalid("no database")
		}
		d, err := detect(db)
		if err != nil {
			return nil, err
		}
		c.dialect = d
	}
	switch {
	case c.dialect != Postgres && c.dialect != MySQL:
		return nil, invalid("dialect %v", c.dialect)
	case !tableName.MatchString(c.table):
		return nil, invalid("table name %q: lower-case letters, digits and _, optionally schema.table", c.table)
	case c.reruns < 0:
		return nil, invalid("conflict retries %d", c.reruns)
	}
	switch c.isolation {
	case sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
	default:
		return nil, invalid("isolation level %v: use default, read committed, repeatable read or serializable", c.isolation)
	}
	f := &Fence{db: db, dialect: c.dialect, table: c.table, reruns: c.reruns, check: c.check, onRetry: c.onRetry,
		sql: statementsFor(c.dialect, c.table, c.check)}
	if c.isolation != sql.LevelDefault {
		f.txOpts = &sql.TxOptions{Isolation: c.isolation}
	}
	return f, nil
}

// Table returns the fence table's name.
func (f *Fence) Table() string { return f.table }

// Dialect returns the SQL dialect the Fence speaks.
func (f *Fence) Dialect() Dialect { return f.dialect }

// CreateTable creates the fence table unless it exists. It blocks for one
// statement.
func (f *Fence) CreateTable(ctx context.Context) error {
	if _, err := f.db.ExecContext(ctx, f.sql.create); err != nil {
		return fmt.Errorf("sqlfence: create table %s: %w", f.table, err)
	}
	return nil
}

// Reset deletes role's fence row, so that the next holding to call Do
// writes whatever its number: for the operator, once the role's numbers
// have started over and every holder of the old numbering has stopped.
func (f *Fence) Reset(ctx context.Context, role string) error {
	if _, err := f.db.ExecContext(ctx, f.sql.reset, role); err != nil {
		return fmt.Errorf("sqlfence: reset role %q: %w", role, err)
	}
	f.known.Delete(role)
	return nil
}

// Do runs fn in one transaction that first fences h: it raises the role's
// fence row to h.Number, or refuses with a [*StaleError] (a larger number
// has written) or a [*ReusedError] (another holder under h.Number) before
// fn runs. A nil fn only fences. Do commits when fn returns nil, and rolls
// back when fn returns an error, which Do returns as it is (wrapped in
// [ErrConflict] when it is a conflict). Do blocks until the transaction
// has ended; cancelling ctx rolls it back, and Do's error then matches
// ctx.Err(). As with any commit, an error from the commit itself may hide
// a commit that happened.
func (f *Fence) Do(ctx context.Context, h Holding, fn func(*sql.Tx) error) error {
	if err := h.validate(); err != nil {
		return err
	}
	err := f.do(ctx, h, fn)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// The driver may report a cancelled statement otherwise (a closed
		// connection, a finished transaction).
		err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return err
}

func (f *Fence) do(ctx context.Context, h Holding, fn func(*sql.Tx) error) error {
	for rerun := 0; ; rerun++ {
		tx, err := f.fence(ctx, h)
		if err != nil {
			return err
		}
		if fn != nil {
			err = fn(tx)
		}
		if err != nil {
			tx.Rollback()
		} else if err = tx.Commit(); err == nil {
			f.known.Store(h.Role, h)
			return nil
		} else {
			err = fmt.Errorf("sqlfence: commit: %w", err)
		}
		if !isConflict(err) {
			return err
		}
		if rerun >= f.reruns {
			return fmt.Errorf("%w: %w", ErrConflict, err)
		}
		if err := sleep(ctx, rerun); err != nil {
			return err
		}
	}
}

// fenceTries bounds the transactions fence begins for one Do.
const fenceTries = 4

// fence begins a transaction and fences h in it (package doc, "Cost and
// concurrency"). A conflict here is retried at once in a new transaction:
// fn has not run, and the write it conflicted with has committed.
func (f *Fence) fence(ctx context.Context, h Holding) (*sql.Tx, error) {
	known, ok := f.known.Load(h.Role)
	advance := !ok || known.(Holding) != h
	if err := f.prepare(ctx, f.sql.share, f.sql.advance, f.sql.read); err != nil {
		return nil, fmt.Errorf("sqlfence: prepare: %w", err)
	}
	var conflict error
	for try := 0; try < fenceTries; try++ {
		tx, err := f.db.BeginTx(ctx, f.txOpts)
		if err != nil {
			return nil, fmt.Errorf("sqlfence: begin: %w", err)
		}
		step := f.shareStep
		if advance {
			step = f.advanceStep
		}
		v, r, err := step(ctx, tx, h)
		if err == nil && v == accepted {
			return tx, nil
		}
		tx.Rollback()
		switch {
		case err != nil && isConflict(err):
			conflict = err
			if f.onRetry != nil {
				f.onRetry(err)
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("sqlfence: fence role %q: %w", h.Role, err)
		case v == stale:
			return nil, &StaleError{Held: h, Number: r.number, Holder: r.holder}
		case v == reused:
			return nil, &ReusedError{Held: h, Holder: r.holder}
		case v == missing && f.dialect == MySQL:
			if err := f.insertRow(ctx, h.Role); err != nil {
				return nil, fmt.Errorf("sqlfence: create the fence row of role %q: %w", h.Role, err)
			}
		}
		advance = true
	}
	if conflict != nil {
		return nil, fmt.Errorf("%w: %w", ErrConflict, conflict)
	}
	return nil, fmt.Errorf("sqlfence: role %q: its fence row changed under each of %d tries", h.Role, fenceTries)
}

// sleep waits before rerun n+1: 10ms doubling to 1s, jittered, or until
// ctx ends.
func sleep(ctx context.Context, n int) error {
	d := min(10*time.Millisecond<<min(n, 7), time.Second)
	t := time.NewTimer(d/2 + rand.N(d/2+1))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sqlfence: %w", context.Cause(ctx))
	}
}
