package interrupt

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRepeatedSIGTERMIsOneRequest: a SIGTERM within RepeatWindow of the
// first signal is the same request to stop; a SIGINT after the first
// signal, or a SIGTERM after the window, is a second one.
func TestRepeatedSIGTERMIsOneRequest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		first  syscall.Signal
		second syscall.Signal
		after  time.Duration
		want   signalVerdict
	}{
		{"SIGTERM to the process, then to its group", syscall.SIGTERM, syscall.SIGTERM, time.Millisecond, sameRequest},
		{"SIGINT, then a supervisor's SIGTERM", syscall.SIGINT, syscall.SIGTERM, RepeatWindow / 2, sameRequest},
		{"SIGTERM well after the first", syscall.SIGTERM, syscall.SIGTERM, RepeatWindow, secondRequest},
		{"a second Ctrl-C", syscall.SIGINT, syscall.SIGINT, time.Millisecond, secondRequest},
		{"Ctrl-C after a SIGTERM", syscall.SIGTERM, syscall.SIGINT, time.Millisecond, secondRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r repeats
			require.Equal(t, firstSignal, r.next(tc.first, t0))
			assert.Equal(t, tc.want, r.next(tc.second, t0.Add(tc.after)))
		})
	}
}
