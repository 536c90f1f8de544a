package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// TestRunSecondInterrupt: a second SIGINT while `krole run` waits for a
// CMD that ignores SIGTERM ends krole at once with exit 130, after a line
// that says it did not resign; CMD does not outlive it: the watchdog kills
// it after --kill-timeout. That is 5s, ample for the test to send the
// second SIGINT before krole would kill CMD itself.
func TestRunSecondInterrupt(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "krole run's process tests are Linux's")
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	pidFile := t.TempDir() + "/pid"
	args := append(append(append(clusterFlags(c), "run", "job", "--member", "a"), testTimingFlags()...),
		"--kill-timeout", "5s", "--", "sh", "-c", `trap "" TERM; echo $$ > "$0"; while :; do sleep 0.05; done`, pidFile)
	cmd := exec.Command(bin, args...)
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var seen []string
	waitLine := func(prefix string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "krole run ended; stderr:\n%s", strings.Join(seen, "\n"))
				seen = append(seen, l)
				if strings.HasPrefix(l, prefix) {
					return
				}
			case <-timeout:
				require.FailNow(t, "no line "+prefix, strings.Join(seen, "\n"))
			}
		}
	}
	waitLine("krole run: started CMD (pid ")
	pid := waitPidFile(t, pidFile, nil)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	waitLine("krole run: stopping CMD (pid ")
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	// stderr ends when the watchdog, which holds it too, has stopped CMD.
	for l := range lines {
		seen = append(seen, l)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 130, ee.ExitCode())
	assert.Equal(t, "krole run: interrupted again: exiting now without resigning; the watchdog stops CMD's process tree (SIGTERM, then SIGKILL after --kill-timeout), and the role passes on when the lease ends",
		seen[len(seen)-1])
	require.Eventually(t, func() bool { return !processAlive(pid) }, 10*time.Second, 10*time.Millisecond, "CMD outlived krole")
}

// TestRunUnderTimeoutResigns: GNU timeout sends SIGTERM to krole run and
// then to its process group, krole included; krole takes the two as one
// request and resigns, so the role has no holder at once, not when the
// 30s lease runs out. Several runs at once, since the kernel sometimes
// merges the two signals into one; meanwhile the two signals by hand.
func TestRunUnderTimeoutResigns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("krole run's process tests are Linux's")
	}
	timeoutBin, err := exec.LookPath("timeout")
	if err != nil {
		t.Skip("needs GNU timeout (coreutils)")
	}
	bin := buildKrole(t)
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	type timedRun struct {
		err    error
		stderr bytes.Buffer
	}
	runs := make([]*timedRun, 4)
	var wg sync.WaitGroup
	for i := range runs {
		runs[i] = &timedRun{}
		role, member := fmt.Sprintf("timed-%d", i), fmt.Sprintf("m-%d", i)
		args := append([]string{"5", bin}, clusterFlags(c)...)
		args = append(args, "run", role, "--member", member,
			"--lease-duration", "30s", "--heartbeat-interval", "2s", "--stagger", "100ms", "--", "sleep", "300")
		cmd := exec.Command(timeoutBin, args...)
		cmd.Stderr = &runs[i].stderr
		wg.Go(func() { runs[i].err = cmd.Run() })
	}
	t.Cleanup(wg.Wait) // timeout ends each within 5s

	// The same two signals 100ms apart, which the kernel cannot merge,
	// while CMD takes a second to stop.
	ready := t.TempDir() + "/pid"
	p := startKroleScript(t, bin, c, "twice", "m-twice", []string{"KROLE_TEST_READY=" + ready},
		[]string{"--lease-duration", "30s", "--heartbeat-interval", "2s", "--stagger", "100ms"},
		`trap "sleep 1; exit 0" TERM; echo $$ > "$KROLE_TEST_READY"; while :; do sleep 0.05; done`)
	p.waitLine(t, 0, startedRE, 30*time.Second)
	waitPidFile(t, ready, nil) // CMD's trap is set
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatal("krole run did not exit within a minute of SIGTERM")
	}
	assert.Equal(t, 0, p.state.ExitCode(), "stderr:\n%s", p.stderr())
	assert.NotContains(t, p.stderr(), "interrupted again")
	assert.Regexp(t, `(?m)^krole run: resigned twice \(token \d+/\d+\)$`, p.stderr())

	wg.Wait()
	for i, tr := range runs {
		role := fmt.Sprintf("timed-%d", i)
		stderr := tr.stderr.String()
		var ee *exec.ExitError
		require.ErrorAs(t, tr.err, &ee, "run %d: stderr:\n%s", i, stderr)
		assert.Equal(t, 124, ee.ExitCode(), "run %d: timeout's code for a command it timed out; stderr:\n%s", i, stderr)
		require.Contains(t, stderr, "krole run: started CMD", "run %d: elected within timeout's 5s", i)
		assert.NotContains(t, stderr, "interrupted again")
		assert.Regexp(t, fmt.Sprintf(`(?m)^krole run: resigned %s \(token \d+/\d+\)$`, role), stderr)
		// Resigned: nobody holds the role now, though the lease, written
		// less than 30s ago, had 30s to run.
		r := runOn(t, c, "leader", role)
		assert.Equal(t, ExitFailure, r.Code, "run %d: the role has no live holder; leader: %s%s\nkrole run:\n%s", i, r.Stdout, r.Stderr, stderr)
		assert.Contains(t, r.Stderr, "released", "run %d", i)
	}
}
