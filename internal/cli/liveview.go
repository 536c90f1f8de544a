package cli

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/view"
)

// liveView is a view of the role topic that the global flags name, running
// in the background for `krole table` and `krole serve`.
type liveView struct {
	*view.View
	cfg    fencing.Config
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // Run's error, explained; read after done

	outage *outage // reports when the cluster is unreachable, and when it answers again

	mu     sync.Mutex
	denied error // the authorization failure that stopped the view
}

// outageAffects says, per command, what an outage stops (see outage).
var outageAffects = map[string]string{
	"observe": "the holder shown is the one as of then, and changes show once it answers",
	"serve":   "the page and the API answer with the table as of then",
	"leader":  "the answer waits for it",
}

// outageCheckEvery is how often a command compares its view's health
// with the outage it reported.
const outageCheckEvery = 500 * time.Millisecond

// startView starts a view of the role topic (with its table on disk under
// stateDir when set) and returns at once. Its warnings go to the command's
// stderr. It runs until [liveView.stop], not until c.Context ends, so that
// the command decides what stops first.
func startView(c *ucli.Context, stateDir string) (*liveView, error) {
	cfg, err := configFrom(c)
	if err != nil {
		return nil, err
	}
	lv := &liveView{cfg: cfg, done: make(chan struct{})}
	// The view's warnings, in the command's style ("krole observe: warn:
	// ..."); while the cluster is unreachable, one line when that begins
	// and one when it ends instead of a warning at every retry.
	lw := &lineWriter{w: stderr(c), prefix: "krole " + c.Command.Name}
	lv.outage = newOutage(lw, outageAffects[c.Command.Name])
	lv.outage.quiet = c.Command.Name == "table" // table says it in its own lines (noteHealth, the frame)
	logger := slog.New(newAuthzStop(lv.outage.handler(&lineHandler{lw: lw, level: slog.LevelWarn}), cfg.Topic, lv.deny))
	// A TLS handshake that cannot succeed fails the command at once; the
	// view would retry it.
	if err := fencing.CheckTLS(c.Context, cfg); err != nil {
		return nil, explainRunError(cfg, err)
	}
	v, err := view.New(view.Options{Config: cfg, StateDir: stateDir, Logger: logger})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Context))
	lv.View, lv.cancel = v, cancel
	go lv.outage.follow(ctx, v.Health, outageCheckEvery)
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
			lv.err = explainRunError(cfg, err)
		}
	}()
	return lv, nil
}

// deny stops the view for an authorization failure, which becomes its
// error: no retry of the view's can add the ACL.
func (lv *liveView) deny(err error) {
	lv.mu.Lock()
	lv.denied = err
	lv.mu.Unlock()
	if lv.cancel != nil { // set before the view runs, which is when it logs
		lv.cancel()
	}
}

// ready waits until the view has caught up with the role topic. It fails
// with the view's own error when the view stops first (no broker, no
// topic), and when timeout (0: none) passes or ctx ends first.
func (lv *liveView) ready(ctx context.Context, timeout time.Duration) error {
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
		stuck := &viewStuck{Topic: lv.cfg.Topic, Brokers: lv.cfg.Brokers, Timeout: timeout, LastAnswer: lv.Health().LastContact}
		pctx, cancel := context.WithTimeout(ctx, stuckProbeTimeout)
		open, perr := openTransactions(pctx, lv.cfg)
		cancel()
		if perr == nil {
			stuck.Open = open
			if stuck.LastAnswer.IsZero() {
				stuck.LastAnswer = time.Now() // the view's own requests got none, the probe's did
			}
		}
		return stuck
	}
	return explainRunError(lv.cfg, err)
}

// stop stops the view, waits for it and returns Run's error, explained
// (nil when it only stopped because it was asked to).
func (lv *liveView) stop() error {
	lv.cancel()
	<-lv.done
	return lv.err
}

// viewTimeout reads --timeout, the bound of a command's wait for its view
// to catch up; a negative one is a usage error.
func viewTimeout(c *ucli.Context) (time.Duration, error) {
	timeout := c.Duration("timeout")
	if timeout < 0 {
		return 0, Usagef(c, "--timeout %v: must not be negative", timeout)
	}
	return timeout, nil
}

// viewTimeoutFlag is --timeout of the commands that read a view of the
// role topic: the bound of the wait for it to catch up.
func viewTimeoutFlag() ucli.Flag {
	return &ucli.DurationFlag{Name: "timeout", Value: DefaultTableTimeout,
		Usage: "give up when the view has not caught up with the topic within `D` (0: wait as long as it takes)"}
}

// readyView reads --timeout, runs check (when not nil) on the command's
// other flags, starts a view of the role topic and waits up to --timeout
// for it to catch up. The caller stops the view. When the wait fails, the
// view is stopped and, with quiet and c.Context ended (an interrupt),
// readyView returns a nil view and a nil error: the command ends without
// one.
func readyView(c *ucli.Context, check func() error, quiet bool) (*liveView, error) {
	timeout, err := viewTimeout(c)
	if err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, err
		}
	}
	lv, err := startView(c, "")
	if err != nil {
		return nil, err
	}
	if err := lv.ready(c.Context, timeout); err != nil {
		lv.stop()
		if quiet && c.Context.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	return lv, nil
}
