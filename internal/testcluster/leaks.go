package testcluster

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// VerifyNoLeaks is for TestMain: it runs the tests of m and exits the
// process with m.Run's code, or with 1 when the tests passed but
// goroutines whose stacks name one of pkgs (substrings of import paths,
// such as "krabka/krole" or "IBM/sarama") still run 5 s after them; it
// prints their stacks on stderr. Every test must close what it opened.
// The goroutine of sarama's process-wide metrics ticker
// (rcrowley/go-metrics) is allowed.
func VerifyNoLeaks(m *testing.M, pkgs ...string) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5*time.Second, pkgs); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to wait for the goroutines whose stacks name
// one of pkgs to end, and returns the stacks of those left ("" when none).
// The calling goroutine does not count.
func leakedGoroutines(wait time.Duration, pkgs []string) string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "testcluster.leakedGoroutines") || strings.Contains(g, "rcrowley/go-metrics") {
				continue
			}
			for _, p := range pkgs {
				if strings.Contains(g, p) {
					leaked = append(leaked, g)
					break
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
