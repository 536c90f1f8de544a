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

// stmt returns query prepared for tx.
func (f *Fence) stmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	f.prep.mu.Lock()
	s := f.prep.m[query]
	f.prep.mu.Unlock()
	if s == nil {
		var err error
		if s, err = f.db.PrepareContext(ctx, query); err != nil {
			return nil, err
		}
		f.prep.mu.Lock()
		if had := f.prep.m[query]; had != nil {
			s.Close()
			s = had
		} else {
			if f.prep.m == nil {
				f.prep.m = map[string]*sql.Stmt{}
			}
			f.prep.m[query] = s
		}
		f.prep.mu.Unlock()
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
