// Package interrupt turns SIGINT and SIGTERM into the cancellation of a
// command's context: the first signal asks the command to stop cleanly; a
// SIGTERM soon after it is the same request (supervisors send two); any
// later signal is a second request, which the caller answers by exiting
// at once.
package interrupt

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// RepeatWindow is how long after the first SIGINT or SIGTERM a SIGTERM is
// the same request to stop: GNU timeout, and other supervisors, send
// SIGTERM to the process and then to its process group, which holds it
// too. A SIGINT after the first signal, or a SIGTERM later than this, ends
// krole at once (see [Notify]).
const RepeatWindow = 2 * time.Second

// Interrupted is the cause of the context that [Notify] cancels:
// the signal that asked krole to stop. Commands read it with
// context.Cause, to say what stopped them.
type Interrupted struct {
	Signal syscall.Signal
}

func (e *Interrupted) Error() string { return "interrupted by " + signalName(e.Signal) }

// signalName is SIGINT or SIGTERM, as users know them.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// Notify returns a context that the first SIGINT or SIGTERM cancels,
// with an [*Interrupted] as its cause, so that a running command stops
// cleanly. A second signal that is not the same request (see
// [RepeatWindow]) is passed to second, from a goroutine of its own, and
// no signal after it. It does not block; a process calls it once.
func Notify(second func(syscall.Signal)) context.Context {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		var r repeats
		for s := range sigs {
			sig, _ := s.(syscall.Signal)
			switch r.next(sig, time.Now()) {
			case firstSignal:
				cancel(&Interrupted{Signal: sig})
			case secondRequest:
				second(sig)
				return
			}
		}
	}()
	return ctx
}

// A signal is the first, the same request as the first, or a second
// request.
type signalVerdict int

const (
	firstSignal signalVerdict = iota
	sameRequest
	secondRequest
)

// repeats tells a repeated request to stop from a second one.
type repeats struct {
	first time.Time // zero before the first signal
}

// next judges sig, received at now.
func (r *repeats) next(sig syscall.Signal, now time.Time) signalVerdict {
	switch {
	case r.first.IsZero():
		r.first = now
		return firstSignal
	case sig == syscall.SIGTERM && now.Sub(r.first) < RepeatWindow:
		return sameRequest
	}
	return secondRequest
}
