package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/krabka/krole/rolestate"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// schedulingSlack is added to the bounds on failover that the tests
// assert: the bounds are what the succession rules promise, and the slack
// is for a busy CI machine that schedules the processes late. It is not a
// measure of speed.
const schedulingSlack = 2 * time.Second

// TestRunProcesses runs `krole run` as separate processes against one
// cluster over TCP, each with a CMD that records itself in a file and
// sleeps, and checks the life of the role through them:
//
//   - one CMD at a time (a sampler checks the live CMDs every 10ms: this
//     proves that no two CMDs overlapped at a sampled instant, not between
//     samples; the epochs that the CMDs record must also strictly rise);
//   - SIGKILL of the holder's krole: its CMD dies with it, and another
//     member takes over within lease + heartbeat interval + stagger, with a
//     lease granted no earlier than the dead holder's deadline;
//   - SIGTERM of the holder's krole: it stops CMD, resigns and exits 0, and
//     the next member takes over before the old lease would have run out;
//   - a holder whose transactional id is taken over by another producer
//     says that it was fenced and stops its CMD;
//   - `krole table` and `krole describe` show the role that a `krole run`
//     holds, under the token its CMD got.
func TestRunProcesses(t *testing.T) {
	t.Parallel()
	const role = "ctl"
	bin := processTest(t, "checks processes through /proc, and the parent-death signal is Linux's")
	c := testcluster.Start(t, testcluster.Options{})
	out := filepath.Join(t.TempDir(), "cmds")
	smp := startSampler(t, out)
	start := func(member string) *kroleProc {
		t.Helper()
		p := startKrole(t, bin, c, role, member, out)
		// Members join one at a time: each is a candidate before the next
		// starts (see TestRunMembersStartTogether for why).
		require.Eventually(t, func() bool {
			st := rolestate.Fold(role, readRole(t, c.Config, role))
			return st.Rank(codec.MemberID(member)) >= 0
		}, 20*time.Second, 20*time.Millisecond, "%s never registered; stderr:\n%s", member, p.stderr())
		return p
	}

	// The first member takes the role and starts its CMD.
	a := start("node-a")
	_, first := a.waitLine(t, 0, startedRE, 20*time.Second)
	b := start("node-b")
	cc := start("node-c")
	cmds := waitCmds(t, out, 1)
	assert.Equal(t, "node-a", cmds[0].member)
	assert.Equal(t, first.pid(), cmds[0].pid)
	assert.True(t, processAlive(cmds[0].pid))

	// SIGKILL of the holder: its CMD does not outlive it, and another
	// member takes the role once the lease has run out.
	marks := mark(b, cc)
	killed := time.Now()
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	<-a.exited
	require.Eventually(t, func() bool { return !processAlive(cmds[0].pid) }, 2*time.Second, 5*time.Millisecond,
		"the CMD of a killed krole run outlived it")
	second, took := waitAny(t, marks, startedRE, 20*time.Second)
	bound := testLease + testRenew + testStagger
	t.Logf("SIGKILL of %s: %s started its CMD %v later", a.member, second.member, took.at.Sub(killed).Round(time.Millisecond))
	assert.LessOrEqual(t, took.at.Sub(killed), bound+schedulingSlack,
		"failover after SIGKILL within lease + heartbeat interval + stagger (%v) plus %v of scheduling slack", bound, schedulingSlack)
	recs := readRole(t, c.Config, role)
	dead := lastLeaseOf(recs, "node-a", false)
	next := firstLeaseAfter(recs, dead)
	require.NotNil(t, dead)
	require.NotNil(t, next)
	assert.Equal(t, second.member, string(next.lease.Member))
	assert.GreaterOrEqual(t, next.lease.GrantedAt, dead.lease.Deadline, "the new holder waited for the dead holder's lease to end")
	assert.True(t, next.lease.Token.Newer(dead.lease.Token))

	// SIGTERM of the holder: it stops its CMD, resigns and exits 0; the
	// last member takes the role before the old lease would have run out.
	third := b
	if second == b {
		third = cc
	}
	cmds = waitCmds(t, out, 2)
	marks = mark(third)
	termed := time.Now()
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	<-second.exited
	assert.Equal(t, 0, second.state.ExitCode(), "stderr:\n%s", second.stderr())
	assert.False(t, processAlive(cmds[1].pid), "krole run exits after its CMD")
	assert.Regexp(t, `(?m)^krole run: resigned ctl \(token \d+/\d+\)$`, second.stderr())
	_, l := third.waitLine(t, marks[third], startedRE, 20*time.Second)
	t.Logf("SIGTERM of %s: %s started its CMD %v later", second.member, third.member, l.at.Sub(termed).Round(time.Millisecond))
	recs = readRole(t, c.Config, role)
	old := lastLeaseOf(recs, codec.MemberID(second.member), false)
	next = firstLeaseAfter(recs, old)
	require.NotNil(t, old)
	require.NotNil(t, next)
	assert.Equal(t, third.member, string(next.lease.Member))
	assert.Less(t, next.lease.GrantedAt, old.lease.Deadline, "the handover did not wait for the lease")

	// A holder whose transactional id another producer takes over is
	// fenced at its next renewal: it says so and stops its CMD. node-a
	// comes back, to take the role after that.
	a = start("node-a")
	cmds = waitCmds(t, out, 3)
	holderCmd := cmds[2]
	marks = mark(third)
	ft, err := fencing.NewBrokerTransport(c.Config)
	require.NoError(t, err)
	defer ft.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fenced := time.Now()
	tok, err := ft.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	_, l = third.waitLine(t, marks[third], regexp.MustCompile(`^krole run: revoked ctl \(token \d+/\d+\): fenced`), 20*time.Second)
	t.Logf("fenced %s: it said so %v later", third.member, l.at.Sub(fenced).Round(time.Millisecond))
	assert.LessOrEqual(t, l.at.Sub(fenced), testRenew+schedulingSlack, "the holder learns it was fenced at its next renewal")
	third.waitLine(t, marks[third], regexp.MustCompile(fmt.Sprintf(`^krole run: CMD \(pid %d\) (stopped|killed)`, holderCmd.pid)), 20*time.Second)
	assert.False(t, processAlive(holderCmd.pid), "a fenced holder's CMD is stopped")
	cmds = waitCmds(t, out, 4)
	assert.Greater(t, cmds[3].epoch, int(tok.Epoch), "the next holder's token is newer than the fencing producer's")

	// table and describe show the role held by the CMD's token.
	holder := cmds[3]
	var rows []struct {
		Role   string `json:"role"`
		Holder *struct {
			Member string      `json:"member"`
			Token  codec.Token `json:"token"`
		} `json:"holder"`
	}
	r := runBin(t, bin, append(clusterFlags(c), "table", role, "-o", "json")...)
	require.NoError(t, json.Unmarshal([]byte(r), &rows), r)
	require.Len(t, rows, 1)
	require.NotNil(t, rows[0].Holder, r)
	assert.Equal(t, holder.member, rows[0].Holder.Member)
	assert.Equal(t, holder.epoch, int(rows[0].Holder.Token.Epoch))
	var desc struct {
		Held  bool        `json:"held"`
		Token codec.Token `json:"token"`
	}
	r = runBin(t, bin, append(clusterFlags(c), "describe", role, "-o", "json")...)
	require.NoError(t, json.Unmarshal([]byte(r), &desc), r)
	assert.Equal(t, holder.epoch, int(desc.Token.Epoch), "the broker's token for the role is the CMD's")

	// Everyone leaves: each krole stops its CMD and exits 0.
	for _, p := range []*kroleProc{a, third} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range []*kroleProc{a, third} {
		<-p.exited
		assert.Equal(t, 0, p.state.ExitCode(), "%s: stderr:\n%s", p.member, p.stderr())
	}
	for _, cmd := range readCmds(t, out) {
		assert.False(t, processAlive(cmd.pid), "CMD %d of %s", cmd.pid, cmd.member)
	}

	smp.stop()
	samples, overlaps := smp.result()
	assert.Empty(t, overlaps, "two CMDs were alive at once")
	assert.Greater(t, samples, 100, "the sampler ran")
	cmds = readCmds(t, out)
	for i := 1; i < len(cmds); i++ {
		assert.Greater(t, cmds[i].epoch, cmds[i-1].epoch, "each CMD runs under a newer token: %+v", cmds)
	}
}

// The sampler of TestRunProcesses sees two live CMDs when there are.
func TestRunSamplerSeesOverlap(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	out := filepath.Join(t.TempDir(), "cmds")
	var lines string
	for i, m := range []string{"x", "y"} {
		cmd := exec.Command("sleep", "30")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines += fmt.Sprintf("%s %d %d\n", m, i, cmd.Process.Pid)
	}
	require.NoError(t, os.WriteFile(out, []byte(lines+"z 3 12"), 0o644)) // the last line is unfinished
	smp := startSampler(t, out)
	require.Eventually(t, func() bool {
		n, _ := smp.result()
		return n > 0
	}, 5*time.Second, 10*time.Millisecond)
	smp.stop()
	_, overlaps := smp.result()
	require.NotEmpty(t, overlaps)
	assert.Regexp(t, `x \(epoch 0, pid \d+\), y \(epoch 1, pid \d+\)$`, overlaps[0])
}

// startedRE matches the line of `krole run` that says it started CMD.
var startedRE = regexp.MustCompile(`^krole run: started CMD \(pid (\d+)\) with token \d+/\d+$`)

// built is the krole binary that the package's tests share: built once,
// into binDir, which TestMain removes after the tests.
var built struct {
	once sync.Once
	bin  string
	err  error
}

// binDir is the directory of the shared binary ("" until it is built).
var binDir string

// processTest skips t with -short, and on systems other than Linux
// when linux (why the test needs Linux) is not "", and returns the krole
// binary (buildKrole).
func processTest(t *testing.T, linux string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	if linux != "" && runtime.GOOS != "linux" {
		t.Skip(linux)
	}
	return buildKrole(t)
}

// buildKrole returns the krole binary, built on the first call.
func buildKrole(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "krole-cli-test-")
		if err != nil {
			built.err = err
			return
		}
		binDir = dir
		built.bin = filepath.Join(dir, "krole")
		if out, err := exec.Command("go", "build", "-o", built.bin, "github.com/krabka/krole").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.bin
}

// runBin runs the krole binary to completion and returns its stdout.
func runBin(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "krole %v: %s", args, stderr.String())
	return string(out)
}

// kroleProc is a `krole run` process, with its stderr lines as they came.
type kroleProc struct {
	member string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited and state is set
	state  *os.ProcessState

	mu    sync.Mutex
	lines []procLine
}

type procLine struct {
	at   time.Time // when the test read the line
	text string
}

// pid returns the pid that a startedRE line names.
func (l procLine) pid() int {
	m := startedRE.FindStringSubmatch(l.text)
	if m == nil {
		return 0
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// startKrole starts `krole run ROLE --member MEMBER` with short timings and
// a CMD that appends "MEMBER EPOCH PID" to out, then sleeps. The process is
// killed when the test ends, if it still runs; its stderr is logged when
// the test failed.
func startKrole(t *testing.T, bin string, c *testcluster.Cluster, role, member, out string) *kroleProc {
	t.Helper()
	return startKroleWith(t, bin, c, role, member, out, testTimingFlags()...)
}

// startKroleWith is startKrole with flags of its own instead of the test
// timings.
func startKroleWith(t *testing.T, bin string, c *testcluster.Cluster, role, member, out string, flags ...string) *kroleProc {
	t.Helper()
	return startKroleScript(t, bin, c, role, member, []string{"KROLE_TEST_OUT=" + out}, flags,
		`echo "$KROLE_MEMBER $KROLE_EPOCH $$" >> "$KROLE_TEST_OUT"; exec sleep 300`)
}

// startKroleScript starts `krole run ROLE --member MEMBER FLAGS... -- sh -c
// SCRIPT`, with env added to the environment; otherwise as startKrole.
func startKroleScript(t *testing.T, bin string, c *testcluster.Cluster, role, member string, env, flags []string, script string) *kroleProc {
	t.Helper()
	args := append(append(clusterFlags(c), "run", role, "--member", member), flags...)
	args = append(args, "--", "sh", "-c", script)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &kroleProc{member: member, cmd: cmd, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, procLine{at: time.Now(), text: sc.Text()})
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("stderr of krole run --member %s (with the times the test read each line):\n%s", member, p.log())
		}
	})
	return p
}

// stderr returns the lines the process printed on stderr so far.
func (p *kroleProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines {
		fmt.Fprintf(&b, "%s\n", l.text)
	}
	return b.String()
}

// procsLog returns every member's lines (kroleProc.log), for failures.
func procsLog(procs map[string]*kroleProc) string {
	var b strings.Builder
	for m, p := range procs {
		fmt.Fprintf(&b, "--- %s:\n%s", m, p.log())
	}
	return b.String()
}

// log returns the lines with the times the test read them, for failures.
func (p *kroleProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines {
		fmt.Fprintf(&b, "%s %s\n", l.at.Format("15:04:05.000"), l.text)
	}
	return b.String()
}

func (p *kroleProc) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// find returns the index and the first line from index from on that
// matches re.
func (p *kroleProc) find(from int, re *regexp.Regexp) (int, procLine, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := from; i < len(p.lines); i++ {
		if re.MatchString(p.lines[i].text) {
			return i, p.lines[i], true
		}
	}
	return 0, procLine{}, false
}

// waitLine waits for a line that matches re, from line index from on.
func (p *kroleProc) waitLine(t *testing.T, from int, re *regexp.Regexp, timeout time.Duration) (int, procLine) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if i, l, ok := p.find(from, re); ok {
			return i, l
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("krole run --member %s: no line matching %s", p.member, re)
	return 0, procLine{}
}

// mark returns the number of lines each process has printed so far.
func mark(ps ...*kroleProc) map[*kroleProc]int {
	m := make(map[*kroleProc]int, len(ps))
	for _, p := range ps {
		m[p] = p.count()
	}
	return m
}

// waitAny waits for the first of the processes in marks to print a line
// matching re after its mark, and returns it with the line.
func waitAny(t *testing.T, marks map[*kroleProc]int, re *regexp.Regexp, timeout time.Duration) (*kroleProc, procLine) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var found *kroleProc
		var line procLine
		for p, from := range marks {
			if _, l, ok := p.find(from, re); ok && (found == nil || l.at.Before(line.at)) {
				found, line = p, l
			}
		}
		if found != nil {
			return found, line
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no process printed a line matching %s", re)
	return nil, procLine{}
}

// cmdRecord is a line that a CMD of startKrole wrote when it started.
type cmdRecord struct {
	member string
	epoch  int
	pid    int
}

// waitCmds waits until n CMDs have recorded themselves in path (krole run
// says that it started CMD before CMD has run), and returns the records.
func waitCmds(t *testing.T, path string, n int) []cmdRecord {
	t.Helper()
	var recs []cmdRecord
	require.Eventually(t, func() bool {
		recs = readCmds(t, path)
		return len(recs) >= n
	}, 20*time.Second, 5*time.Millisecond, "waiting for CMD number %d", n)
	require.Len(t, recs, n, "%+v", recs)
	return recs
}

func readCmds(t *testing.T, path string) []cmdRecord {
	t.Helper()
	recs, err := parseCmds(path)
	require.NoError(t, err)
	return recs
}

func parseCmds(path string) ([]cmdRecord, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []cmdRecord
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasSuffix(line, "\n") {
			continue // the end, or a line being written
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		epoch, err1 := strconv.Atoi(f[1])
		pid, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		recs = append(recs, cmdRecord{member: f[0], epoch: epoch, pid: pid})
	}
	return recs, nil
}

// sampler checks, every 10ms, how many of the CMDs recorded in a file are
// alive.
type sampler struct {
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	samples  int
	overlaps []string
}

// result returns the number of samples taken and the overlaps seen.
func (s *sampler) result() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, append([]string(nil), s.overlaps...)
}

func startSampler(t *testing.T, path string) *sampler {
	s := &sampler{done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
			recs, err := parseCmds(path)
			var alive []string
			for _, r := range recs {
				if processAlive(r.pid) {
					alive = append(alive, fmt.Sprintf("%s (epoch %d, pid %d)", r.member, r.epoch, r.pid))
				}
			}
			s.mu.Lock()
			s.samples++
			switch {
			case err != nil:
				s.overlaps = append(s.overlaps, err.Error())
			case len(alive) > 1:
				s.overlaps = append(s.overlaps, time.Now().Format("15:04:05.000")+": "+strings.Join(alive, ", "))
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

// stop ends the sampling; the fields may be read after it.
func (s *sampler) stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
}

// leaseAt is a lease record of a role with its offset.
type leaseAt struct {
	offset int64
	lease  codec.Lease
}

// lastLeaseOf returns the last lease that member wrote (a release only
// when releases is set), or nil.
func lastLeaseOf(recs []fencing.RoleRecord, member codec.MemberID, releases bool) *leaseAt {
	for i := len(recs) - 1; i >= 0; i-- {
		l := recs[i].Record.Lease
		if recs[i].Key.Kind == codec.KindLease && l != nil && l.Member == member && l.Released() == releases {
			return &leaseAt{offset: recs[i].Offset, lease: *l}
		}
	}
	return nil
}

// firstLeaseAfter returns the first lease after after that is not a
// release, or nil.
func firstLeaseAfter(recs []fencing.RoleRecord, after *leaseAt) *leaseAt {
	if after == nil {
		return nil
	}
	for _, r := range recs {
		if r.Offset > after.offset && r.Key.Kind == codec.KindLease && r.Record.Lease != nil && !r.Record.Lease.Released() {
			return &leaseAt{offset: r.Offset, lease: *r.Record.Lease}
		}
	}
	return nil
}
