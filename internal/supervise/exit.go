package supervise

import (
	"fmt"
	"syscall"
)

// ExitText says how a command ended, given its exit code as
// [Child.ExitCode] reports it (128+signal when a signal ended it), in
// words that follow "exited": "with code 1", or "(killed by SIGKILL:
// killed)".
func ExitText(code int) string {
	if code > 128 {
		sig := syscall.Signal(code - 128)
		name := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
		if name == "" {
			name = fmt.Sprintf("signal %d", int(sig))
		}
		return fmt.Sprintf("(killed by %s: %v)", name, sig)
	}
	return fmt.Sprintf("with code %d", code)
}
