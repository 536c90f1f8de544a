package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// inBackground runs the app in-process with args until the returned stop is
// called (as SIGINT would end it), and returns its stdout and stderr.
func inBackground(t *testing.T, args ...string) (stdout, stderr *testcluster.SyncBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = &testcluster.SyncBuffer{}, &testcluster.SyncBuffer{}
	done := startApp(t, ctx, args, stdout, stderr)
	var code *int
	stop = func() int {
		if code == nil {
			cancel()
			select {
			case c := <-done:
				code = &c
			case <-time.After(time.Minute):
				t.Fatalf("%v did not stop within a minute", args)
			}
		}
		return *code
	}
	t.Cleanup(func() { stop() })
	return stdout, stderr, stop
}

// awaitText waits until buf holds s, failing t after a minute.
func awaitText(t *testing.T, buf *testcluster.SyncBuffer, s, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(buf.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q within a minute; got:\n%s", what, s, buf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// While the cluster is unreachable, a member says so in one line with the
// role it affects, and in one more when the cluster answers again: not
// sarama's error at every retry. observe, serve and table --watch do the
// same in their own style, never as raw slog lines.
func TestOutageIsOneLineAndOneWhenItEnds(t *testing.T) {
	t.Parallel()
	if testcluster.External() {
		t.Skip("stops and restarts the embedded cluster")
	}
	addrs, _, stopDev := startDevStderr(t, "--listen", "127.0.0.1:0")
	b := []string{"--brokers", addrs}

	// One after the other: urfave/cli parses flags into package-level
	// state (its help flag), which two apps starting at once race on.
	_, runErr, stopRun := inBackground(t, append([]string{"run", "ctl", "--member", "n1", "--lease-duration", "2s"}, b...)...)
	awaitText(t, runErr, "krole run: elected ctl as n1", "run")
	obsOut, obsErr, stopObs := inBackground(t, append([]string{"observe", "ctl"}, b...)...)
	awaitText(t, obsOut, "ctl held by n1", "observe")
	_, srvErr, stopSrv := inBackground(t, append([]string{"serve", "--listen", "127.0.0.1:0"}, b...)...)
	awaitText(t, srvErr, "krole serve: view caught up", "serve")
	tblOut, tblErr, stopTbl := inBackground(t, append([]string{"table", "--watch", "ctl"}, b...)...)
	awaitText(t, tblOut, `"member":"n1"`, "table --watch")

	stopDev()
	awaitText(t, runErr, "krole run: cluster unreachable since ", "run")
	awaitText(t, obsErr, "krole observe: cluster unreachable since ", "observe")
	awaitText(t, srvErr, "krole serve: cluster unreachable since ", "serve")
	awaitText(t, tblErr, "krole table: cluster unreachable since ", "table --watch")
	// The member retries meanwhile (every retry a warning, before); give
	// it some.
	time.Sleep(2 * time.Second)

	addrs2, _, stopDev2 := startDevStderr(t, "--listen", addrs)
	require.Equal(t, addrs, addrs2)
	awaitText(t, runErr, "krole run: the cluster answers again, at ", "run")
	awaitText(t, obsErr, "krole observe: the cluster answers again, at ", "observe")
	awaitText(t, srvErr, "krole serve: the cluster answers again, at ", "serve")
	awaitText(t, tblErr, "krole table: the view is current again", "table --watch")
	assert.Equal(t, ExitOK, stopRun())
	assert.Equal(t, ExitOK, stopObs())
	assert.Equal(t, ExitOK, stopSrv())
	assert.Equal(t, ExitOK, stopTbl())
	stopDev2()

	ended := map[string]string{"run": "the cluster answers again", "observe": "the cluster answers again",
		"serve": "the cluster answers again", "table": "the view is current again"}
	for name, buf := range map[string]*testcluster.SyncBuffer{"run": runErr, "observe": obsErr, "serve": srvErr, "table": tblErr} {
		s := buf.String()
		assert.Equal(t, 1, strings.Count(s, "cluster unreachable since"), "%s: one line per outage:\n%s", name, s)
		assert.Equal(t, 1, strings.Count(s, ended[name]), "%s: one line when it ends:\n%s", name, s)
		assert.NotContains(t, s, "level=", "%s: no raw slog lines", name)
		assert.NotContains(t, s, "run out of available brokers", "%s: no sarama error at every retry", name)
		for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
			assert.True(t, strings.HasPrefix(line, "krole "+name+": "), "%s: a line in the command's style: %q", name, line)
		}
	}
	assert.Contains(t, runErr.String(), "ctl can be neither renewed nor taken until it answers")
	assert.Contains(t, obsErr.String(), "the holder shown is the one as of then")
}
