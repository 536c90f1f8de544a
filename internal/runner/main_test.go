package runner

import (
	"os"
	"testing"

	"github.com/krabka/krole/internal/supervise"
)

// The test binary is also CMD's watchdog (see watchdogArgv).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.WatchdogCommand {
		os.Exit(supervise.Watchdog(os.Args[2:]))
	}
	os.Exit(m.Run())
}
