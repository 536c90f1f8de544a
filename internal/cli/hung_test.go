package cli

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// exitBound is what `krole run`, serve, observe and table --watch promise:
// they return within it of an interrupt, whatever the cluster does.
const exitBound = 10 * time.Second

// hangCluster makes the cluster stop answering: faultnet holds every
// request to every broker from now on, as a SIGSTOPped cluster would. It
// returns once the hold has taken requests for longer than the view's
// health interval, so that the view's periodic probe is among them.
func hangCluster(t *testing.T, fn *faultnet.Net) {
	t.Helper()
	held := fn.Hold(faultnet.Rule{APIKey: faultnet.AnyKey, Node: faultnet.AnyNode})
	t.Cleanup(held.Release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, held.Wait(ctx, 1), "nothing was sent to the cluster")
	time.Sleep(1500 * time.Millisecond) // > view.DefaultHealthInterval: a probe is held too
	require.GreaterOrEqual(t, held.Count(), 2)
}

// TestReadersExitWhenTheClusterHangs: serve, observe and table --watch,
// interrupted while the cluster holds every request, return within
// exitBound with exit 0. Without the view's shut connections, the view's
// health probe stayed in sarama's RefreshMetadata for 50s.
func TestReadersExitWhenTheClusterHangs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"serve", []string{"serve", "--listen", "127.0.0.1:0"}},
		{"observe", []string{"observe", "db"}},
		{"table --watch", []string{"table", "--watch", "db"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fn := testcluster.StartFaulty(t, testcluster.Options{})
			m := c.Members(t)
			m.Register("db", "m1")
			m.Lease("db", "m1", time.Hour)
			b := startBackground(t, append(tc.args, clusterFlags(c)...)...)
			first := b.line("the first line")
			if tc.name == "serve" {
				require.True(t, strings.HasPrefix(first, "listening: "), first)
				require.Eventually(t, func() bool { return strings.Contains(b.stderr.String(), "view caught up") },
					30*time.Second, 10*time.Millisecond, "stderr: %s", b.stderr.String())
			}
			hangCluster(t, fn)
			stopped := time.Now()
			code := b.stop()
			took := time.Since(stopped)
			t.Logf("%s returned %d %v after the interrupt; stderr:\n%s", tc.name, code, took.Round(time.Millisecond), b.stderr.String())
			assert.Equal(t, ExitOK, code)
			assert.Less(t, took, exitBound, "returned %v after the interrupt", took)
		})
	}
}

// TestRunExitsWhenTheClusterHangs is the scenario (18.5) with
// processes: a holder and a candidate (`krole run`, a lease of 30s, so
// that each step of leaving is bounded by a transaction timeout of 15s),
// then the cluster stops answering (faultnet holds every request), then
// both get SIGTERM. Each exits 0 within ExitWithin, the holder's CMD
// stopped, and the holder's last line says that its release was not
// confirmed and when the lease runs out. Without the bound, krole run
// waited for its view's probe (50s) and for each step of leaving.
func TestRunExitsWhenTheClusterHangs(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "")
	c, fn := testcluster.StartFaulty(t, testcluster.Options{})
	out := filepath.Join(t.TempDir(), "cmds")
	flags := []string{"--lease-duration", "30s", "--heartbeat-interval", "1s", "--stagger", "1s"}
	a := startKroleWith(t, bin, c, "hung", "node-a", out, flags...)
	a.waitLine(t, 0, startedRE, 30*time.Second)
	cmdA := waitCmds(t, out, 1)[0]
	b := startKroleWith(t, bin, c, "hung", "node-b", out, flags...)
	b.waitLine(t, 0, regexp.MustCompile(`^krole run: campaigning for hung as node-b`), 30*time.Second)

	hangCluster(t, fn)
	stopped := time.Now()
	for _, p := range []*kroleProc{a, b} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range []*kroleProc{a, b} {
		select {
		case <-p.exited:
		case <-time.After(time.Minute):
			t.Fatalf("%s did not exit within a minute of SIGTERM", p.member)
		}
		took := time.Since(stopped)
		t.Logf("%s exited %d, %v after SIGTERM", p.member, p.state.ExitCode(), took.Round(time.Millisecond))
		assert.Equal(t, 0, p.state.ExitCode(), "%s: stderr:\n%s", p.member, p.stderr())
		assert.Less(t, took, ExitWithin, "%s exited %v after SIGTERM", p.member, took)
	}
	assert.False(t, processAlive(cmdA.pid), "node-a's CMD is gone")
	lines := strings.Split(strings.TrimSpace(a.stderr()), "\n")
	assert.Regexp(t, `^krole run: release of hung \(token \d+/\d+\) not confirmed: the cluster did not answer( within 8s)?; the lease runs out in at most 30s$`,
		lines[len(lines)-1], "node-a's last line")
	t.Logf("node-a:\n%s\nnode-b:\n%s", a.stderr(), b.stderr())
}

// TestReadersStartInterruptedWhenTheClusterHangs: serve, observe, table
// --watch and run started on a cluster that answers nothing (faultnet holds
// every request from the start), then interrupted: each returns within
// exitBound, exit 0. serve's check that a broker answers, and run's
// transport, took the client's timeouts (29s in the test) before, and
// exited 1.
func TestReadersStartInterruptedWhenTheClusterHangs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"serve", []string{"serve", "--listen", "127.0.0.1:0"}},
		{"observe", []string{"observe", "db"}},
		{"table --watch", []string{"table", "--watch", "db"}},
		{"run", []string{"run", "db", "--member", "m1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fn := testcluster.StartFaulty(t, testcluster.Options{})
			held := fn.Hold(faultnet.Rule{APIKey: faultnet.AnyKey, Node: faultnet.AnyNode})
			t.Cleanup(held.Release)
			b := startBackground(t, append(tc.args, clusterFlags(c)...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, held.Wait(ctx, 1), "nothing was sent to the cluster")
			time.Sleep(500 * time.Millisecond)
			stopped := time.Now()
			code := b.stop()
			took := time.Since(stopped)
			t.Logf("%s returned %d %v after the interrupt; stderr:\n%s", tc.name, code, took.Round(time.Millisecond), b.stderr.String())
			assert.Equal(t, ExitOK, code)
			assert.Less(t, took, exitBound, "returned %v after the interrupt", took)
		})
	}
}
