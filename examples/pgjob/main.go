// Command pgjob is a singleton job that writes to PostgreSQL: while it
// holds its role it inserts one numbered row per interval, each in a
// transaction fenced by package sqlfence with the holding's fencing
// number, so that PostgreSQL refuses the rows of a holder that has been
// replaced, however late it wakes up.
//
// Run it as several processes with different member ids. One holds the
// role and writes; the others queue behind it and take over, one at a
// time, when it stops:
//
//	go run github.com/krabka/krole dev      # a cluster on 127.0.0.1:9092
//	export PGJOB_DSN='postgres://user@127.0.0.1:5432/db?sslmode=disable'
//	go run ./examples/pgjob --member a
//	go run ./examples/pgjob --member b
//	psql "$PGJOB_DSN" -c 'SELECT * FROM pgjob_rows ORDER BY role, n'
//
// The rows of a role are numbered 1, 2, 3, ... in the order they commit:
// each transaction takes its number from a counter row (pgjob_next) and
// holds that row's lock until it ends. Each row names the member that
// wrote it and its holding's fencing number. SIGSTOP on the writing
// process, then SIGCONT once another has taken over and written, shows the
// fence: the paused process's next write is refused ("refused: a newer
// holding has written"), and in the table the fencing numbers never go
// back. --unfenced writes without the fence, to show what it prevents.
//
// The first process creates the tables (pgjob_next, pgjob_rows and
// sqlfence's krole_fence) if they do not exist.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"

	"github.com/krabka/krole/election"
	"github.com/krabka/krole/examples/internal/cmdline"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/sqlfence"
)

func main() {
	common := cmdline.Define("pgjob") // --brokers, --topic, --role, --member, --lease-duration
	dsn := flag.String("dsn", os.Getenv("PGJOB_DSN"), "the PostgreSQL connection string (env PGJOB_DSN)")
	interval := flag.Duration("interval", time.Second, "the time between rows")
	unfenced := flag.Bool("unfenced", false, "write without the fence, to show what it prevents (never in production)")
	flag.Parse()
	// Ctrl-C (or SIGTERM) ends ctx: run resigns the role and returns.
	cmdline.Main("pgjob", func(ctx context.Context, log *slog.Logger) error {
		return run(ctx, log, common.Config(log), options{dsn: *dsn, interval: *interval, unfenced: *unfenced})
	})
}

type options struct {
	dsn      string
	interval time.Duration
	unfenced bool
}

// The job's tables: a counter row per role, and the rows.
const schema = `
CREATE TABLE IF NOT EXISTS pgjob_next (
	role TEXT PRIMARY KEY,
	n BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS pgjob_rows (
	role TEXT NOT NULL,
	n BIGINT NOT NULL,
	fence BIGINT NOT NULL,
	member TEXT NOT NULL,
	written_at TIMESTAMPTZ NOT NULL DEFAULT now(),
	PRIMARY KEY (role, n)
)`

// run holds cfg's role as cfg's member until ctx ends, and writes rows
// while it holds it. It resigns the role on the way out.
func run(ctx context.Context, log *slog.Logger, cfg election.Config, o options) error {
	if o.dsn == "" {
		return errors.New("--dsn (or PGJOB_DSN) is required")
	}
	db, err := sql.Open("pgx", o.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("creating the tables: %w", err)
	}
	fence, err := sqlfence.New(db) // pgx: the PostgreSQL dialect
	if err != nil {
		return err
	}
	defer fence.Close() // its prepared statements
	if err := fence.CreateTable(ctx); err != nil {
		return err
	}
	j := &job{db: db, fence: fence, unfenced: o.unfenced}

	sess, err := election.New(cfg)
	if err != nil {
		return err
	}
	defer sess.Close()
	log.Info("campaigning", "role", cfg.Roles[0], "member", cfg.Member, "unfenced", o.unfenced)
	// Work runs while the member holds the role; its ctx ends when the
	// role is lost (as far as this member knows) or the member leaves.
	return sess.Run(ctx, func(ctx context.Context, held processor.Held) error {
		// The holding as the fence knows it: its number is larger than
		// that of every earlier holding of the role.
		h := sqlfence.Holding{Role: string(held.Role), Number: held.Fence, Holder: string(held.Member)}
		log.Info("writing rows", "role", h.Role, "fence", h.Number)
		for {
			n, err := j.writeRow(ctx, h)
			switch {
			case errors.Is(err, sqlfence.ErrStale):
				// A newer holding has written: this one is over, whatever
				// this member believes. Stop writing; the member learns of
				// the loss on its own.
				log.Warn("refused: a newer holding has written", "fence", h.Number, "err", err)
				return nil
			case err != nil:
				log.Warn("write failed; trying again at the next row", "fence", h.Number, "err", err)
			default:
				log.Info("wrote", "n", n, "fence", h.Number)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(o.interval):
			}
		}
	})
}

type job struct {
	db       *sql.DB
	fence    *sqlfence.Fence
	unfenced bool
}

// writeRow inserts the role's next row, numbered by the counter, in one
// transaction fenced by h, and returns its number. A write once begun is
// not cut short when the holding ends (ctx): cancelling it could only
// narrow the window in which a deposed holder writes (a paused process
// learns of its loss late), while the fence closes it. It runs to its
// end, at most a minute.
func (j *job) writeRow(ctx context.Context, h sqlfence.Holding) (n int64, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	insert := func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO pgjob_next (role, n) VALUES ($1, 1)
			ON CONFLICT (role) DO UPDATE SET n = pgjob_next.n + 1 RETURNING n`, h.Role).Scan(&n)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO pgjob_rows (role, n, fence, member) VALUES ($1, $2, $3, $4)",
			h.Role, n, h.Number, h.Holder)
		return err
	}
	if j.unfenced {
		return n, plainTx(ctx, j.db, insert)
	}
	return n, j.fence.Do(ctx, h, insert)
}

// plainTx runs fn in a transaction without the fence (--unfenced).
func plainTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}
