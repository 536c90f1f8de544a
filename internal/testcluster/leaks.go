package testcluster

import (
	"testing"

	"go.uber.org/goleak"
)

// LeakOptions are the goroutines that the leak checks of krole's tests
// allow: sarama's process-wide metrics ticker (rcrowley/go-metrics), which
// nothing can stop, and goleak's own. Pass them to goleak.VerifyNone in a
// test that checks for leaks itself.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
		goleak.IgnoreAnyFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
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
