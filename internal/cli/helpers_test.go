package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
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
	code := <-startApp(t, ctx, args, &out, &errOut)
	return result{Code: code, Stdout: out.String(), Stderr: errOut.String()}
}

// appLock is held while an in-process app parses its flags: urfave/cli
// writes package-level state then (its help flag, which its help printer
// reads), so the apps of tests that run in parallel take turns.
var appLock = make(chan struct{}, 1)

// startApp runs the app in-process with args in a goroutine, and returns
// the channel its exit code comes on. The app holds appLock until its
// command first uses ctx (urfave/cli never does, and a command runs only
// once every flag is parsed), or until it returns: help, the version and
// usage errors hold it to the end.
func startApp(t testing.TB, ctx context.Context, args []string, stdout, stderr io.Writer) <-chan int {
	t.Helper()
	select {
	case appLock <- struct{}{}:
	case <-time.After(time.Minute):
		t.Fatal("waited a minute for another in-process app to parse its flags")
	}
	var once sync.Once
	unlock := func() { once.Do(func() { <-appLock }) }
	done := make(chan int, 1)
	go func() {
		code := Run(unlockingCtx{ctx, unlock}, args, stdout, stderr)
		unlock()
		done <- code
	}()
	return done
}

// unlockingCtx is a context that calls unlock (idempotent) before each use.
// Done and Value are the parent's own, so contexts derived from it are
// cancelled as directly as from the parent.
type unlockingCtx struct {
	context.Context
	unlock func()
}

func (c unlockingCtx) Deadline() (time.Time, bool) { c.unlock(); return c.Context.Deadline() }
func (c unlockingCtx) Done() <-chan struct{}       { c.unlock(); return c.Context.Done() }
func (c unlockingCtx) Err() error                  { c.unlock(); return c.Context.Err() }
func (c unlockingCtx) Value(key any) any           { c.unlock(); return c.Context.Value(key) }

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
