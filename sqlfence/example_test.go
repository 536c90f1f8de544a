package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/krabka/krole/sqlfence"
)

// The holder of role "billing" writes an invoice; once a newer holding of
// the role has written, the insert is refused and nothing is written.
func ExampleFence_Do() {
	var (
		ctx    context.Context
		db     *sql.DB // opened with pgx's stdlib, lib/pq or go-sql-driver/mysql
		number int64   // the holding's fencing number: processor.Held.Fence, KROLE_FENCE
	)
	f, err := sqlfence.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if err := f.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	h := sqlfence.Holding{Role: "billing", Number: number, Holder: "node-1"}
	err = f.Do(ctx, h, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO invoices (id, amount) VALUES ($1, $2)", 42, 100)
		return err
	})
	var stale *sqlfence.StaleError
	if errors.As(err, &stale) {
		log.Printf("deposed: %s wrote under %d", stale.Holder, stale.Number)
	}
}
