package supervise

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	case "watchdog-setsid":
		// A shell whose child left its session and ignores SIGTERM: the
		// test reads its pid from PIDFILE.
		c, err := Start(Spec{Path: "sh", Args: []string{"-c", `setsid sh -c "$WORKER" & wait`},
			Env: []string{"WORKER=" + stubbornWorker}, Watchdog: watchdogArgv(), Grace: 200 * time.Millisecond})
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(strconv.Itoa(c.Pid()) + "\n")
		os.Stderr.WriteString("watchdog started\n")
		<-c.Done()
		os.Exit(0)
	case "standby":
		// A standby watchdog, never started: the test reads its pid.
		sb, err := Prepare(Spec{Path: "sleep", Args: []string{"300"}, Watchdog: watchdogArgv()})
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(strconv.Itoa(sb.dog.cmd.Process.Pid) + "\n")
		os.Stderr.WriteString("watchdog started\n")
		select {}
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
	if mode != "1" {
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

// stubbornWorker ignores SIGTERM, writes its pid to $PIDFILE and runs
// until killed; politeWorker exits on SIGTERM.
const (
	stubbornWorker = `trap '' TERM; echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; while :; do sleep 0.05; done`
	politeWorker   = `trap 'exit 0' TERM; echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; while :; do sleep 0.05; done`
)

// waitPidFile waits for a worker to write its pid to path and returns it.
func waitPidFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	require.True(t, alive(pid), "the worker runs")
	t.Cleanup(func() {
		if alive(pid) { // what a failed test left running
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

func needSetsid(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid (util-linux)")
	}
}

func isDone(c *Child) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

// A shell wrapper around a worker that ignores SIGTERM: the shell dies of
// SIGTERM at once, the worker does not. Stop kills the worker after the
// grace period and returns only once it is gone, with the watchdog and
// without it (the worker is in the group).
func TestStopKillsAStubbornWorkerBehindAShell(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprintf("watchdog=%v", watched), func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "worker")
			spec := Spec{Path: "sh", Args: []string{"-c", `sh -c "$WORKER"; echo after`},
				Env: []string{"WORKER=" + stubbornWorker, "PIDFILE=" + pidfile}}
			if watched {
				spec.Watchdog = watchdogArgv()
			}
			c, err := Start(spec)
			require.NoError(t, err)
			assert.Equal(t, watched && runtime.GOOS == "linux", c.Tree())
			worker := waitPidFile(t, pidfile)
			killed, err := c.Stop(context.Background(), 200*time.Millisecond)
			require.NoError(t, err)
			assert.False(t, alive(worker), "Stop returned while the worker (pid %d) lives", worker)
			assert.True(t, killed, "the worker ignores SIGTERM: only SIGKILL ends it")
			assert.True(t, isDone(c))
			assert.Equal(t, 128+int(syscall.SIGTERM), c.ExitCode(), "the shell's own code")
		})
	}
}

// A grandchild that left the session (setsid) is stopped too: SIGTERM
// reaches it (a polite one exits without SIGKILL), and SIGKILL does after
// the grace period (a stubborn one).
func TestStopReachesAGrandchildThatCalledSetsid(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("elsewhere the tree is the process group only")
	}
	needSetsid(t)
	for _, tc := range []struct {
		name   string
		worker string
		grace  time.Duration
		killed bool
	}{
		{"polite", politeWorker, time.Minute, false},
		{"stubborn", stubbornWorker, 200 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "worker")
			c, err := Start(Spec{Path: "sh", Args: []string{"-c", `setsid sh -c "$WORKER" & wait`},
				Env: []string{"WORKER=" + tc.worker, "PIDFILE=" + pidfile}, Watchdog: watchdogArgv()})
			require.NoError(t, err)
			worker := waitPidFile(t, pidfile)
			b, err := os.ReadFile("/proc/" + strconv.Itoa(worker) + "/stat")
			require.NoError(t, err)
			require.NotEqual(t, strconv.Itoa(c.Pid()), strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))[2],
				"the worker left CMD's process group")
			killed, err := c.Stop(context.Background(), tc.grace)
			require.NoError(t, err)
			assert.False(t, alive(worker), "Stop returned while the worker (pid %d) lives", worker)
			assert.Equal(t, tc.killed, killed)
		})
	}
}

// A command that exits by itself leaving a worker behind: Exited, not
// Done; Stop stops the worker (SIGTERM, then SIGKILL) and keeps the
// command's own exit code.
func TestCommandThatExitsLeavesAWorkerForStop(t *testing.T) {
	needSetsid(t)
	for _, tc := range []struct {
		name, worker string
	}{
		{"in the group", `sh -c "$WORKER" &`},
		{"setsid", `setsid sh -c "$WORKER" &`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "setsid" && runtime.GOOS != "linux" {
				t.Skip("elsewhere the tree is the process group only")
			}
			pidfile := filepath.Join(t.TempDir(), "worker")
			c, err := Start(Spec{Path: "sh", Args: []string{"-c", tc.worker + ` while [ ! -s "$PIDFILE" ]; do sleep 0.01; done; exit 3`},
				Env: []string{"WORKER=" + stubbornWorker, "PIDFILE=" + pidfile}, Watchdog: watchdogArgv()})
			require.NoError(t, err)
			<-c.Exited()
			worker := waitPidFile(t, pidfile)
			assert.Equal(t, 3, c.ExitCode())
			assert.True(t, c.LeftBehind())
			assert.False(t, isDone(c), "the tree is not gone while the worker lives")
			killed, err := c.Stop(context.Background(), 200*time.Millisecond)
			require.NoError(t, err)
			assert.True(t, killed)
			assert.False(t, alive(worker), "Stop returned while the worker (pid %d) lives", worker)
			assert.True(t, isDone(c))
			assert.Equal(t, 3, c.ExitCode())
		})
	}
}

// A command that exits with nothing left behind is Done by itself.
func TestCommandWithoutLeftoversIsDone(t *testing.T) {
	c, err := Start(Spec{Path: "sh", Args: []string{"-c", `sleep 0.01 & wait; exit 4`}, Watchdog: watchdogArgv()})
	require.NoError(t, err)
	<-c.Done()
	assert.Equal(t, 4, c.ExitCode())
	assert.False(t, c.LeftBehind())
	killed, err := c.Stop(context.Background(), time.Minute)
	assert.NoError(t, err)
	assert.False(t, killed)
}

// SIGKILL of the process that started the command, with a grandchild that
// left the session and ignores SIGTERM: the watchdog kills it.
func TestStubbornSetsidGrandchildDiesWithKilledParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("elsewhere the tree is the process group only")
	}
	needSetsid(t)
	pidfile := filepath.Join(t.TempDir(), "worker")
	t.Setenv("PIDFILE", pidfile)
	exe, err := os.Executable()
	require.NoError(t, err)
	parent := exec.Command(exe, "-test.run", "^$")
	parent.Env = append(os.Environ(), "SUPERVISE_TEST_PARENT=watchdog-setsid")
	stderr, err := parent.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	line, err := bufio.NewReader(stderr).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "watchdog started\n", line)
	worker := waitPidFile(t, pidfile)

	require.NoError(t, parent.Process.Kill())
	_ = parent.Wait()
	waitFor(t, func() bool { return !alive(worker) })
}

// The watchdog is deaf to the signals a terminal or a supervisor sends
// around (it acts on its starting process's word and death only): the
// command goes on, and Stop still stops it.
func TestWatchdogIgnoresStraySignals(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	pidfile := filepath.Join(t.TempDir(), "worker")
	c, err := Start(Spec{Path: "sh", Args: []string{"-c", politeWorker}, Env: []string{"PIDFILE=" + pidfile}, Watchdog: watchdogArgv()})
	require.NoError(t, err)
	waitPidFile(t, pidfile)
	dog := parentOf(t, c.Pid())
	require.NotEqual(t, os.Getpid(), dog, "the command's parent is the watchdog")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		require.NoError(t, syscall.Kill(dog, sig))
	}
	time.Sleep(100 * time.Millisecond) // time for a signal to act, were it to
	assert.True(t, alive(dog), "the watchdog runs")
	assert.True(t, alive(c.Pid()), "the command runs")
	assert.False(t, isDone(c))
	killed, err := c.Stop(context.Background(), time.Minute)
	require.NoError(t, err)
	assert.False(t, killed)
	assert.Equal(t, 0, c.ExitCode())
}

// BenchmarkTreeWalk times one search of /proc for a process's
// descendants, which the watchdog runs as it sends SIGTERM to the tree,
// while the tree is dying on the same cores.
func BenchmarkTreeWalk(b *testing.B) {
	if !treeKept {
		b.Skip("no /proc walk here")
	}
	for b.Loop() {
		descendants(os.Getpid())
	}
}
