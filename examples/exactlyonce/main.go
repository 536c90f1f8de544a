// Command exactlyonce is a krole processor that consumes an input topic,
// uppercases the value of every record and writes it to an output topic,
// exactly once across failovers.
//
// Run it as several processes with different member ids. Only the member
// that holds the role processes. Each batch of input is one transaction
// under the holder's token that writes the outputs and commits the input
// offsets of the consumer group (package processor/stream), so a holder
// that crashes, is stopped, or is deposed while it still runs leaves no
// duplicate and no gap: the next holder resumes after the last committed
// batch, and the broker refuses every write of the old token.
//
//	go run github.com/krabka/krole dev      # a cluster on 127.0.0.1:9092
//	go run ./examples/exactlyonce --member a --input words --output WORDS --create-topics
//	go run ./examples/exactlyonce --member b --input words --output WORDS
//	kcat -P -b 127.0.0.1:9092 -t words      # type some lines
//	kcat -C -b 127.0.0.1:9092 -t WORDS
//
// Ctrl-C (or SIGTERM) on the processing member makes it resign: the other
// takes over at once. SIGKILL makes the other wait for the lease to run
// out (--lease-duration), and then resume where the dead one committed.
//
// Read the output with read_committed isolation (kcat's default): a
// read_uncommitted reader also sees the outputs of aborted transactions,
// which the next holder writes again. The consumer group (--group) is
// never joined; nothing else may commit offsets for it.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"

	"github.com/krabka/krole/election"
	"github.com/krabka/krole/examples/internal/cmdline"
	"github.com/krabka/krole/examples/internal/devtopics"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/processor/stream"
)

func main() {
	common := cmdline.Define("uppercase") // --brokers, --topic, --role, --member, --lease-duration
	input := flag.String("input", "", "the topic to consume (required)")
	output := flag.String("output", "", "the topic to write to (required)")
	group := flag.String("group", "", "the consumer group whose offsets record the progress (default: the role)")
	create := flag.Bool("create-topics", false, "create the input and output topics if they do not exist (for trying the example on krole dev)")
	flag.Parse()
	// Ctrl-C (or SIGTERM) ends ctx: run resigns the role and returns.
	cmdline.Main("exactlyonce", func(ctx context.Context, log *slog.Logger) error {
		return run(ctx, log, common.Config(log), options{input: *input, output: *output, group: *group, create: *create})
	})
}

type options struct {
	input, output string
	group         string
	create        bool
}

// run holds cfg's role as cfg's member until ctx ends, and processes the
// input while it holds it. It resigns the role on the way out.
func run(ctx context.Context, log *slog.Logger, cfg election.Config, o options) error {
	if o.input == "" || o.output == "" {
		return errors.New("--input and --output are required")
	}
	if o.group == "" {
		o.group = string(cfg.Roles[0])
	}
	if o.create {
		if err := devtopics.Create(cfg.Cluster, o.input, o.output); err != nil {
			return err
		}
	}

	// The session connects one transport for the member and the stream (a
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
	// Run blocks until ctx ends (or the view fails), then resigns. The
	// stream runs while the member holds the role; its ctx ends when the
	// role is lost.
	return sess.Run(ctx, func(ctx context.Context, held processor.Held) error {
		log.Info("processing", "input", o.input, "output", o.output, "group", o.group, "token", held.Token)
		// stream.Run returns nil when ctx ends (the role was lost, or the
		// member is leaving), and an error matching fencing.ErrFenced when
		// a write was refused because another member holds the role.
		return stream.Run(ctx, stream.Config{
			Transport: sess.Transport(),
			Group:     o.group,
			Input:     o.input,
			Output:    o.output,
			Transform: upper,
			Logger:    log,
			OnCommit: func(c stream.Commit) {
				log.Debug("committed", "records", c.Records, "offsets", c.Offsets)
			},
		}, held.Role, held.Token)
	})
}

// upper is the transformation: the record's value in upper case, under
// the same key, to the output topic (an empty Topic means Config.Output),
// partitioned by key. It must have no effect other than its result: it
// runs again for the records of a batch that was not committed.
func upper(in stream.Message) ([]fencing.Message, error) {
	value := in.Value
	if value != nil { // nil is a tombstone; keep it one
		value = bytes.ToUpper(value)
	}
	return []fencing.Message{{Partition: fencing.PartitionByKey, Key: in.Key, Value: value}}, nil
}
