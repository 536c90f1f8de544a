package sqlfence_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/krabka/krole/sqlfence"
)

func TestTableNames(t *testing.T) {
	bad := []string{"", "Fence", "1fence", "fence-1", "a.b.c", "fence; DROP TABLE x", `"fence"`, "fence ", "a." + strings.Repeat("b", 64), strings.Repeat("f", 64), "é"}
	for _, name := range bad {
		if _, err := sqlfence.New(nil, sqlfence.WithDialect(sqlfence.Postgres), sqlfence.WithTable(name)); !errors.Is(err, sqlfence.ErrInvalid) {
			t.Errorf("table %q: %v, want ErrInvalid", name, err)
		}
	}
	each(t, func(t *testing.T, e env) {
		// A reserved word, and a schema-qualified name (MySQL's schema is a database).
		e.exec(t, "CREATE SCHEMA IF NOT EXISTS fence_schema")
		for _, name := range []string{"order", "fence_schema.krole_fence", "_x9", strings.Repeat("f", 63)} {
			f, err := sqlfence.New(e.db, sqlfence.WithTable(name))
			must(t, err)
			must(t, f.CreateTable(ctx(t)))
			must(t, f.Do(ctx(t), sqlfence.Holding{Role: "r", Number: 1, Holder: "m"}, nil))
			wantStale(t, f.Do(ctx(t), sqlfence.Holding{Role: "r", Number: 0, Holder: "m"}, nil),
				sqlfence.Holding{Role: "r", Number: 0, Holder: "m"}, 1, "m")
		}
	})
}

func TestDialect(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		f, err := sqlfence.New(e.db)
		must(t, err)
		want := map[string]sqlfence.Dialect{"postgres": sqlfence.Postgres, "mariadb": sqlfence.MySQL}[e.name]
		if f.Dialect() != want {
			t.Fatalf("detected %v, want %v", f.Dialect(), want)
		}
	})
	db := sql.OpenDB(unknownDriver{})
	defer db.Close()
	if _, err := sqlfence.New(db); !errors.Is(err, sqlfence.ErrInvalid) || !strings.Contains(err.Error(), "WithDialect") {
		t.Fatalf("unknown driver: %v, want ErrInvalid naming WithDialect", err)
	}
	if f, err := sqlfence.New(db, sqlfence.WithDialect(sqlfence.MySQL)); err != nil || f.Dialect() != sqlfence.MySQL {
		t.Fatalf("unknown driver, WithDialect(MySQL): %v", err)
	}
	if _, err := sqlfence.New(db, sqlfence.WithDialect(sqlfence.Dialect(9))); !errors.Is(err, sqlfence.ErrInvalid) {
		t.Fatalf("Dialect(9): %v", err)
	}
}

// unknownDriver is a driver (and its connector) sqlfence does not know.
type unknownDriver struct{}

func (unknownDriver) Open(string) (driver.Conn, error)             { return nil, errors.New("no") }
func (unknownDriver) Connect(context.Context) (driver.Conn, error) { return nil, errors.New("no") }
func (d unknownDriver) Driver() driver.Driver                      { return d }

func TestInvalidArguments(t *testing.T) {
	for _, level := range []sql.IsolationLevel{sql.LevelReadUncommitted, sql.LevelSnapshot, sql.LevelLinearizable, sql.LevelWriteCommitted} {
		if _, err := sqlfence.New(nil, sqlfence.WithDialect(sqlfence.Postgres), sqlfence.WithIsolation(level)); !errors.Is(err, sqlfence.ErrInvalid) {
			t.Errorf("isolation %v: %v", level, err)
		}
	}
	if _, err := sqlfence.New(nil, sqlfence.WithDialect(sqlfence.Postgres), sqlfence.WithConflictRetries(-1)); !errors.Is(err, sqlfence.ErrInvalid) {
		t.Errorf("retries -1: %v", err)
	}
	// No I/O for a bad holding: the Fence's db is nil.
	f, err := sqlfence.New(nil, sqlfence.WithDialect(sqlfence.MySQL))
	must(t, err)
	for _, h := range []sqlfence.Holding{
		{Role: "", Number: 1, Holder: "m"},
		{Role: "r", Number: 1, Holder: ""},
		{Role: "r", Number: -1, Holder: "m"},
		{Role: strings.Repeat("r", 256), Number: 1, Holder: "m"},
		{Role: "r", Number: 1, Holder: strings.Repeat("m", 256)},
	} {
		if err := f.Do(context.Background(), h, nil); !errors.Is(err, sqlfence.ErrInvalid) {
			t.Errorf("holding %.40v: %v, want ErrInvalid", h, err)
		}
	}
}
