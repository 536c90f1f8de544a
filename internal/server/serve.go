package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/krabka/krole/view"
)

// serveShutdownTimeout bounds how long [Serve] waits for requests in
// flight when it stops.
const serveShutdownTimeout = 5 * time.Second

// Running is how the view that [Serve] answers from stops: package
// liveview's View is one.
type Running interface {
	// Done is closed when the view has stopped; Err then says why (nil:
	// it was asked to).
	Done() <-chan struct{}
	Err() error
	// Stop stops the view and returns Err.
	Stop() error
}

// ServeOptions say what [Serve] shows and where its lines go.
type ServeOptions struct {
	Source  Source        // what /v1/source and the lines name
	History time.Duration // the window of each role's history
	Stdout  io.Writer     // the "listening:" line
	Stderr  io.Writer     // notes, "krole serve: ...", and the HTTP server's errors
}

// Serve is `krole serve` once its view runs: it serves the API, the page
// and the metrics of v (run says when it stops) on ln, keeps each role's
// history, and prints where it listens, until ctx ends (nil), the view
// stops or serving fails (an error). It then shuts the server down,
// giving requests in flight a few seconds, and stops the view.
func Serve(ctx context.Context, ln net.Listener, v *view.View, run Running, o ServeOptions) error {
	hist := NewHistory(o.History, 0, nil)
	tbl := WithSessions(v) // candidates' sessions, for their "gone"
	h, err := New(tbl, Options{Source: o.Source, History: hist})
	if err != nil {
		return err
	}
	histCtx, stopHistory := context.WithCancel(context.WithoutCancel(ctx))
	histDone := make(chan struct{})
	go func() {
		defer close(histDone)
		_ = hist.Run(histCtx, tbl) // ends with histCtx, or when the view stops
	}()
	defer func() { stopHistory(); <-histDone }()
	// Requests run on base: cancelling it ends the event streams, which
	// would otherwise keep Shutdown waiting.
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          log.New(o.Stderr, "krole serve: http: ", 0),
	}
	srv.RegisterOnShutdown(cancelRequests)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	if _, err := fmt.Fprintf(o.Stdout, "listening: http://%s\n", ln.Addr()); err != nil {
		return err
	}
	fmt.Fprintf(o.Stderr, "krole serve: following topic %s at %s; Ctrl-C stops\n", o.Source.Topic, strings.Join(o.Source.Brokers, ","))
	caught := make(chan struct{})
	go func() {
		defer close(caught)
		if _, err := v.Roles(ctx); err == nil {
			fmt.Fprintf(o.Stderr, "krole serve: view caught up: %d role(s)\n", v.Stats().Roles)
		}
	}()

	var failure error
	select {
	case <-ctx.Done():
	case <-run.Done():
		err := run.Err()
		if err == nil {
			err = view.ErrStopped
		}
		failure = fmt.Errorf("following the role topic: %w", err)
	case err := <-served:
		failure = fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), serveShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) && failure == nil {
		failure = err
	}
	_ = srv.Close()
	if err := run.Stop(); err != nil && failure == nil {
		failure = fmt.Errorf("following the role topic: %w", err)
	}
	<-caught
	if failure == nil {
		fmt.Fprintln(o.Stderr, "krole serve: stopped")
	}
	return failure
}
