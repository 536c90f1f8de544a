package cli

import (
	"context"
	"errors"
	"time"

	"github.com/krabka/krole/internal/explain"
	ucli "github.com/urfave/cli/v2"
)

// DefaultTimeout is the default --timeout of the one-shot commands
// (describe, records, register, resign, init; leader and table bound their
// wait for the view with the same default, DefaultTableTimeout).
const DefaultTimeout = 30 * time.Second

// timeoutFlag is the --timeout of a one-shot command that [withTimeout]
// bounds.
func timeoutFlag() ucli.Flag {
	return &ucli.DurationFlag{Name: "timeout", Value: DefaultTimeout,
		Usage: "give up (exit 1) when the cluster has not answered within `D` (0: wait as long as it takes)"}
}

// errTimeoutPassed is the cause of the context of a command whose
// --timeout passed.
var errTimeoutPassed = errors.New("--timeout passed")

// withTimeout bounds action by the command's --timeout: c.Context ends
// when it passes, each request's timeouts are cut to it (configFrom), and
// the command returns then, with a [*noAnswer] error, even from a call
// that does not take a context (sarama's admin calls): that call is
// abandoned, and the process exits. writes says whether the command
// writes, so that the error says what it sent may still take effect.
func withTimeout(action ucli.ActionFunc, writes bool) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		d := c.Duration("timeout")
		if d < 0 {
			return Usagef(c, "--timeout %v: must not be negative", d)
		}
		if d == 0 {
			return action(c)
		}
		cfg, err := configFrom(c)
		if err != nil {
			return err
		}
		parent := c.Context
		ctx, cancel := context.WithTimeoutCause(parent, d, errTimeoutPassed)
		defer cancel()
		c.Context = ctx
		type result struct {
			err   error
			panic any // re-raised here, for Run to report
		}
		done := make(chan result, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					done <- result{panic: p}
				}
			}()
			done <- result{err: action(c)}
		}()
		var r result
		select {
		case r = <-done:
		case <-ctx.Done():
			select {
			case r = <-done: // it returned with the deadline: its error says more
			case <-time.After(100 * time.Millisecond):
				r.err = ctx.Err()
			}
		}
		if r.panic != nil {
			panic(r.panic)
		}
		err = r.err
		var ue *UsageError
		if err == nil || errors.As(err, &ue) || parent.Err() != nil || context.Cause(ctx) != errTimeoutPassed {
			return err
		}
		return &explain.NoAnswer{Brokers: cfg.Brokers, Timeout: d, Writes: writes, Err: err}
	}
}

// deadlineTimeouts cuts cfg's dial and request timeouts to what is left
// of ctx's deadline, if it has one, so that a call that takes no context
// gives up by then too.
func deadlineTimeouts(ctx context.Context, dial, request *time.Duration) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	left := max(time.Until(dl), time.Millisecond)
	*dial, *request = min(*dial, left), min(*request, left)
}
