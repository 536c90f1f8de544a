// Command krole is role succession (leader election with broker-enforced
// fencing) on Apache Kafka. See README.md, or run `krole --help`.
package main

import (
	"os"

	"github.com/krabka/krole/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx, so a running command stops
	// cleanly; a second request ends the process at once, after a line
	// that says what it skips (see cli.NotifyInterrupts).
	ctx := cli.NotifyInterrupts(os.Stderr, os.Args[1:], os.Exit)
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
