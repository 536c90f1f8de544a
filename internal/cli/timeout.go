package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
		return &noAnswer{Brokers: cfg.Brokers, Timeout: d, Writes: writes, Err: err}
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

// noAnswer is the error of a command whose cluster did not answer within
// its --timeout: no broker answered a request in time (a stopped or
// overloaded broker accepts connections and answers nothing).
type noAnswer struct {
	Brokers []string
	Timeout time.Duration
	Writes  bool  // the command writes: what it sent may still take effect
	Err     error // the error the command met, nil when it was abandoned
}

func (e *noAnswer) Error() string {
	msg := fmt.Sprintf("no answer from the brokers at %s within --timeout %v", strings.Join(e.Brokers, ","), e.Timeout)
	if e.Err != nil && !errors.Is(e.Err, context.DeadlineExceeded) && !errors.Is(e.Err, context.Canceled) {
		msg += " (" + rootCause(e.Err) + ")"
	} else {
		msg += " (" + silentBroker + ")"
	}
	if e.Writes {
		msg += "; a write sent may still take effect if the cluster answers later"
	}
	return msg
}

func (e *noAnswer) Unwrap() error { return e.Err }

// silentBroker is what a cluster that answers nothing most often is.
const silentBroker = "a stopped or overloaded broker accepts connections and answers nothing"
