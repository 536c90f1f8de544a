// Package cmdline is the command line the examples share: the flags that
// point an example at a cluster and name its role and member, the
// election.Config they make, and main's logger, signals and exit. It is
// not part of the patterns the examples show: what an example does with
// its role is in its main.go.
package cmdline

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/krabka/krole/election"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
)

// Flags are the flags of every example: the cluster (--brokers and
// --topic, or env KROLE_BROKERS and KROLE_TOPIC), the role to hold
// (--role), this member's id (--member, by default host:pid) and how long
// a lease lasts (--lease-duration).
type Flags struct {
	brokers, topic, role, member *string
	lease                        *time.Duration
}

// Define defines the Flags on the program's command line (package flag),
// with role the example's default role; flag.Parse reads them.
func Define(role string) *Flags {
	host, _ := os.Hostname()
	return &Flags{
		brokers: flag.String("brokers", envOr("KROLE_BROKERS", "127.0.0.1:9092"), "bootstrap brokers, host:port[,...] (env KROLE_BROKERS)"),
		topic:   flag.String("topic", envOr("KROLE_TOPIC", fencing.DefaultTopic), "the compacted role topic (env KROLE_TOPIC)"),
		role:    flag.String("role", role, "the role to hold"),
		member:  flag.String("member", fmt.Sprintf("%s:%d", host, os.Getpid()), "this member's id"),
		lease:   flag.Duration("lease-duration", processor.DefaultLeaseDuration, "how long a lease lasts"),
	}
}

// Config is the session's configuration from the flags: the member, a
// candidate for the one role, logging to log. The view logs warnings only
// (goka, underneath, is chatty).
func (f *Flags) Config(log *slog.Logger) election.Config {
	return election.Config{
		Cluster:    election.Cluster{Brokers: strings.Split(*f.brokers, ","), Topic: *f.topic},
		Member:     election.MemberID(*f.member),
		Roles:      []election.Role{election.Role(*f.role)},
		Settings:   election.Settings{LeaseDuration: *f.lease},
		Logger:     log,
		ViewLogger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// Main calls run with a context that SIGINT or SIGTERM ends and a logger
// to stderr. If run fails, Main logs "<name> stopped" with the error and
// exits with status 1.
func Main(name string, run func(ctx context.Context, log *slog.Logger) error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log); err != nil {
		log.Error(name+" stopped", "err", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
