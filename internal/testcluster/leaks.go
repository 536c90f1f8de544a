package testcluster

import (
	"testing"

	"go.uber.org/goleak"
)

// LeakOptions are the goroutines that the leak checks of krole's tests
// allow: sarama's process-wide metrics ticker (rcrowley/go-metrics), which
// nothing can stop, goleak's own, and LevelDB's memory-pool drainer of a
// database already closed. Pass them to goleak.VerifyNone in a test that
// checks for leaks itself.
//
// The drainer (goleveldb's (*DB).mpoolDrain) is not waited for by
// (*DB).Close: once the database is closed it waits up to one second for
// a pooled buffer, then ends by itself. goleak retries for less than that,
// so a view closed by the package's last test showed as a leak (it failed
// CI once, and make test on a clean clone once). Ignoring it hides no
// unclosed database: one still open also runs its compaction goroutines
// ((*DB).tCompaction, mCompaction, compactionError), which stay checked.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
		goleak.IgnoreAnyFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
		goleak.IgnoreTopFunction("github.com/syndtr/goleveldb/leveldb.(*DB).mpoolDrain"),
	}
}

// VerifyNoLeaks is for TestMain: it runs the tests of m and exits the
// process with m.Run's code, or with 1 when the tests passed but
// goroutines other than those [LeakOptions] allows still run after them
// (go.uber.org/goleak retries for a few seconds first, and prints their
// stacks). Every test must close what it opened.
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m, LeakOptions()...)
}
