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
	// cleanly; a second one ends the process at once, after a line that
	// says what it skips.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sigs
		cancel()
		sig, _ := (<-sigs).(syscall.Signal)
		os.Exit(cli.SecondInterrupt(os.Stderr, os.Args[1:], sig))
	}()
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
