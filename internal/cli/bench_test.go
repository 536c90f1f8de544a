package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/internal/runner"
)

// checkBenchResult checks the shape of one -o json result of krole bench:
// its kind, n positive samples in order, and statistics that are samples
// in order. It never looks at how fast anything was.
func checkBenchResult(t *testing.T, out string, kind string, n int) chart.Result {
	t.Helper()
	var r chart.Result
	require.NoError(t, json.Unmarshal([]byte(out), &r), "stdout: %s", out)
	assert.Equal(t, kind, r.Kind)
	assert.Equal(t, "krole", r.System)
	require.Len(t, r.SamplesMS, n)
	assert.True(t, sort.Float64sAreSorted(r.SamplesMS), "samples in order: %v", r.SamplesMS)
	for _, s := range r.SamplesMS {
		assert.Greater(t, s, 0.0)
	}
	assert.Equal(t, r.SamplesMS[0], r.MinMS)
	assert.Equal(t, r.SamplesMS[n-1], r.MaxMS)
	assert.True(t, sort.Float64sAreSorted([]float64{r.MinMS, r.MedianMS, r.P90MS, r.P99MS, r.MaxMS}), "%+v", r.Stats)
	assert.Contains(t, r.SamplesMS, r.MedianMS)
	assert.NotEmpty(t, r.Settings)
	// The raw object has exactly the documented names.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	for _, k := range []string{"kind", "samples_ms", "min_ms", "median_ms", "p90_ms", "p99_ms", "max_ms", "settings"} {
		assert.Contains(t, raw, k)
	}
	return r
}

// benchBin runs the krole binary with args and returns its stdout; it
// fails the test unless the binary exits 0.
func benchBin(t *testing.T, bin string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cmd.Environ(), runner.ClearedEnv()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "krole %v: stderr %s", args, stderr.String())
	return stdout.String(), stderr.String()
}

// TestBench runs each subcommand of krole bench with tiny rounds, on its
// embedded cluster, and checks the output's shape, so that the bench keeps
// working.
func TestBench(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "")
	dir := t.TempDir()

	t.Run("handover", func(t *testing.T) {
		svg := filepath.Join(dir, "handover.svg")
		out, errOut := benchBin(t, bin, "bench", "handover", "--members", "2", "--rounds", "2", "--lease-duration", "2s", "-o", "json", "--chart", svg)
		r := checkBenchResult(t, out, "handover", 2)
		assert.Equal(t, "SIGTERM", r.Settings["signal"])
		assert.Contains(t, errOut, "handover round 2/2", "the progress line")
		b, err := os.ReadFile(svg)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(b), "<svg "), "%.80s", b)
		assert.Equal(t, 2, strings.Count(string(b), "<circle"), "one dot per sample")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "handover.json"), []byte(out), 0o644))
	})

	t.Run("failover", func(t *testing.T) {
		out, _ := benchBin(t, bin, "bench", "failover", "--members", "2", "--rounds", "1", "--lease-duration", "1s", "-o", "json")
		r := checkBenchResult(t, out, "failover", 1)
		require.NotNil(t, r.PastDeadline, "failover reports how far past the deadline the new holder acts")
		assert.Len(t, r.PastDeadline.SamplesMS, 1)
		assert.Equal(t, "SIGKILL", r.Settings["signal"])
		// A lease can only be taken over after it ran out, so the new
		// holder never acts before the dead one's deadline (the writer's
		// and the challenger's clocks are this machine's).
		assert.GreaterOrEqual(t, r.PastDeadline.MinMS, 0.0)
	})

	t.Run("acquire", func(t *testing.T) {
		r := run(t, "bench", "acquire", "--rounds", "3", "-o", "json")
		requireOK(t, r)
		checkBenchResult(t, r.Stdout, "acquire", 3)
		r = run(t, "bench", "acquire", "--rounds", "2")
		requireOK(t, r)
		assert.Regexp(t, `^krole acquire +n=2 +min [0-9.]+ +median [0-9.]+ +p90 [0-9.]+ +p99 [0-9.]+ +max [0-9.]+ ms\n`, r.Stdout)
		assert.Regexp(t, `(?m)^ +phase write_lease +median [0-9.]+ `, r.Stdout, "where the time went")
		r = run(t, "bench", "acquire", "--running", "--rounds", "3", "-o", "json")
		requireOK(t, r)
		res := checkBenchResult(t, r.Stdout, "acquire", 3)
		assert.Contains(t, res.Settings["member"], "Member.Add", "a running member takes one more role")
	})

	t.Run("renew", func(t *testing.T) {
		out, _ := benchBin(t, bin, "bench", "renew", "--roles", "3", "--lease-duration", "1s", "--duration", "1s", "-o", "json")
		r := checkBenchResult(t, out, "renew", len(func() []float64 {
			var x chart.Result
			_ = json.Unmarshal([]byte(out), &x)
			require.NotEmpty(t, x.SamplesMS, "renewals in a second: 3 roles renew every 200ms")
			return x.SamplesMS
		}()))
		require.NotNil(t, r.RenewalsPerS)
		require.NotNil(t, r.MissedDeadlines)
		require.NotNil(t, r.CPUSPer1000)
		assert.Greater(t, *r.RenewalsPerS, 0.0)
		assert.GreaterOrEqual(t, *r.CPUSPer1000, 0.0)
		var raw map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &raw))
		for _, k := range []string{"renewals_per_s", "missed_deadlines", "cpu_s_per_1000"} {
			assert.Contains(t, raw, k)
		}
	})

	t.Run("compare", func(t *testing.T) {
		peer := chart.Result{Kind: "handover", System: "etcd", SamplesMS: []float64{4, 2, 3}}
		peer.Stats = chart.Summarize(peer.SamplesMS)
		b, err := json.Marshal(peer)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "etcd.json"), b, 0o644))
		svg := filepath.Join(dir, "compare.svg")
		r := run(t, "bench", "compare", "--chart", svg, filepath.Join(dir, "handover.json"), filepath.Join(dir, "etcd.json"))
		requireOK(t, r)
		assert.Regexp(t, `(?m)^etcd handover +n=3 +min 2\.00 +median 3\.00 +p90 4\.00 +p99 4\.00 +max 4\.00 ms$`, r.Stdout)
		assert.Regexp(t, `(?m)^  krole handover +median [0-9.]+ +p90 [0-9.]+ +p99 [0-9.]+$`, r.Stdout)
		svgText, err := os.ReadFile(svg)
		require.NoError(t, err)
		assert.Equal(t, 5, strings.Count(string(svgText), "<circle"), "krole's two samples next to etcd's three")
		assert.Contains(t, string(svgText), "etcd handover")
	})
}

// TestBenchUsageErrors: bad flags exit 2 with a one-line error, before
// any cluster starts.
func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "failover", "--members", "1"}, "--members 1"},
		{[]string{"bench", "handover", "--rounds", "0"}, "--rounds 0"},
		{[]string{"bench", "failover", "--lease-duration", "-1s"}, "--lease-duration -1s"},
		{[]string{"bench", "failover", "--lease-duration", "1s", "--heartbeat-interval", "2s"}, "heartbeat interval"},
		{[]string{"bench", "renew", "--roles", "0"}, "--roles 0"},
		{[]string{"bench", "renew", "--duration", "0s"}, "--duration 0s"},
		{[]string{"bench", "renew", "--members", "0"}, "--members 0"},
		{[]string{"bench", "renew", "--roles", "3", "--members", "4"}, "--members 4"},
		{[]string{"bench", "failover-many", "--members", "1"}, "--members 1"},
		{[]string{"bench", "failover-many", "--roles", "2", "--members", "3"}, "--members 3"},
		{[]string{"bench", "failover-many", "--grace", "0s"}, "--grace 0s"},
		{[]string{"bench", "acquire", "extra"}, "takes no arguments"},
		{[]string{"bench", "acquire", "--rounds", "x"}, "rounds"},
		{[]string{"bench", "compare"}, "RESULT.json"},
	} {
		r := run(t, tc.args...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, tc.want, "%v", tc.args)
		assert.Contains(t, r.Stderr, "see 'krole bench "+tc.args[1]+" --help'", "the hint names the subcommand")
	}
}
