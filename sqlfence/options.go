package sqlfence

import "database/sql"

// Option configures a [Fence].
type Option func(*config)

type config struct {
	dialect   Dialect
	table     string
	isolation sql.IsolationLevel
	reruns    int
	check     bool
	onRetry   func(error)
}

// DefaultTable is the fence table's name unless [WithTable] says otherwise.
const DefaultTable = "krole_fence"

// WithDialect sets the SQL dialect. Default: the one of db's driver when it
// is pgx, lib/pq or go-sql-driver/mysql; [New] fails for any other.
func WithDialect(d Dialect) Option { return func(c *config) { c.dialect = d } }

// WithTable sets the fence table: lower-case letters, digits and
// underscores, optionally "schema.table". Default [DefaultTable].
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithIsolation sets the isolation level of Do's transactions:
// sql.LevelDefault (the default: the server's, READ COMMITTED on
// PostgreSQL, REPEATABLE READ on MariaDB and MySQL), LevelReadCommitted,
// LevelRepeatableRead or LevelSerializable.
func WithIsolation(level sql.IsolationLevel) Option {
	return func(c *config) { c.isolation = level }
}

// WithConflictRetries lets Do run fn up to n more times, each in a new
// transaction, when the database aborts the transaction for a conflict
// (SQLSTATE 40001 or 40P01) after fn ran. Use it only when fn is safe to
// rerun: it has no effect outside its transaction. Default 0: Do returns
// an error matching [ErrConflict].
func WithConflictRetries(n int) Option { return func(c *config) { c.reruns = n } }
