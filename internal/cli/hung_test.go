package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// exitBound is what `krole run`, serve, observe and table --watch promise:
// they return within it of an interrupt, whatever the cluster does
// (issue 18, section 5).
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
