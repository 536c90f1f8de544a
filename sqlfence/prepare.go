package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// prepared holds the fence's statements, prepared once per Fence on its
// db; database/sql then prepares each once per connection and reuses it.
// Without that, go-sql-driver/mysql (unless the DSN sets
// interpolateParams) and lib/pq spend a round trip preparing each
// statement they run with arguments.
type prepared struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// prepare prepares those of queries the Fence has not prepared yet. It
// runs before the transaction begins: preparing on db needs a connection
// of its own, and a pool capped at one would otherwise wait for itself.
func (f *Fence) prepare(ctx context.Context, queries ...string) error {
	for _, q := range queries {
		f.prep.mu.Lock()
		s := f.prep.m[q]
		f.prep.mu.Unlock()
		if s != nil {
			continue
		}
		s, err := f.db.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		f.prep.mu.Lock()
		if had := f.prep.m[q]; had != nil {
			s.Close()
		} else {
			if f.prep.m == nil {
				f.prep.m = map[string]*sql.Stmt{}
			}
			f.prep.m[q] = s
		}
		f.prep.mu.Unlock()
	}
	return nil
}

// stmt returns query prepared for tx: the Fence's statement (see
// prepare) bound to tx, or, when a Close came in between, one prepared on
// tx's own connection.
func (f *Fence) stmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	f.prep.mu.Lock()
	s := f.prep.m[query]
	f.prep.mu.Unlock()
	if s == nil {
		return tx.PrepareContext(ctx, query)
	}
	return tx.StmtContext(ctx, s), nil
}

// Close closes the statements the Fence prepared on db's connections. A
// Do after Close prepares them again.
func (f *Fence) Close() error {
	f.prep.mu.Lock()
	m := f.prep.m
	f.prep.m = nil
	f.prep.mu.Unlock()
	var errs []error
	for _, s := range m {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
