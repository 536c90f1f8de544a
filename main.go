// Command krole is role succession (leader election with broker-enforced
// fencing) on Apache Kafka. See README.md, or run `krole --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/krabka/krole/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx, so a running command stops
	// cleanly; after that, the default handling is back, and a second
	// Ctrl-C kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
