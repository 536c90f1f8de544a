package processor_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
)

// A processor that runs while its member holds the role "controller".
// The transport is a fencing.BrokerTransport and the source the goka view
// in a real program; TransportSource stands in for the view here.
func ExampleMember_Run() {
	var transport fencing.Transport // fencing.BrokerTransport, connected
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	m, err := processor.New(transport, &processor.TransportSource{Transport: transport},
		"node-1", []codec.Role{"controller"}, processor.Options{
			Settings:   processor.Settings{LeaseDuration: 5 * time.Second},
			Logger:     slog.Default(),
			Registerer: prometheus.NewRegistry(),
			OnEvent:    func(e processor.Event) { fmt.Println(e) },
		})
	if err != nil {
		panic(err)
	}
	// Run blocks until ctx ends; on the way out it resigns, so the next
	// member takes over at once.
	_ = m.Run(ctx, func(ctx context.Context, held processor.Held) error {
		// Lead until ctx ends. Pass held.Token to every fenced write.
		<-ctx.Done()
		return nil
	})
}
