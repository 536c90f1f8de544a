package cli

import (
	"context"
	"fmt"
	"io"
	"syscall"

	"github.com/krabka/krole/internal/interrupt"
)

// RepeatWindow is how long after the first SIGINT or SIGTERM a SIGTERM is
// the same request to stop (see package interrupt).
const RepeatWindow = interrupt.RepeatWindow

// NotifyInterrupts returns a context that the first SIGINT or SIGTERM
// cancels, with an [*interrupt.Interrupted] as its cause, so that a
// running command stops cleanly. A second signal that is not the same
// request (see [RepeatWindow]) calls exit with the code [SecondInterrupt]
// returns, after its line on stderr. It does not block; main calls it
// once.
func NotifyInterrupts(stderr io.Writer, args []string, exit func(int)) context.Context {
	return interrupt.Notify(func(sig syscall.Signal) { exit(SecondInterrupt(stderr, args, sig)) })
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
