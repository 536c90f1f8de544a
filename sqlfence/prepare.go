package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
)

// prepared holds the fence's statements, prepared once per Fence on its
// db (database/sql then reuses each per connection); otherwise
// go-sql-driver/mysql and lib/pq spend a round trip preparing each.
//
// A goroutine inside a transaction reads the statements without a lock:
// preparing or closing waits for every connection, one of which may wait
// for that transaction's row lock.
type prepared struct {
	mu sync.Mutex // serializes preparers; held by no goroutine inside a transaction
	m  atomic.Pointer[map[string]*sql.Stmt]
}

// prepare prepares those of queries the Fence has not prepared yet. It
// runs before the transaction begins: preparing on db needs a connection
// of its own, and a pool capped at one would otherwise wait for itself.
func (f *Fence) prepare(ctx context.Context, queries ...string) error {
	if f.preparedAll(queries) {
		return nil
	}
	f.prep.mu.Lock()
	defer f.prep.mu.Unlock()
	m := map[string]*sql.Stmt{}
	if p := f.prep.m.Load(); p != nil {
		m = maps.Clone(*p)
	}
	for _, q := range queries {
		if m[q] != nil {
			continue
		}
		s, err := f.db.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		m[q] = s
	}
	f.prep.m.Store(&m)
	return nil
}

func (f *Fence) preparedAll(queries []string) bool {
	p := f.prep.m.Load()
	if p == nil {
		return false
	}
	for _, q := range queries {
		if (*p)[q] == nil {
			return false
		}
	}
	return true
}

// stmt returns query prepared for tx: the Fence's statement (see
// prepare) bound to tx, or, when a Close came in between, one prepared on
// tx's own connection.
func (f *Fence) stmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if p := f.prep.m.Load(); p != nil {
		if s := (*p)[query]; s != nil {
			return tx.StmtContext(ctx, s), nil
		}
	}
	return tx.PrepareContext(ctx, query)
}

// Close closes the statements the Fence prepared on db's connections. A
// Do after Close prepares them again.
func (f *Fence) Close() error {
	f.prep.mu.Lock()
	p := f.prep.m.Swap(nil)
	f.prep.mu.Unlock()
	if p == nil {
		return nil
	}
	var errs []error
	for _, s := range *p {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
