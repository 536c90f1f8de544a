package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// The CMDs of these tests run a worker, $WORKER, that writes its pid to
// $DIR/worker.MEMBER. treeWitness, at the start of each CMD, checks every
// worker pid written so far and records in $DIR/overlap each one still
// alive (not a zombie), then records the CMD's start in $DIR/started: the
// successor's CMD itself witnesses whether an old worker lived when it
// started.
const (
	treeStubbornWorker = `trap '' TERM; echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; while :; do sleep 0.05; done`
	treeWitness        = `for f in "$DIR"/worker.*; do
  [ -s "$f" ] || continue
  p=$(cat "$f")
  if [ -r "/proc/$p/stat" ] && read -r _ _ st _ < "/proc/$p/stat" && [ "$st" != Z ]; then
    echo "$KROLE_MEMBER (epoch $KROLE_EPOCH) started while $f (pid $p) was alive" >> "$DIR/overlap"
  fi
done
echo "$KROLE_MEMBER $KROLE_EPOCH" >> "$DIR/started"
export PIDFILE="$DIR/worker.$KROLE_MEMBER"
`
)

func treeTest(t *testing.T) (string, *testcluster.Cluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the whole tree is kept on Linux only; the test reads /proc")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid (util-linux)")
	}
	bin := buildKrole(t)
	c := testcluster.Start(t, testcluster.Options{})
	return bin, c, t.TempDir()
}

// startTreeKrole is startKroleScript, with a cleanup that kills whatever
// worker a failed test left running, before the process's own cleanup
// (which waits for its stderr to end, and a worker holds it).
func startTreeKrole(t *testing.T, bin string, c *testcluster.Cluster, dir, member string, env, flags []string, script string) *kroleProc {
	t.Helper()
	p := startKroleScript(t, bin, c, "tree", member, env, flags, script)
	t.Cleanup(func() { killWorkers(dir) })
	return p
}

func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// waitWorker waits for the worker of member to write its pid.
func waitWorker(t *testing.T, dir, member string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		pid = readPid(filepath.Join(dir, "worker."+member))
		return pid > 0
	}, 20*time.Second, 5*time.Millisecond, "the worker of %s never started", member)
	require.True(t, processAlive(pid))
	return pid
}

func startedCount(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "started"))
	return strings.Count(string(b), "\n")
}

func waitRegistered(t *testing.T, c *testcluster.Cluster, role, member string, p *kroleProc) {
	t.Helper()
	require.Eventually(t, func() bool {
		st := rolestate.Fold(codec.Role(role), readRole(t, c.Config, codec.Role(role)))
		return st.Rank(codec.MemberID(member)) >= 0
	}, 20*time.Second, 20*time.Millisecond, "%s never registered; stderr:\n%s", member, p.stderr())
}

// treeHolderAndCandidate starts member a of role "tree" and waits until
// its CMD started and its worker wrote its pid, then starts member b and
// waits until it is registered; it returns a, the worker's pid and b.
func treeHolderAndCandidate(t *testing.T, bin string, c *testcluster.Cluster, dir string, env, flags []string, script string) (*kroleProc, int, *kroleProc) {
	t.Helper()
	a := startTreeKrole(t, bin, c, dir, "a", env, flags, script)
	a.waitLine(t, 0, startedRE, 20*time.Second)
	worker := waitWorker(t, dir, "a")
	b := startTreeKrole(t, bin, c, dir, "b", env, flags, script)
	waitRegistered(t, c, "tree", "b", b)
	return a, worker, b
}

// The holder gets SIGTERM; its CMD is a shell wrapper (which SIGTERM ends
// at once) around a worker that ignores SIGTERM. krole run kills the
// worker after --kill-timeout and resigns only then: the successor's CMD
// finds the old worker dead when it starts. The --kill-timeout, 3s, is
// longer than the lease (2s): the holder renews while it stops CMD.
func TestRunSuccessorStartsOnlyOnceTheOldTreeIsGone(t *testing.T) {
	t.Parallel()
	bin, c, dir := treeTest(t)
	env := []string{"DIR=" + dir, "WORKER=" + treeStubbornWorker}
	script := treeWitness + `sh -c "$WORKER"; echo "worker ended"`
	flags := append(testTimingFlags(), "--kill-timeout", "3s")
	a, worker, b := treeHolderAndCandidate(t, bin, c, dir, env, flags, script)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	waitExit(t, a, dir)
	assert.Equal(t, 0, a.state.ExitCode(), "stderr:\n%s", a.stderr())
	assert.False(t, processAlive(worker), "krole run exited while its CMD's worker (pid %d) lives", worker)
	assert.Regexp(t, `(?m)^krole run: CMD \(pid \d+\) killed after --kill-timeout 3s$`, a.stderr())
	assert.NotContains(t, a.stderr(), "did not return by the local deadline")
	b.waitLine(t, 0, startedRE, 20*time.Second)
	waitWorker(t, dir, "b")
	require.Equal(t, 2, startedCount(dir))
	overlap, _ := os.ReadFile(filepath.Join(dir, "overlap"))
	assert.Empty(t, string(overlap), "the successor's CMD started while the old worker lived")
}

// CMD exits by itself with code 3, leaving a worker that ignores SIGTERM
// behind: krole run kills it (SIGTERM, then SIGKILL after --kill-timeout)
// before it resigns and exits 3; the next member's CMD finds it dead.
func TestRunCmdExitingLeavesNoWorkerBehind(t *testing.T) {
	t.Parallel()
	bin, c, dir := treeTest(t)
	const role = "tree"
	env := []string{"DIR=" + dir, "WORKER=" + treeStubbornWorker}
	flags := append(testTimingFlags(), "--kill-timeout", "400ms")
	leaver := treeWitness + `setsid sh -c "$WORKER" & while [ ! -s "$PIDFILE" ]; do sleep 0.01; done; exit 3`
	a := startTreeKrole(t, bin, c, dir, "a", env, flags, leaver)
	a.waitLine(t, 0, startedRE, 20*time.Second)
	waitRegistered(t, c, role, "a", a)
	b := startTreeKrole(t, bin, c, dir, "b", env, flags, treeWitness+`exec sleep 300`)
	waitRegistered(t, c, role, "b", b)
	// krole run kills the worker 400ms after CMD exits, maybe before this
	// reads its pid: that it lived then, krole's lines below say.
	var worker int
	require.Eventually(t, func() bool {
		worker = readPid(filepath.Join(dir, "worker.a"))
		return worker > 0
	}, 20*time.Second, 5*time.Millisecond, "the worker of a never started")

	waitExit(t, a, dir)
	assert.False(t, processAlive(worker), "krole run exited while its CMD's worker (pid %d) lives", worker)
	assert.Equal(t, 3, a.state.ExitCode(), "stderr:\n%s", a.stderr())
	assert.Regexp(t, `(?s)CMD \(pid \d+\) exited with code 3, leaving processes of its tree running.*`+
		`the rest of CMD's tree killed after --kill-timeout 400ms\n.*`+
		`CMD \(pid \d+\) exited by itself with code 3; resigning tree\n.*resigned tree`, a.stderr())
	b.waitLine(t, 0, startedRE, 20*time.Second)
	require.Eventually(t, func() bool { return startedCount(dir) == 2 }, 20*time.Second, 5*time.Millisecond)
	overlap, _ := os.ReadFile(filepath.Join(dir, "overlap"))
	assert.Empty(t, string(overlap), "the successor's CMD started while the old worker lived")
}

// SIGKILL of krole run itself, with a grandchild that left the session and
// ignores SIGTERM: the watchdog kills it. Before that, two stray SIGTERMs
// sent to the watchdog leave it running.
func TestRunKilledTakesAStubbornSetsidGrandchildWithIt(t *testing.T) {
	t.Parallel()
	bin, c, dir := treeTest(t)
	env := []string{"DIR=" + dir, "WORKER=" + treeStubbornWorker}
	flags := append(testTimingFlags(), "--kill-timeout", "300ms")
	a := startTreeKrole(t, bin, c, dir, "a", env, flags, treeWitness+`setsid sh -c "$WORKER" & wait`)
	_, l := a.waitLine(t, 0, startedRE, 20*time.Second)
	worker := waitWorker(t, dir, "a")
	// The watchdog, CMD's parent, is deaf to stray signals (krole's own
	// main would exit at a second SIGTERM).
	b, err := os.ReadFile("/proc/" + strconv.Itoa(l.pid()) + "/stat")
	require.NoError(t, err)
	dog, err := strconv.Atoi(strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))[1])
	require.NoError(t, err)
	require.NotEqual(t, a.cmd.Process.Pid, dog)
	require.NoError(t, syscall.Kill(dog, syscall.SIGTERM))
	require.NoError(t, syscall.Kill(dog, syscall.SIGTERM))
	time.Sleep(200 * time.Millisecond) // time for the signals to act, were they to
	require.True(t, processAlive(dog), "the watchdog exited on SIGTERM")
	// The watchdog readied for krole's next CMD, once it is up.
	var standby int
	require.Eventually(t, func() bool { standby = standbyOf(a.cmd.Process.Pid); return standby > 0 }, 20*time.Second, 5*time.Millisecond,
		"no standby watchdog for the next CMD")

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	waitExit(t, a, dir)
	require.Eventually(t, func() bool { return !processAlive(worker) && !processAlive(l.pid()) }, 20*time.Second, 5*time.Millisecond,
		"the worker (pid %d) that left CMD's session outlived a killed krole run", worker)
	require.Eventually(t, func() bool { return !processAlive(standby) }, 20*time.Second, 5*time.Millisecond,
		"the standby watchdog (pid %d) outlived a killed krole run", standby)
}

// standbyOf returns the pid of the standby watchdog, a child of parent
// waiting for its CMD, or 0 when there is none.
func standbyOf(parent int) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(parent) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "cmdline"))
		if strings.Contains(string(cmdline), "\x00-standby\x00") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			return pid
		}
	}
	return 0
}

// waitExit waits for krole run to exit. A process of CMD's tree that
// outlived it holds its stderr open, which keeps p.exited from closing
// (its Wait waits for the end of stderr): waitExit says so, a failure,
// and kills the workers of dir to go on.
func waitExit(t *testing.T, p *kroleProc, dir string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-p.exited:
			return
		case <-time.After(5 * time.Millisecond):
		}
		if !processAlive(p.cmd.Process.Pid) {
			break // exited (a zombie until its stderr ends)
		}
		if time.Now().After(deadline) {
			t.Fatalf("krole run --member %s did not exit within a minute", p.member)
		}
	}
	select {
	case <-p.exited:
		return
	case <-time.After(5 * time.Second):
	}
	t.Errorf("krole run --member %s exited, but a process it left behind still holds its stderr", p.member)
	killWorkers(dir)
	<-p.exited
}

// killWorkers kills the workers of dir that still run.
func killWorkers(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "worker.*"))
	for _, f := range files {
		if pid := readPid(f); pid > 0 && processAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// `krole resign --member a` on the live holder a, whose CMD is a shell
// wrapper around a worker that drains for 3s after SIGTERM, longer than
// the lease (2s; a's own heartbeat deadline is 1.6s after its last renewal).
// a stops the tree while its session's heartbeats renew the role, and
// releases the role only once the worker is gone: b's CMD, as it starts,
// finds the old worker dead. A holder that waited for its CMD only until
// its local deadline, without renewing, then released, would start b's
// CMD beside the draining worker: the test fails on that.
func TestRunStepDownWaitsForADrainingWorker(t *testing.T) {
	t.Parallel()
	bin, c, dir := treeTest(t)
	const role = "tree"
	drainer := `trap 'i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; echo drained >> "$DIR/drained"; exit 0' TERM; ` +
		`echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; while :; do sleep 0.05; done`
	env := []string{"DIR=" + dir, "WORKER=" + drainer}
	script := treeWitness + `sh -c "$WORKER"; echo "worker ended"`
	flags := append(testTimingFlags(), "--kill-timeout", "10s")
	a, worker, b := treeHolderAndCandidate(t, bin, c, dir, env, flags, script)

	runBin(t, bin, append(clusterFlags(c), "resign", role, "--member", "a", "--wait", "30s")...)
	b.waitLine(t, 0, startedRE, 30*time.Second)
	waitWorker(t, dir, "b")
	require.Equal(t, 2, startedCount(dir))
	overlap, _ := os.ReadFile(filepath.Join(dir, "overlap"))
	assert.Empty(t, string(overlap), "the successor's CMD started while the old worker lived")
	assert.False(t, processAlive(worker), "a's worker (pid %d) outlived its step-down", worker)
	drained, _ := os.ReadFile(filepath.Join(dir, "drained"))
	assert.Equal(t, "drained\n", string(drained), "a's worker drained (not killed)")
	a.waitLine(t, 0, regexp.MustCompile(`^krole run: revoked tree \(token \d+/\d+\): this member's registration was removed`), 20*time.Second)
	assert.NotContains(t, a.stderr(), "did not return by the local deadline")
}
