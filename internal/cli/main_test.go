package cli

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/internal/testcluster"
)

// TestMain fails the package when goroutines of krole, sarama or kfake
// outlive the tests (as testcluster.VerifyNoLeaks does): every command must
// close what it opened, and `krole dev` must stop its cluster when its
// context ends. It removes the binary the tests share after them.
//
// The tests spend their time waiting on leases, timeouts and processes,
// not on the CPU: unless -parallel is given, up to minParallel of them run
// at once (go test's default is GOMAXPROCS).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.WatchdogCommand {
		os.Exit(supervise.Watchdog(os.Args[2:])) // krole run's watchdog under test
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < minParallel {
		_ = flag.Set("test.parallel", strconv.Itoa(minParallel))
	}
	goleak.VerifyTestMain(removingBinary{m}, testcluster.LeakOptions()...)
}

// minParallel is how many parallel tests run at once, when -parallel is
// not given and GOMAXPROCS is lower.
const minParallel = 6

// removingBinary runs the tests, then removes the shared binary's
// directory.
type removingBinary struct{ m *testing.M }

func (r removingBinary) Run() int {
	code := r.m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	return code
}
