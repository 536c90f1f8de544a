package election_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/processor/stream"
)

// A long-running processor that does its work only while it holds the
// role "reporter", and writes its output through the fenced writer: once
// another member has taken the role, the broker refuses its writes. Run it
// as several processes with different member ids; one holds the role, the
// others queue behind it. examples/fencedwriter is this program with flags.
func ExampleSession_Run() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	host, _ := os.Hostname()

	// One session: a transport, a view of the role topic, and a member of
	// the role that reads the view and acts through the transport. The
	// transaction timeout comes from the settings (half the lease).
	sess, err := election.New(election.Config{
		Cluster:  fencing.Config{Brokers: []string{"127.0.0.1:9092"}},
		Member:   codec.MemberID(fmt.Sprintf("%s:%d", host, os.Getpid())),
		Roles:    []codec.Role{"reporter"},
		Settings: processor.Settings{LeaseDuration: 10 * time.Second},
		Logger:   log,
	})
	if err != nil {
		panic(err)
	}
	defer sess.Close()

	// Run blocks until ctx ends, then resigns, so the next member takes
	// over at once. The work runs while this member holds the role; its
	// ctx ends when the role is lost.
	err = sess.Run(ctx, func(ctx context.Context, held processor.Held) error {
		w := sess.Writer(held) // writes under this holding's token
		for n := 0; ; n++ {
			err := w.Write(ctx, fencing.Message{
				Topic: "reports", Partition: fencing.PartitionByKey, Key: []byte(held.Role),
				Value: fmt.Appendf(nil, "report %d from %s under %s", n, held.Member, held.Token),
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
			case <-time.After(time.Second):
			}
		}
	})
	if err != nil { // *election.ViewError: the role topic could not be followed
		log.Error("stopped", "err", err)
	}
}

// A consume-transform-produce processor, exactly once across failovers:
// the member that holds the role "uppercase" reads the topic "words",
// and each batch is one transaction under its token that writes the
// uppercased records to "WORDS" and commits the input offsets of the
// group. The session is set up as in the example above, with the role
// "uppercase"; examples/exactlyonce is the whole program.
func ExampleSession_Run_exactlyOnce() {
	var (
		ctx  context.Context   // ends on SIGINT or SIGTERM
		sess *election.Session // campaigns for "uppercase"
	)
	err := sess.Run(ctx, func(ctx context.Context, held processor.Held) error {
		// Returns nil when ctx ends (the role was lost, or the member is
		// leaving), an error matching fencing.ErrFenced when a write was
		// refused because another member holds the role.
		return stream.Run(ctx, stream.Config{
			Transport: sess.Transport(), // the transport that minted held.Token
			Group:     "uppercase",
			Input:     "words",
			Output:    "WORDS",
			Transform: func(in stream.Message) ([]fencing.Message, error) {
				return []fencing.Message{{Partition: fencing.PartitionByKey, Key: in.Key, Value: bytes.ToUpper(in.Value)}}, nil
			},
		}, held.Role, held.Token)
	})
	if err != nil {
		panic(err)
	}
}
