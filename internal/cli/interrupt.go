package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// RepeatWindow is how long after the first SIGINT or SIGTERM a SIGTERM is
// the same request to stop: GNU timeout, and other supervisors, send
// SIGTERM to the process and then to its process group, which holds it
// too. A SIGINT after the first signal, or a SIGTERM later than this, ends
// krole at once (see [SecondInterrupt]).
const RepeatWindow = 2 * time.Second

// Interrupted is the cause of the context that [NotifyInterrupts] cancels:
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

// NotifyInterrupts returns a context that the first SIGINT or SIGTERM
// cancels, with an [*Interrupted] as its cause, so that a running command
// stops cleanly. A second signal that is not the same request (see
// [RepeatWindow]) calls exit with the code [SecondInterrupt] returns,
// after its line on stderr. It does not block; main calls it once.
func NotifyInterrupts(stderr io.Writer, args []string, exit func(int)) context.Context {
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
				exit(SecondInterrupt(stderr, args, sig))
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

// SecondInterrupt says, on stderr, that a second SIGINT or SIGTERM ends
// krole at once, and returns the exit code for main to exit with: 128 +
// the signal's number (130 for SIGINT, 143 for SIGTERM), as shells report
// a process that the signal killed. It comes while a command is still
// stopping after the first signal (`krole run` stopping CMD within
// --kill-timeout, say). For `krole run` it says what is skipped: the
// resignation, so the role passes on when the lease ends; CMD's process
// tree is stopped by the watchdog, which outlives krole (see krole run
// --help and package supervise).
func SecondInterrupt(stderr io.Writer, args []string, sig syscall.Signal) int {
	msg := "krole: interrupted again: exiting now, without finishing the clean-up\n"
	if commandOf(args) == "run" {
		msg = "krole run: interrupted again: exiting now without resigning; the watchdog stops CMD's process tree " +
			"(SIGTERM, then SIGKILL after --kill-timeout), and the role passes on when the lease ends\n"
	}
	fmt.Fprint(stderr, msg)
	return 128 + int(sig)
}

// commandOf returns the first argument that names a command, "" when none
// does. It skips flags and their values only roughly, which is enough to
// pick the message above.
func commandOf(args []string) string {
	names := map[string]bool{}
	for _, c := range commands() {
		for _, n := range c.Names() {
			names[n] = true
		}
	}
	for _, a := range args {
		if a == "--" {
			return ""
		}
		if names[a] {
			return a
		}
	}
	return ""
}
