package cli

import (
	"bufio"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// TestRunSecondInterrupt: a second SIGINT while `krole run` waits for a
// CMD that ignores SIGTERM ends krole at once with exit 130, after a line
// that says it did not resign; CMD does not outlive it.
func TestRunSecondInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("krole run's process tests are Linux's")
	}
	bin := buildKrole(t)
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	pidFile := t.TempDir() + "/pid"
	args := append(append(append(clusterFlags(c), "run", "job", "--member", "a"), testTimingFlags()...),
		"--kill-timeout", "1m", "--", "sh", "-c", `trap "" TERM; echo $$ > "$0"; while :; do sleep 0.05; done`, pidFile)
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
