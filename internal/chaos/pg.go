package chaos

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/krabka/krole/sqlfence"
)

// The members' tables (see internal/chaos/member): a counter row per role,
// which each row's transaction increments for the row's pos and holds
// locked until it ends, so that a role's rows commit in the order of
// their pos; and the rows.
const pgSchema = `
CREATE TABLE chaos_next (
	role TEXT PRIMARY KEY,
	pos BIGINT NOT NULL
);
CREATE TABLE chaos_rows (
	role TEXT NOT NULL,
	pos BIGINT NOT NULL,
	number BIGINT NOT NULL,
	member TEXT NOT NULL,
	pid BIGINT NOT NULL,
	epoch INT NOT NULL,
	seq BIGINT NOT NULL,
	began BIGINT NOT NULL,
	PRIMARY KEY (role, pos)
)`

// createDatabase creates a database of the run's own on the server dsn
// names (a URL), with the members' tables and sqlfence's fence table, and
// returns its DSN.
func createDatabase(ctx context.Context, dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("the PostgreSQL DSN %q is no URL (postgres://host/db)", dsn)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	name := fmt.Sprintf("chaos_%d", time.Now().UnixNano())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	conn.Close(ctx)
	if err != nil {
		return "", fmt.Errorf("creating the run's database: %w", err)
	}
	u.Path = "/" + name
	dsn = u.String()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if _, err := db.ExecContext(ctx, pgSchema); err != nil {
		return "", fmt.Errorf("creating the members' tables: %w", err)
	}
	// The fence table, as sqlfence has it; the members write through
	// sqlfence, the auditor reads with pgx alone (readRows).
	f, err := sqlfence.New(db)
	if err != nil {
		return "", err
	}
	if err := f.CreateTable(ctx); err != nil {
		return "", err
	}
	return dsn, nil
}

// readRows reads every committed row of the run's database with pgx,
// per role in commit order (pos).
func readRows(ctx context.Context, dsn string) ([]Row, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, "SELECT role, pos, number, member, pid, epoch, seq, began FROM chaos_rows ORDER BY role, pos")
	if err != nil {
		return nil, fmt.Errorf("reading the rows: %w", err)
	}
	var out []Row
	for rs.Next() {
		var r Row
		var epoch int32
		if err := rs.Scan(&r.Role, &r.Pos, &r.Number, &r.Member, &r.PID, &epoch, &r.Seq, &r.Began); err != nil {
			rs.Close()
			return nil, fmt.Errorf("reading the rows: %w", err)
		}
		r.Epoch = int16(epoch)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("reading the rows: %w", err)
	}
	return out, nil
}
