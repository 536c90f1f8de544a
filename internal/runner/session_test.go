package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/cmdlog"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// TestTokenRetiredInWords: a holding whose renewal got no definite answer
// (the interrupt cut it short, during an outage say) ends with one line
// in krole's words; the transport's error shows only with --verbose.
func TestTokenRetiredInWords(t *testing.T) {
	cause := &fencing.Error{Kind: fencing.ErrUnknownOutcome, Role: "session/node-1",
		Err: errors.New("AddPartitionsToTxn under token 7/0 got no answer: the token is retired")}
	ev := processor.Event{Kind: processor.Revoked, Role: "ctl", Member: "node-1", Token: codec.Token{ProducerID: 7},
		Reason: processor.ReasonTokenRetired, Err: cause}
	for _, tc := range []struct {
		name    string
		leaving bool
		verbose bool
		want    string
	}{
		{"during an outage", false, false, "krole run: revoked ctl (token 7/0): a renewal got no definite answer from the cluster, " +
			"so the token is retired: nothing more is written under it\n"},
		{"interrupted", true, false, "krole run: revoked ctl (token 7/0): the renewal under way when interrupted got no answer, " +
			"so the token is retired: nothing more is written under it\n"},
		{"verbose", false, true, "krole run: revoked ctl (token 7/0): a renewal got no definite answer from the cluster, " +
			"so the token is retired: nothing more is written under it (unknown outcome: role session/node-1: " +
			"AddPartitionsToTxn under token 7/0 got no answer: the token is retired)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			leaving, stop := context.WithCancel(context.Background())
			defer stop()
			if tc.leaving {
				stop()
			}
			s := &session{what: "ctl", me: "node-1", lines: cmdlog.NewLines(&out, ""), leaving: leaving, verbose: tc.verbose}
			s.onEvent(ev)
			assert.Equal(t, tc.want, out.String())
		})
	}
}

// The line of a revocation for a fence says "fenced" once, from the
// error's kind (errors.Is), not from its text: a cause that is not
// fencing.ErrFenced (the transport forgot the token, ErrNotHeld) is said
// to be a fence even when its text mentions one.
func TestRunRevokedFencedLine(t *testing.T) {
	role := codec.Role("svc")
	tok := codec.Token{ProducerID: 7, Epoch: 3}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no cause", nil, "fenced"},
		{"broker fence", fencing.Fenced(role, errors.New("PRODUCER_FENCED")), "fenced: another member holds role svc"},
		{"view shows a newer token", fmt.Errorf("%w: the view shows node-2 holding under newer token 7/4 (ours 7/3)", fencing.ErrFenced),
			"fenced: the view shows node-2 holding under newer token 7/4 (ours 7/3)"},
		{"token forgotten", &fencing.Error{Kind: fencing.ErrNotHeld, Role: role, Err: errors.New("forgotten after a fenced write")},
			"fenced: not held: role svc: forgotten after a fenced write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			s := &session{what: string(role), me: "node-1", lines: cmdlog.NewLines(&buf, "")}
			s.onEvent(processor.Event{Kind: processor.Revoked, Role: role, Member: "node-1", Token: tok, Reason: processor.ReasonFenced, Err: tc.err})
			assert.Equal(t, "krole run: revoked svc (token 7/3): "+tc.want+"\n", buf.String())
		})
	}
}

// A CMD starts through the standby watchdog when one is ready, with the
// holding's environment, and the next one is readied as it starts; after
// closeStandby none is left, and a CMD starts with a watchdog of its own.
func TestCmdStartsThroughTheStandbyWatchdog(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a standby is readied on Linux only")
	}
	var out testcluster.SyncBuffer
	s := &session{path: "sh", args: []string{"-c", `echo "$KROLE_EPOCH $(tr '\0' ' ' < /proc/$PPID/cmdline)"`},
		kill: time.Second, stdout: &out, stderr: &out}
	s.prepareStandby()
	start := func(epoch string) {
		c, err := s.startCmd([]string{"KROLE_EPOCH=" + epoch})
		require.NoError(t, err)
		<-c.Done()
		s.prep.Wait() // the next standby, readied
	}
	start("3")
	start("4")
	s.closeStandby()
	assert.Nil(t, s.standby)
	start("5")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String())
	for i, epoch := range []string{"3", "4", "5"} {
		assert.True(t, strings.HasPrefix(lines[i], epoch+" "), "the holding's environment: %q", lines[i])
		assert.Contains(t, lines[i], supervise.WatchdogCommand+" ", "CMD's parent is a watchdog: %q", lines[i])
		if i < 2 {
			assert.Contains(t, lines[i], " -standby ", "started through a standby: %q", lines[i])
		} else {
			assert.NotContains(t, lines[i], " -standby ", "no standby after closeStandby: %q", lines[i])
		}
	}
}
