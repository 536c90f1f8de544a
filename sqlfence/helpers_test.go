package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/krabka/krole/internal/testdb"
	"github.com/krabka/krole/sqlfence"
)

func TestMain(m *testing.M) { os.Exit(testdb.Run(m)) }

// env is one database server under test.
type env struct {
	name string // "postgres" or "mariadb"
	srv  *testdb.Server
	db   *sql.DB
}

var servers = []struct {
	name  string
	start func(testing.TB) *testdb.Server
}{
	{"postgres", testdb.Postgres},
	{"mariadb", testdb.MariaDB},
}

// each runs fn against each server, in parallel subtests.
func each(t *testing.T, fn func(t *testing.T, e env)) {
	t.Helper()
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			srv := s.start(t)
			fn(t, env{name: s.name, srv: srv, db: srv.Open(t)})
		})
	}
}

func (e env) pg() bool { return strings.HasPrefix(e.name, "postgres") }

var tableSeq atomic.Int64

// tables returns a fresh fence table name and a fresh data table (created)
// with columns id, number, seq.
func (e env) tables(t testing.TB) (fence, data string) {
	t.Helper()
	n := tableSeq.Add(1)
	fence, data = fmt.Sprintf("fence_%d", n), fmt.Sprintf("data_%d", n)
	e.exec(t, "CREATE TABLE "+data+" (id VARCHAR(100) PRIMARY KEY, number BIGINT NOT NULL, seq BIGINT NOT NULL DEFAULT 0)")
	return fence, data
}

// fence returns a Fence on a new table (created), and the data table.
func (e env) fence(t testing.TB, opts ...sqlfence.Option) (*sqlfence.Fence, string) {
	t.Helper()
	table, data := e.tables(t)
	f := e.fenceOn(t, table, opts...)
	return f, data
}

// fenceOn returns a Fence on table, created.
func (e env) fenceOn(t testing.TB, table string, opts ...sqlfence.Option) *sqlfence.Fence {
	t.Helper()
	f, err := sqlfence.New(e.db, append([]sqlfence.Option{sqlfence.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(ctx(t)); err != nil {
		t.Fatal(err)
	}
	return f
}

// q rewrites ? placeholders into PostgreSQL's $n.
func (e env) q(query string) string {
	if !e.pg() {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (e env) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := e.db.ExecContext(ctx(t), e.q(query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// row returns role's fence row; ok is false when there is none.
func (e env) row(t testing.TB, f *sqlfence.Fence, role string) (number int64, holder string, ok bool) {
	t.Helper()
	err := e.db.QueryRowContext(ctx(t), e.q("SELECT number, holder FROM "+f.Table()+" WHERE role = ?"), role).Scan(&number, &holder)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return number, holder, true
}

// wantRow fails t unless role's fence row is (number, holder).
func (e env) wantRow(t testing.TB, f *sqlfence.Fence, role string, number int64, holder string) {
	t.Helper()
	n, h, ok := e.row(t, f, role)
	if !ok || n != number || h != holder {
		t.Fatalf("fence row of %q: (%d, %q, present %v), want (%d, %q)", role, n, h, ok, number, holder)
	}
}

// ids returns the ids in a data table.
func (e env) ids(t testing.TB, data string) map[string]bool {
	t.Helper()
	rows, err := e.db.QueryContext(ctx(t), "SELECT id FROM "+data)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		got[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// insert is an fn that inserts (id, number) into data.
func (e env) insert(data, id string, number int64) func(*sql.Tx) error {
	return func(tx *sql.Tx) error {
		_, err := tx.Exec(e.q("INSERT INTO "+data+" (id, number) VALUES (?, ?)"), id, number)
		return err
	}
}

// waitLockWait waits until a statement that mentions table waits for a
// row lock on the server. The Do expected to wait must not end first.
func (e env) waitLockWait(t *testing.T, table string, done <-chan error) {
	t.Helper()
	query := "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE ?"
	if !e.pg() {
		query = "SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?"
	}
	quoted, poll := `"`+table+`"`, 5*time.Millisecond
	if !e.pg() {
		// InnoDB refreshes innodb_trx only when it was last read over 100ms ago.
		quoted, poll = "`"+table+"`", 150*time.Millisecond
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := e.db.QueryRowContext(ctx(t), e.q(query), "%"+quoted+"%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("Do returned (%v) instead of waiting for the row lock", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement on %s waits for a lock after 10s", table)
		}
		time.Sleep(poll)
	}
}

// releaser returns a channel and the func that closes it, once; the
// func runs at t's cleanup too, so that nothing waits on a failed test.
func releaser(t *testing.T) (chan struct{}, func()) {
	c := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(c) }) }
	t.Cleanup(release)
	return c, release
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}

// ctx is the test's context, cancelled as it ends.
func ctx(t testing.TB) context.Context { return t.Context() }
