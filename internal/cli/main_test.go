package cli

import (
	"os"
	"testing"

	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/internal/testcluster"
)

// TestMain fails the package when goroutines of krole, sarama or kfake
// outlive the tests: every command must close what it opened, and `krole
// dev` must stop its cluster when its context ends.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.WatchdogCommand {
		os.Exit(supervise.Watchdog(os.Args[2:])) // krole run's watchdog under test
	}
	testcluster.VerifyNoLeaks(m)
}
