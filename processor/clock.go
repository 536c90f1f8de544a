package processor

import (
	"context"
	"time"
)

// Clock is the time source of a [Member]: the local clock, with its
// monotonic reading, injected so that tests drive time by hand.
// Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current local time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d
	// has passed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer of a [Clock].
type Timer interface {
	// C returns the channel the timer sends on; nil for an AfterFunc timer.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It returns false when the timer
	// has already fired or been stopped.
	Stop() bool
}

// SystemClock returns the system clock.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return sysTimer{time.AfterFunc(d, f)}
}

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time { return s.t.C }
func (s sysTimer) Stop() bool          { return s.t.Stop() }

// withTimeout is context.WithTimeout on clk: with the system clock it is
// exactly context.WithTimeout (so the deadline is visible to the transport);
// with another clock the context is cancelled when clk says d has passed.
func withTimeout(ctx context.Context, clk Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := clk.(systemClock); ok {
		return context.WithTimeout(ctx, d)
	}
	ctx, cancel := context.WithCancel(ctx)
	t := clk.AfterFunc(d, cancel)
	return ctx, func() { t.Stop(); cancel() }
}
