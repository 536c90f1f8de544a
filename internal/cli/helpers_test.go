package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// result is what one in-process run of the app produced.
type result struct {
	Code           int
	Stdout, Stderr string
}

// run runs the app in-process with args, bounded by a minute so that a hung
// command fails the test instead of the whole suite.
func run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := Run(ctx, args, &out, &errOut)
	return result{Code: code, Stdout: out.String(), Stderr: errOut.String()}
}

// clusterFlags names c's brokers, topic and transactional-id prefix.
func clusterFlags(c *testcluster.Cluster) []string {
	return []string{"--brokers", strings.Join(c.Config.Brokers, ","), "--topic", c.Config.Topic, "--txn-prefix", c.Config.TxnPrefix}
}

// runOn runs a command against c: args, then c's cluster flags (flags may
// follow the arguments).
func runOn(t *testing.T, c *testcluster.Cluster, args ...string) result {
	t.Helper()
	return run(t, append(args, clusterFlags(c)...)...)
}

// requireOK fails unless r succeeded with nothing on stderr but notes.
func requireOK(t *testing.T, r result) {
	t.Helper()
	require.Equal(t, ExitOK, r.Code, "stdout: %s\nstderr: %s", r.Stdout, r.Stderr)
}

// assertOneLineError checks the shape of a failure: the exit code, nothing
// on stdout, "krole: ..." on stderr in one line (a usage error may add a
// hint line), and no stack trace.
func assertOneLineError(t *testing.T, r result, code int) {
	t.Helper()
	assert.Equal(t, code, r.Code, "stderr: %s", r.Stderr)
	assert.Empty(t, r.Stdout)
	lines := strings.Split(strings.TrimRight(r.Stderr, "\n"), "\n")
	max := 1
	if code == ExitUsage {
		max = 2
	}
	assert.LessOrEqual(t, len(lines), max, "stderr: %q", r.Stderr)
	assert.True(t, strings.HasPrefix(lines[0], "krole: "), "stderr: %q", r.Stderr)
	assert.NotContains(t, r.Stderr, "goroutine ")
	assert.NotContains(t, r.Stderr, "panic")
	assert.NotContains(t, r.Stderr, "USAGE:", "no full help on an error")
}

// leaseErr is the error of a WriteLease, for tests that do not look at
// the offset.
func leaseErr(_ int64, err error) error { return err }
