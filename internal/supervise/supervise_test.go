package supervise

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// When run as the "parent" helper, start a long sleep, print its pid, and
// wait to be killed.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == WatchdogCommand {
		os.Exit(Watchdog(os.Args[2:]))
	}
	switch os.Getenv("SUPERVISE_TEST_PARENT") {
	case "1":
		c, err := Start(Spec{Path: "sleep", Args: []string{"300"}})
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(strconv.Itoa(c.Pid()) + "\n")
		<-c.Done()
		os.Exit(0)
	case "watchdog":
		// A shell whose own child (the grandchild) prints its pid.
		c, err := Start(Spec{Path: "sh", Args: []string{"-c", "sleep 300 & echo $!; wait"},
			Watchdog: watchdogArgv(), Grace: time.Second, Stdout: os.Stdout})
		if err != nil {
			os.Exit(3)
		}
		// Start has returned: the watchdog runs (see Start's doc on the
		// instant before it does).
		os.Stderr.WriteString("watchdog started\n")
		<-c.Done()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func watchdogArgv() []string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return []string{exe, WatchdogCommand}
}

func TestExitCodeAndEnvPassThrough(t *testing.T) {
	var out bytes.Buffer
	c, err := Start(Spec{Path: "sh", Args: []string{"-c", `echo "$KROLE_ROLE"; exit 7`}, Env: []string{"KROLE_ROLE=controller"}, Stdout: &out})
	require.NoError(t, err)
	assert.Positive(t, c.Pid())
	<-c.Done()
	assert.Equal(t, 7, c.ExitCode())
	assert.Equal(t, "controller\n", out.String())
}

func TestStartUnknownCommand(t *testing.T) {
	_, err := Start(Spec{Path: "krole-no-such-command"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"krole-no-such-command"`)
}

func TestStopSendsTermFirst(t *testing.T) {
	var out testcluster.SyncBuffer
	c, err := Start(Spec{Path: "sh", Args: []string{"-c", `trap 'echo term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`}, Stdout: &out})
	require.NoError(t, err)
	waitFor(t, func() bool { return strings.Contains(out.String(), "ready") })
	killed, err := c.Stop(context.Background(), time.Minute)
	require.NoError(t, err)
	assert.False(t, killed, "a child that honours SIGTERM is not killed")
	assert.Contains(t, out.String(), "term")
	assert.Equal(t, 0, c.ExitCode())
}

func TestStopKillsAfterGrace(t *testing.T) {
	var out testcluster.SyncBuffer
	c, err := Start(Spec{Path: "sh", Args: []string{"-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`}, Stdout: &out})
	require.NoError(t, err)
	waitFor(t, func() bool { return strings.Contains(out.String(), "ready") })
	killed, err := c.Stop(context.Background(), 100*time.Millisecond)
	require.NoError(t, err)
	assert.True(t, killed)
	assert.Equal(t, 128+int(syscall.SIGKILL), c.ExitCode())
}

func TestChildDiesWithKilledParent(t *testing.T) {
	pid := startParentAndKillIt(t, "1")
	waitFor(t, func() bool { return !alive(pid) })
}

// With the watchdog, not only the command but its own children die with a
// parent killed by SIGKILL.
func TestGrandchildDiesWithKilledParentThanksToTheWatchdog(t *testing.T) {
	pid := startParentAndKillIt(t, "watchdog")
	waitFor(t, func() bool { return !alive(pid) })
}

func TestWatchdogKeepsExitCodeAndStop(t *testing.T) {
	var out testcluster.SyncBuffer
	c, err := Start(Spec{Path: "sh", Args: []string{"-c", `echo "$KROLE_EPOCH"; exit 5`}, Env: []string{"KROLE_EPOCH=9"},
		Watchdog: watchdogArgv(), Grace: time.Second, Stdout: &out})
	require.NoError(t, err)
	<-c.Done()
	assert.Equal(t, 5, c.ExitCode())
	assert.Equal(t, "9\n", out.String())

	out = testcluster.SyncBuffer{}
	c, err = Start(Spec{Path: "sh", Args: []string{"-c", `trap 'echo term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`},
		Watchdog: watchdogArgv(), Grace: time.Minute, Stdout: &out})
	require.NoError(t, err)
	waitFor(t, func() bool { return strings.Contains(out.String(), "ready") })
	killed, err := c.Stop(context.Background(), time.Minute)
	require.NoError(t, err)
	assert.False(t, killed)
	assert.Contains(t, out.String(), "term")
}

// startParentAndKillIt runs this test binary as a parent in the given
// mode, reads the pid it prints, checks that process runs, kills the
// parent with SIGKILL and returns the pid.
func startParentAndKillIt(t *testing.T, mode string) int {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	parent := exec.Command(exe, "-test.run", "^$")
	parent.Env = append(os.Environ(), "SUPERVISE_TEST_PARENT="+mode)
	stdout, err := parent.StdoutPipe()
	require.NoError(t, err)
	stderr, err := parent.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	require.True(t, alive(pid), "the child runs while its parent does")
	if mode == "watchdog" {
		// The shell may print its child's pid before Start has started
		// the watchdog; kill the parent only once it has.
		line, err := bufio.NewReader(stderr).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "watchdog started\n", line)
	}

	require.NoError(t, parent.Process.Kill())
	_ = parent.Wait()
	return pid
}

// alive reports whether pid names a process that is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
