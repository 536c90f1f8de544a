// Package liveview runs a view of the role topic in the background for
// the commands that read one (table, observe, leader, prune, serve): its
// warnings go to the command's stderr in the command's style, one line
// when the cluster becomes unreachable and one when it answers again; an
// authorization failure stops it; and Ready waits for its catch-up, or
// says what it saw instead.
package liveview

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/cmdlog"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/view"
)

// View is a view of the role topic running in the background for a
// command.
type View struct {
	*view.View
	cfg    fencing.Config
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // Run's error, explained; read after done

	outage *cmdlog.Outage // reports when the cluster is unreachable, and when it answers again

	mu     sync.Mutex
	denied error // the authorization failure that stopped the view
}

// outageAffects says, per command, what an outage stops (see
// cmdlog.Outage).
var outageAffects = map[string]string{
	"observe": "the holder shown is the one as of then, and changes show once it answers",
	"serve":   "the page and the API answer with the table as of then",
	"leader":  "the answer waits for it",
}

// Options say which view a command starts and where its lines go.
type Options struct {
	Config   fencing.Config // the cluster and the role topic
	StateDir string         // when set, the view keeps its table on disk there
	Stderr   io.Writer      // the command's warnings, "krole COMMAND: ..."
	Command  string         // the command's name, for its lines
}

// Start starts a view of the role topic and returns at once. It runs
// until [View.Stop], not until ctx ends, so that the command decides what
// stops first; ctx bounds only the TLS check before it starts.
func Start(ctx context.Context, o Options) (*View, error) {
	cfg := o.Config
	lv := &View{cfg: cfg, done: make(chan struct{})}
	// The view's warnings, in the command's style ("krole observe: warn:
	// ..."); while the cluster is unreachable, one line when that begins
	// and one when it ends instead of a warning at every retry.
	lw := cmdlog.NewLines(o.Stderr, "krole "+o.Command)
	lv.outage = cmdlog.NewOutage(lw, outageAffects[o.Command])
	lv.outage.Quiet = o.Command == "table" // table says it in its own lines (render.NoteHealth, the frame)
	logger := slog.New(cmdlog.NewAuthzStop(lv.outage.Wrap(cmdlog.NewHandler(lw, slog.LevelWarn)), cfg.Topic, lv.deny))
	// A TLS handshake that cannot succeed fails the command at once; the
	// view would retry it.
	if err := fencing.CheckTLS(ctx, cfg); err != nil {
		return nil, explain.RunError(cfg, err)
	}
	v, err := view.New(view.Options{Config: cfg, StateDir: o.StateDir, Logger: logger})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lv.View, lv.cancel = v, cancel
	go lv.outage.Follow(ctx, v.Health, cmdlog.OutageCheckEvery)
	go func() {
		defer close(lv.done)
		err := v.Run(ctx)
		lv.mu.Lock()
		denied := lv.denied
		lv.mu.Unlock()
		switch {
		case denied != nil:
			lv.err = denied
		case err != nil:
			lv.err = explain.RunError(cfg, err)
		}
	}()
	return lv, nil
}

// deny stops the view for an authorization failure, which becomes its
// error: no retry of the view's can add the ACL.
func (lv *View) deny(err error) {
	lv.mu.Lock()
	lv.denied = err
	lv.mu.Unlock()
	if lv.cancel != nil { // set before the view runs, which is when it logs
		lv.cancel()
	}
}

// Ready waits until the view has caught up with the role topic. It fails
// with the view's own error when the view stops first (no broker, no
// topic), and when timeout (0: none) passes or ctx ends first.
func (lv *View) Ready(ctx context.Context, timeout time.Duration) error {
	var wctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
	} else {
		wctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	// A lookup waits for the view's first catch-up, which the view retries
	// on its own when a probe of the topic's end fails.
	caught := make(chan error, 1)
	go func() {
		_, err := lv.Roles(wctx)
		caught <- err
	}()
	var err error
	select {
	case err = <-caught:
	case <-lv.done:
		cancel()
		<-caught
		err = view.ErrStopped
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, view.ErrStopped):
		<-lv.done
		if lv.err != nil {
			return lv.err
		}
		return err
	case errors.Is(err, context.DeadlineExceeded):
		// Say what was seen: no answer at all, or answers without a
		// catch-up (an open transaction, when one shows).
		stuck := &explain.ViewStuck{Topic: lv.cfg.Topic, Brokers: lv.cfg.Brokers, Timeout: timeout, LastAnswer: lv.Health().LastContact}
		pctx, cancel := context.WithTimeout(ctx, explain.StuckProbeTimeout)
		open, perr := explain.OpenTransactions(pctx, lv.cfg)
		cancel()
		if perr == nil {
			stuck.Open = open
			if stuck.LastAnswer.IsZero() {
				stuck.LastAnswer = time.Now() // the view's own requests got none, the probe's did
			}
		}
		return stuck
	}
	return explain.RunError(lv.cfg, err)
}

// Stop stops the view, waits for it and returns Run's error, explained
// (nil when it only stopped because it was asked to).
func (lv *View) Stop() error {
	lv.cancel()
	<-lv.done
	return lv.err
}

// Config is the configuration the view reads the topic with.
func (lv *View) Config() fencing.Config { return lv.cfg }

// Done is closed when the view has stopped, asked to or not; [View.Err]
// then says why.
func (lv *View) Done() <-chan struct{} { return lv.done }

// Err is the view's error, explained, once Done is closed: nil when it
// only stopped because it was asked to.
func (lv *View) Err() error { return lv.err }
