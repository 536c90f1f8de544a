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
	"time"

	"github.com/krabka/krole/election"
	"github.com/krabka/krole/examples/internal/cmdline"
	"github.com/krabka/krole/examples/internal/devtopics"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
)

func main() {
	common := cmdline.Define("heartbeat") // --brokers, --topic, --role, --member, --lease-duration
	output := flag.String("output", "", "the topic to write heartbeats to (required)")
	interval := flag.Duration("interval", time.Second, "the time between heartbeats")
	create := flag.Bool("create-topics", false, "create the output topic if it does not exist (for trying the example on krole dev)")
	flag.Parse()
	// Ctrl-C (or SIGTERM) ends ctx: run resigns the role and returns.
	cmdline.Main("fencedwriter", func(ctx context.Context, log *slog.Logger) error {
		return run(ctx, log, common.Config(log), options{output: *output, interval: *interval, create: *create})
	})
}

type options struct {
	output   string
	interval time.Duration
	create   bool
}

// run holds cfg's role as cfg's member until ctx ends, and writes
// heartbeats while it holds it. It resigns the role on the way out.
func run(ctx context.Context, log *slog.Logger, cfg election.Config, o options) error {
	if o.output == "" {
		return errors.New("--output is required")
	}
	if o.create {
		if err := devtopics.Create(cfg.Cluster, o.output); err != nil {
			return err
		}
	}

	// The session connects one transport for the member and its work (a
	// token is usable only by the transport that minted it), and follows
	// the role topic with a view. Its transaction timeout comes from the
	// lease settings.
	sess, err := election.New(cfg)
	if err != nil {
		return err
	}
	defer sess.Close()
	settings := sess.Member().Settings()
	log.Info("campaigning", "role", cfg.Roles[0], "member", cfg.Member, "lease", settings.LeaseDuration)
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
