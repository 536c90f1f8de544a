package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/runner"
)

// The demo's lines that the tests read.
var (
	demoFailoverRE = regexp.MustCompile(`(?m)^<== Failover: (node-\d) holds controller ([0-9.]+m?s) after the SIGKILL, under token (\d+)/(\d+) \(node-1 held (\d+)/(\d+)\)\.$`)
	demoHandoverRE = regexp.MustCompile(`(?m)^<== Handover: (node-\d) holds controller ([0-9.]+[mµ]?s) after the SIGTERM, under token (\d+)/(\d+) \((node-\d) held (\d+)/(\d+)\)\.$`)
	demoPidRE      = regexp.MustCompile(`(?:started, pid|CMD \(pid) (\d+)`)
)

// TestDemo runs `krole demo` as a process, as a person would, with a short
// lease: it must fail over after SIGKILL to a newer token, hand over after
// SIGTERM, exit 0, and leave no member or member's command running. Then
// `krole demo --keep`: the commands it prints work, and Ctrl-C stops
// everything.
func TestDemo(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "checks processes through /proc")

	t.Run("run to the end", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "demo", "--lease-duration", "2s", "--pause", "0")
		cmd.Env = append(cmd.Environ(), runner.ClearedEnv()...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		out := stdout.String()
		t.Logf("krole demo took %v; its output:\n%s", time.Since(start).Round(time.Millisecond), out)
		require.NoError(t, err, "stderr: %s", stderr.String())
		assert.Empty(t, stderr.String())

		f := demoFailoverRE.FindStringSubmatch(out)
		require.NotNil(t, f, "no failover line")
		assert.NotEqual(t, "node-1", f[1])
		assert.True(t, demoToken(t, f[3], f[4]).Newer(demoToken(t, f[5], f[6])), "the failover's token is newer: %s", f[0])
		h := demoHandoverRE.FindStringSubmatch(out)
		require.NotNil(t, h, "no handover line")
		assert.Equal(t, f[1], h[5], "the new holder is the one that resigns")
		assert.NotEqual(t, h[1], h[5])
		assert.True(t, demoToken(t, h[3], h[4]).Newer(demoToken(t, h[6], h[7])), "the handover's token is newer: %s", h[0])
		assert.Regexp(t, `(?m)^<== Done in `, out)
		// The demo knows the killed holder's CMD pid (the member reports it
		// on a pipe, as data): it is the pid the member's line names.
		gone := regexp.MustCompile(`(?m)^ +(\S+) is gone, and its command \(pid (\d+)\) died with it\.$`).FindStringSubmatch(out)
		require.NotNil(t, gone, "the demo did not check the killed holder's command")
		assert.Regexp(t, fmt.Sprintf(`(?m)^  \[%s\] krole run: started CMD \(pid %s\) `, regexp.QuoteMeta(gone[1]), gone[2]), out)
		demoNoSurvivors(t, out)
	})

	t.Run("keep", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "demo", "--keep", "--listen", "127.0.0.1:0", "--lease-duration", "2s", "--pause", "0")
		cmd.Env = append(cmd.Environ(), runner.ClearedEnv()...)
		pipe, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		defer func() { _ = cmd.Process.Kill() }()

		var mu sync.Mutex
		var out strings.Builder
		ready := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(pipe)
			signalled := false
			for sc.Scan() {
				mu.Lock()
				out.WriteString(sc.Text() + "\n")
				mu.Unlock()
				if !signalled && strings.Contains(sc.Text(), "Ctrl-C stops everything") {
					signalled = true
					close(ready)
				}
			}
		}()
		select {
		case <-ready:
		case <-done:
			t.Fatalf("krole demo --keep ended early; stderr: %s", stderr.String())
		case <-ctx.Done():
			t.Fatal("krole demo --keep never said that it keeps running")
		}
		mu.Lock()
		sofar := out.String()
		mu.Unlock()

		// Three members run; the printed describe command, run as it
		// stands, names the cluster and finds the role held.
		assert.Equal(t, 5, strings.Count(sofar, ": started, pid "), "three members, then two brought back:\n%s", sofar)
		m := regexp.MustCompile(`(?m)^ +(\S+ describe controller -b 127\.0\.0\.1:\d+) +#`).FindStringSubmatch(sofar)
		require.NotNil(t, m, "no describe command with -b in:\n%s", sofar)
		desc, err := exec.CommandContext(ctx, "sh", "-c", m[1]+" -o json").CombinedOutput()
		require.NoError(t, err, "%s: %s", m[1], desc)
		assert.Contains(t, string(desc), `"held":true`)
		assert.Regexp(t, `(?m)^ +kill -9 \d+ +# kill the holder`, sofar)

		// Ctrl-C: everything stops, exit 0.
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		<-done
		require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
		final := out.String()
		t.Logf("krole demo --keep's output:\n%s", final)
		assert.Regexp(t, `(?m)^<== Stopped\.$`, final)
		demoNoSurvivors(t, final)
	})
}

// demoToken parses the producer id and epoch of a demo line.
func demoToken(t *testing.T, pid, epoch string) codec.Token {
	t.Helper()
	p, err := strconv.ParseInt(pid, 10, 64)
	require.NoError(t, err)
	e, err := strconv.Atoi(epoch)
	require.NoError(t, err)
	return codec.Token{ProducerID: p, Epoch: int16(e)}
}

// demoNoSurvivors checks that no process whose pid the demo's output names
// (the members, their commands) still runs.
func demoNoSurvivors(t *testing.T, out string) {
	t.Helper()
	pids := demoPidRE.FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, pids, "the output names no pid")
	for _, p := range pids {
		pid, err := strconv.Atoi(p[1])
		require.NoError(t, err)
		assert.False(t, processAlive(pid), "process %d (%s) outlived the demo", pid, p[0])
	}
}

func TestDemoUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "extra"}, "demo takes no arguments"},
		{[]string{"demo", "--lease-duration", "100ms"}, "needs at least 1s"},
		{[]string{"demo", "--listen", "9092"}, `--listen "9092"`},
		{[]string{"demo", "--pause", "-1s"}, "--pause -1s"},
	} {
		r := run(t, tc.args...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, tc.want)
	}
}
