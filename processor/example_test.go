package processor_test

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
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/processor/stream"
	"github.com/krabka/krole/view"
)

// A long-running processor that does its work only while it holds the
// role "reporter", and writes its output through the fenced writer: once
// another member has taken the role, the broker refuses its writes. Run it
// as several processes with different member ids; one holds the role, the
// others queue behind it. examples/fencedwriter is this program with flags.
func ExampleMember_Run() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	settings := processor.Settings{LeaseDuration: 10 * time.Second}.WithDefaults()
	cfg := fencing.Config{
		Brokers:    []string{"127.0.0.1:9092"},
		TxnTimeout: settings.TransactionTimeout, // a crashed writer's transaction ends within the lease
	}
	// One transport for the member and its work: a token is usable only by
	// the transport that minted it.
	tr, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		panic(err)
	}
	defer tr.Close()

	// The view follows the role topic; the member reads the role from it.
	// It must outlive the member, which reads it while it resigns, and
	// the member stops if it fails (the role topic was deleted, say).
	v, err := view.New(view.Options{Config: cfg})
	if err != nil {
		panic(err)
	}
	memberCtx, stopMember := context.WithCancelCause(ctx)
	defer stopMember(nil)
	viewCtx, stopView := context.WithCancel(context.WithoutCancel(ctx))
	viewDone := make(chan struct{})
	go func() {
		defer close(viewDone)
		if err := v.Run(viewCtx); err != nil {
			stopMember(err)
		}
	}()
	defer func() { stopView(); <-viewDone }()

	m, err := processor.New(tr, v, "node-1", []codec.Role{"reporter"},
		processor.Options{Settings: settings, Logger: log})
	if err != nil {
		panic(err)
	}
	// Run blocks until memberCtx ends, then resigns, so the next member
	// takes over at once. The work runs while this member holds the role;
	// its ctx ends when the role is lost.
	err = m.Run(memberCtx, func(ctx context.Context, held processor.Held) error {
		w := tr.Writer(held.Role, held.Token) // writes under this holding's token
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
	if err == nil && ctx.Err() == nil { // not interrupted: the view failed
		err = context.Cause(memberCtx)
	}
	if err != nil {
		log.Error("stopped", "err", err)
	}
}

// A consume-transform-produce processor, exactly once across failovers:
// the member that holds the role "uppercase" reads the topic "words",
// and each batch is one transaction under its token that writes the
// uppercased records to "WORDS" and commits the input offsets of the
// group. tr, v, settings and log are set up as in the example above;
// examples/exactlyonce is the whole program.
func ExampleMember_Run_exactlyOnce() {
	var (
		ctx      context.Context          // ends on SIGINT or SIGTERM
		tr       *fencing.BrokerTransport // the member's transport, which the stream shares
		v        *view.View
		settings processor.Settings
		log      *slog.Logger
	)
	m, err := processor.New(tr, v, "node-1", []codec.Role{"uppercase"},
		processor.Options{Settings: settings, Logger: log})
	if err != nil {
		panic(err)
	}
	err = m.Run(ctx, func(ctx context.Context, held processor.Held) error {
		// Returns nil when ctx ends (the role was lost, or the member is
		// leaving), an error matching fencing.ErrFenced when a write was
		// refused because another member holds the role.
		return stream.Run(ctx, stream.Config{
			Transport: tr, // must be the transport that minted held.Token
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
