package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// Dialect is the SQL a [Fence] speaks.
type Dialect int

const (
	// Postgres is PostgreSQL's SQL (version 9.5 or later: ON CONFLICT).
	Postgres Dialect = iota + 1
	// MySQL is MySQL's and MariaDB's SQL, on InnoDB.
	MySQL
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// drivers maps the package paths of known drivers to their dialect.
var drivers = []struct {
	prefix  string
	dialect Dialect
}{
	{"github.com/jackc/pgx/", Postgres},
	{"github.com/lib/pq", Postgres},
	{"github.com/go-sql-driver/mysql", MySQL},
}

// detect names the dialect of db's driver from the driver's Go package,
// without a round trip; a wrapped or unknown driver is not guessed at.
func detect(db *sql.DB) (Dialect, error) {
	t := reflect.TypeOf(db.Driver())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for _, d := range drivers {
		if strings.HasPrefix(t.PkgPath(), d.prefix) {
			return d.dialect, nil
		}
	}
	return 0, invalid("cannot tell the SQL dialect of driver %s.%s: use WithDialect", t.PkgPath(), t.Name())
}

// tableName is a table name, optionally schema-qualified: lower case, so
// that quoting it changes nothing on either database.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$`)

// quote quotes a validated table name for the dialect.
func (d Dialect) quote(name string) string {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + p + q
	}
	return strings.Join(parts, ".")
}

// statements is the SQL of one fence table. Every statement takes the role
// as its first argument.
type statements struct {
	create string
	// share reads the row (number, holder) under a shared lock.
	share string
	// advance writes the holding over the row when the row's number is
	// smaller, or equal with the same holder; it affects no row otherwise.
	// PostgreSQL's upserts (and locks the row either way); MySQL's updates.
	advance string
	// read reads the row (number, holder); MySQL's locks it for update.
	read string
	// insert creates the row at number -1 unless it exists (MySQL only,
	// in a transaction of its own).
	insert string
	reset  string
}

// statementsFor builds the SQL for table (validated). Without check, the
// advance statement writes whatever number the row holds (tests only).
func statementsFor(d Dialect, table string, check bool) statements {
	t := d.quote(table)
	switch d {
	case Postgres:
		cond := "f.number < EXCLUDED.number OR (f.number = EXCLUDED.number AND f.holder = EXCLUDED.holder)"
		if !check {
			cond = "TRUE"
		}
		return statements{
			create: "CREATE TABLE IF NOT EXISTS " + t + ` (
	role TEXT PRIMARY KEY,
	number BIGINT NOT NULL,
	holder TEXT NOT NULL,
	written_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`,
			share: "SELECT number, holder FROM " + t + " WHERE role = $1 FOR SHARE",
			advance: "INSERT INTO " + t + " AS f (role, number, holder, written_at) VALUES ($1, $2, $3, now())" +
				" ON CONFLICT (role) DO UPDATE SET number = EXCLUDED.number, holder = EXCLUDED.holder, written_at = EXCLUDED.written_at" +
				" WHERE " + cond,
			read:  "SELECT number, holder FROM " + t + " WHERE role = $1",
			reset: "DELETE FROM " + t + " WHERE role = $1",
		}
	default:
		cond := "AND (number < ? OR (number = ? AND holder = ?))"
		if !check {
			cond = "AND (? IS NOT NULL OR ? IS NOT NULL OR ? IS NOT NULL)"
		}
		return statements{
			create: "CREATE TABLE IF NOT EXISTS " + t + ` (
	role VARBINARY(255) NOT NULL,
	number BIGINT NOT NULL,
	holder VARBINARY(255) NOT NULL,
	written_at DATETIME(6) NOT NULL,
	PRIMARY KEY (role)
) ENGINE=InnoDB`,
			share:   "SELECT number, holder FROM " + t + " WHERE role = ? LOCK IN SHARE MODE",
			advance: "UPDATE " + t + " SET number = ?, holder = ?, written_at = UTC_TIMESTAMP(6) WHERE role = ? " + cond,
			read:    "SELECT number, holder FROM " + t + " WHERE role = ? FOR UPDATE",
			// IGNORE: a duplicate takes a shared lock and nothing more, so
			// that concurrent inserts of one role cannot deadlock upgrading
			// it. The values are valid (validated lengths), so IGNORE
			// turns nothing else into a warning.
			insert: "INSERT IGNORE INTO " + t + " (role, number, holder, written_at) VALUES (?, -1, '', UTC_TIMESTAMP(6))",
			reset:  "DELETE FROM " + t + " WHERE role = ?",
		}
	}
}

// verdict is what a fence row says of a holding.
type verdict int

const (
	accepted verdict = iota // the row is the holding's, and locked
	behind                  // the row's number is smaller: advance it
	missing                 // no row (MySQL: create it, then advance)
	stale                   // a larger number
	reused                  // the same number, another holder
)

// row is a fence row as read.
type row struct {
	number int64
	holder string
}

func (r row) judge(h Holding, check bool) verdict {
	switch {
	case !check || r.number == h.Number && r.holder == h.Holder:
		return accepted
	case r.number < h.Number:
		return behind
	case r.number > h.Number:
		return stale
	default:
		return reused
	}
}

// queryRow runs a read of the fence row; ok is false when there is none.
func (f *Fence) queryRow(ctx context.Context, tx *sql.Tx, query, role string) (r row, ok bool, err error) {
	s, err := f.stmt(ctx, tx, query)
	if err != nil {
		return row{}, false, err
	}
	err = s.QueryRowContext(ctx, role).Scan(&r.number, &r.holder)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	return r, err == nil, err
}

// shareStep reads the role's row under a shared lock: the fast path of a
// holding that has written before.
func (f *Fence) shareStep(ctx context.Context, tx *sql.Tx, h Holding) (verdict, row, error) {
	r, ok, err := f.queryRow(ctx, tx, f.sql.share, h.Role)
	if err != nil || !ok {
		return missing, r, err
	}
	return r.judge(h, f.check), r, nil
}

// advanceStep writes the holding over the role's row under an exclusive
// lock, or reads why not.
func (f *Fence) advanceStep(ctx context.Context, tx *sql.Tx, h Holding) (verdict, row, error) {
	s, err := f.stmt(ctx, tx, f.sql.advance)
	if err != nil {
		return 0, row{}, err
	}
	var res sql.Result
	if f.dialect == Postgres {
		res, err = s.ExecContext(ctx, h.Role, h.Number, h.Holder)
	} else {
		res, err = s.ExecContext(ctx, h.Number, h.Holder, h.Role, h.Number, h.Number, h.Holder)
	}
	if err != nil {
		return 0, row{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, row{}, err
	}
	if n > 0 {
		return accepted, row{h.Number, h.Holder}, nil
	}
	// PostgreSQL: the upsert locked the row it did not update, so this
	// reads the version it judged. MySQL: no row, or one not changed
	// (rows affected counts changed rows: an equal holding written in the
	// same microsecond), or a newer one; FOR UPDATE locks it.
	r, ok, err := f.queryRow(ctx, tx, f.sql.read, h.Role)
	if err != nil || !ok {
		return missing, r, err
	}
	return r.judge(h, f.check), r, nil
}

// insertRow creates the role's row at number -1 unless it exists, in a
// transaction of its own (MySQL), so that the fence's transactions only
// ever update it. It tries again after a conflict.
func (f *Fence) insertRow(ctx context.Context, role string) error {
	var err error
	for range fenceTries {
		if err = f.insertRowOnce(ctx, role); err == nil || !isConflict(err) {
			return err
		}
	}
	return err
}

func (f *Fence) insertRowOnce(ctx context.Context, role string) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, f.sql.insert, role); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// conflictStates are the SQLSTATEs of an aborted transaction worth
// retrying: serialization failure (MySQL's deadlock too), and
// PostgreSQL's deadlock.
var conflictStates = map[string]bool{"40001": true, "40P01": true}

// isConflict reports whether err is a serialization failure or deadlock.
// It reads the SQLSTATE through a SQLState() method (pgx, lib/pq) or a
// SQLState [5]byte field (go-sql-driver/mysql's *MySQLError).
func isConflict(err error) bool {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return conflictStates[s.SQLState()]
	}
	return sqlStateField(err)
}

// sqlStateField walks err's tree for a conflict's SQLState [5]byte field.
func sqlStateField(err error) bool {
	if err == nil {
		return false
	}
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		f := v.FieldByName("SQLState")
		if f.IsValid() && f.Kind() == reflect.Array && f.Len() == 5 && f.Type().Elem().Kind() == reflect.Uint8 {
			b := make([]byte, 5)
			for i := range b {
				b[i] = byte(f.Index(i).Uint())
			}
			return conflictStates[string(b)]
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return sqlStateField(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if sqlStateField(e) {
				return true
			}
		}
	}
	return false
}
