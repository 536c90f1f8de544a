package cli

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/krabka/krole/internal/supervise"
)

// TestMain fails the package when goroutines of krole, sarama or kfake
// outlive the tests: every command must close what it opened, and `krole
// dev` must stop its cluster when its context ends.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.WatchdogCommand {
		os.Exit(supervise.Watchdog(os.Args[2:])) // krole run's watchdog under test
	}
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to wait for the goroutines of the clients and
// clusters the tests started to end, and returns the stacks of those left.
func leakedGoroutines(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			switch {
			case strings.Contains(g, "rcrowley/go-metrics"): // sarama's process-wide meter ticker
			case strings.Contains(g, "krabka/krole"), strings.Contains(g, "IBM/sarama"), strings.Contains(g, "pkg/kfake"):
				if !strings.Contains(g, "leakedGoroutines") {
					leaked = append(leaked, g)
				}
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
