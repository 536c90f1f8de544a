// Command fencedwriter is the smallest useful krole processor: while it
// holds a role it writes one heartbeat record per interval through the
// fenced writer, and while it does not, it writes nothing.
//
// Run it as several processes with different member ids. One holds the
// role and writes; the others queue behind it and take over, one at a
// time, when it stops. Every heartbeat names the member and the token it
// was written under:
//
//	go run github.com/krabka/krole dev      # a cluster on 127.0.0.1:9092
//	go run ./examples/fencedwriter --member a --output heartbeats --create-topics
//	go run ./examples/fencedwriter --member b --output heartbeats
//	kcat -C -b 127.0.0.1:9092 -t heartbeats -f '%k %s\n'
//
// Ctrl-C (or SIGTERM) on the writing process makes it resign: the next one
// takes over at once. SIGKILL makes the next one wait for the lease to run
// out (--lease-duration). SIGSTOP followed, after the lease, by SIGCONT
// shows the fence: the paused process has lost the role, and the broker
// refuses whatever it still tries to write under its old token, so the
// heartbeats' tokens never go backwards.
//
// The output must be read with read_committed isolation (kcat's default):
// each heartbeat is a transaction under the holder's token.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/examples/internal/devtopics"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
)

func main() {
	host, _ := os.Hostname()
	brokers := flag.String("brokers", envOr("KROLE_BROKERS", "127.0.0.1:9092"), "bootstrap brokers, host:port[,...] (env KROLE_BROKERS)")
	topic := flag.String("topic", envOr("KROLE_TOPIC", fencing.DefaultTopic), "the compacted role topic (env KROLE_TOPIC)")
	role := flag.String("role", "heartbeat", "the role to hold")
	member := flag.String("member", fmt.Sprintf("%s:%d", host, os.Getpid()), "this member's id")
	output := flag.String("output", "", "the topic to write heartbeats to (required)")
	interval := flag.Duration("interval", time.Second, "the time between heartbeats")
	lease := flag.Duration("lease-duration", processor.DefaultLeaseDuration, "how long a lease lasts")
	create := flag.Bool("create-topics", false, "create the output topic if it does not exist (for trying the example on krole dev)")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, log, options{
		brokers: strings.Split(*brokers, ","), topic: *topic, role: codec.Role(*role), member: codec.MemberID(*member),
		output: *output, interval: *interval, lease: *lease, create: *create,
	})
	if err != nil {
		log.Error("fencedwriter stopped", "err", err)
		os.Exit(1)
	}
}

type options struct {
	brokers  []string
	topic    string
	role     codec.Role
	member   codec.MemberID
	output   string
	interval time.Duration
	lease    time.Duration
	create   bool
}

// run holds the role as member until ctx ends, and writes heartbeats while
// it holds it. It resigns the role on the way out.
func run(ctx context.Context, log *slog.Logger, o options) error {
	if o.output == "" {
		return errors.New("--output is required")
	}
	cfg := fencing.Config{Brokers: o.brokers, Topic: o.topic}
	if o.create {
		if err := devtopics.Create(cfg, o.output); err != nil {
			return err
		}
	}

	// The session connects one transport for the member and its work (a
	// token is usable only by the transport that minted it), and follows
	// the role topic with a view. Its transaction timeout comes from the
	// lease settings. The view logs warnings only (goka, underneath, is
	// chatty).
	sess, err := election.New(election.Config{
		Cluster:    cfg,
		Member:     o.member,
		Roles:      []codec.Role{o.role},
		Settings:   processor.Settings{LeaseDuration: o.lease},
		Logger:     log,
		ViewLogger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer sess.Close()
	settings := sess.Member().Settings()
	log.Info("campaigning", "role", o.role, "member", o.member, "lease", settings.LeaseDuration)
	// Run blocks until ctx ends (or the view fails), then resigns. Work
	// runs while the member holds the role; its ctx ends when the role is
	// lost.
	return sess.Run(ctx, func(ctx context.Context, held processor.Held) error {
		log.Info("writing heartbeats", "role", held.Role, "token", held.Token)
		w := sess.Writer(held)
		for n := 0; ; n++ {
			err := w.Write(ctx, fencing.Message{
				Topic: o.output, Partition: fencing.PartitionByKey,
				Key:   []byte(held.Role),
				Value: fmt.Appendf(nil, "%s %s %d", held.Member, held.Token, n),
			})
			if ctx.Err() != nil {
				return nil // the role was lost, or the member is leaving
			}
			if err != nil {
				return err // fencing.ErrFenced: another member holds the role now
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(o.interval):
			}
		}
	})
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
