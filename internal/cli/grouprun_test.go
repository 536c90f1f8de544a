package cli

import (
	"context"
	"fmt"
	"os"
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
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/internal/grouptest"
	"github.com/krabka/krole/internal/testcluster"
)

// rolesScript is the CMD of TestRunRolesProcesses: it appends "start PID
// MEMBER ROLE FENCE" to $KROLE_TEST_OUT when it starts and "stop PID"
// when it is stopped, each line in one append, so the file's order is
// the order in which the CMDs of every member started and stopped.
const rolesScript = `echo "start $$ $KROLE_MEMBER $KROLE_ROLE $KROLE_FENCE" >> "$KROLE_TEST_OUT"
trap 'echo "stop $$" >> "$KROLE_TEST_OUT"; exit 0' TERM
while :; do sleep 0.1; done`

// roleCmd is the start of one CMD in rolesScript's file.
type roleCmd struct {
	pid, member, role string
	fence             int64
}

// rolesRecord replays rolesScript's file: the CMDs that ran at the same
// time as another CMD of their role (none, when every role's CMD ran on
// one member at a time), the CMDs that run at the end, and each role's
// starts in order.
func rolesRecord(t *testing.T, path string) (overlaps []string, now []roleCmd, starts map[string][]roleCmd) {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	require.NoError(t, err)
	running := map[string]roleCmd{} // by pid
	starts = map[string][]roleCmd{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 5 && f[0] == "start":
			fence, err := strconv.ParseInt(f[4], 10, 64)
			require.NoError(t, err, "a line of %s: %q", path, l)
			c := roleCmd{pid: f[1], member: f[2], role: f[3], fence: fence}
			for _, o := range running {
				if o.role == c.role {
					overlaps = append(overlaps, fmt.Sprintf("%+v started while %+v ran", c, o))
				}
			}
			running[c.pid] = c
			starts[c.role] = append(starts[c.role], c)
		case len(f) == 2 && f[0] == "stop":
			delete(running, f[1]) // a second SIGTERM may say it twice
		case len(f) == 0:
		default:
			t.Fatalf("a line of %s: %q", path, l)
		}
	}
	for _, c := range running {
		now = append(now, c)
	}
	return overlaps, now, starts
}

// perMember counts the CMDs of cmds by member.
func perMember(cmds []roleCmd) map[string]int {
	n := map[string]int{}
	for _, c := range cmds {
		n[c.member]++
	}
	return n
}

// TestRunRolesProcesses runs three `krole run shards --roles
// 'shard-{0..7}'` processes against one cluster, node-0 with --weight 2:
// they settle at 4, 2 and 2 roles, one CMD per role held. SIGTERM makes
// node-1 hand its roles over (each its own handover) and exit 0; each of
// its roles' CMDs starts on another member after node-1's CMD of that
// role stopped. The CMDs' own record shows every role's CMD running on
// one member at a time, with a greater KROLE_FENCE at each start.
func TestRunRolesProcesses(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "the watchdog that keeps CMD's tree is Linux's")
	c := testcluster.Start(t, testcluster.Options{})
	out := filepath.Join(t.TempDir(), "cmds")
	// A kill timeout well above the time the script takes to say it
	// stopped: its "stop" line is written before krole goes on.
	flags := append(testTimingFlags(), "--roles", "shard-{0..7}", "--kill-timeout", "5s")
	procs := map[string]*kroleProc{}
	for i := range 3 {
		m := fmt.Sprintf("node-%d", i)
		f := flags
		if i == 0 {
			f = append(append([]string{}, flags...), "--weight", "2")
		}
		procs[m] = startKroleScript(t, bin, c, "shards", m, []string{"KROLE_TEST_OUT=" + out}, f, rolesScript)
	}
	settled := func(want map[string]int) func() bool {
		return func() bool {
			_, now, _ := rolesRecord(t, out)
			return len(now) == 8 && fmt.Sprint(perMember(now)) == fmt.Sprint(want)
		}
	}
	require.Eventually(t, settled(map[string]int{"node-0": 4, "node-1": 2, "node-2": 2}), time.Minute, 20*time.Millisecond,
		"the group never settled at 4, 2 and 2 CMDs; the members said:\n%s", procsLog(procs))
	_, before, _ := rolesRecord(t, out)
	var gone []roleCmd // node-1's CMDs
	for _, cmd := range before {
		if cmd.member == "node-1" {
			gone = append(gone, cmd)
		}
	}
	require.Len(t, gone, 2)

	termed := procs["node-1"]
	require.NoError(t, termed.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-termed.exited:
	case <-time.After(time.Minute):
		t.Fatalf("node-1 did not exit after SIGTERM; the members said:\n%s", procsLog(procs))
	}
	assert.Equal(t, 0, termed.state.ExitCode(), "SIGTERM: krole run exits 0; stderr:\n%s", termed.stderr())
	stderr := termed.stderr()
	assert.Contains(t, stderr, "krole run: interrupted; handing the roles of shards over, then leaving\n")
	assert.Contains(t, stderr, "krole run: drained: holding no role of shards; leaving\n")
	for _, cmd := range gone {
		assert.Regexp(t, `(?m)^krole run: revoked `+regexp.QuoteMeta(cmd.role)+` \(token \d+/\d+\): handed over$`, stderr)
	}
	assert.NotContains(t, stderr, "krole run: resigned ", "every role was handed over before leaving")

	// The others take node-1's roles; each starts after node-1's CMD of
	// that role stopped (the replay finds no overlap), on another member.
	require.Eventually(t, func() bool {
		_, now, _ := rolesRecord(t, out)
		return len(now) == 8 && perMember(now)["node-1"] == 0
	}, time.Minute, 20*time.Millisecond, "node-1's roles did not pass on; the members said:\n%s", procsLog(procs))
	overlaps, _, starts := rolesRecord(t, out)
	assert.Empty(t, overlaps, "a role's CMDs ran at once on two members")
	for _, cmd := range gone {
		s := starts[cmd.role]
		require.NotEmpty(t, s)
		last := s[len(s)-1]
		assert.NotEqual(t, "node-1", last.member, "%s after node-1 left: %+v", cmd.role, s)
		assert.Greater(t, last.fence, cmd.fence, "%s: the next holding's KROLE_FENCE", cmd.role)
	}

	// The others leave too: each krole stops its CMDs and exits 0.
	for _, m := range []string{"node-0", "node-2"} {
		require.NoError(t, procs[m].cmd.Process.Signal(syscall.SIGTERM), m)
	}
	for _, m := range []string{"node-0", "node-2"} {
		p := procs[m]
		select {
		case <-p.exited:
		case <-time.After(time.Minute):
			t.Fatalf("%s did not exit after SIGTERM; the members said:\n%s", m, procsLog(procs))
		}
		assert.Equal(t, 0, p.state.ExitCode(), "%s: stderr:\n%s", m, p.stderr())
	}
	overlaps, now, starts := rolesRecord(t, out)
	assert.Empty(t, overlaps, "a role's CMDs ran at once on two members")
	assert.Empty(t, now, "every CMD stopped")
	for role, s := range starts {
		for k := 1; k < len(s); k++ {
			assert.Greater(t, s[k].fence, s[k-1].fence, "%s: KROLE_FENCE of each holding: %+v", role, s)
		}
	}
}

// Without CMD, a member of a group says each role gained and lost on
// stdout, with its token; krole drain makes it hand every role over and
// exit 0.
func TestRunRolesPrintsAndDrains(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := newWatchedBuffer(), newWatchedBuffer()
	args := append(append(append(clusterFlags(c), "run", "shards", "--roles", "r-{0..1},r-2"), testTimingFlags()...), "--member", "w1")
	done := startApp(t, ctx, args, stdout, stderr)
	gained := regexp.MustCompile(`(?m)^gained (r-\d) (\d+/\d+)$`)
	stdout.await(t, "w1 gains its three roles", func(s string) bool { return len(gained.FindAllString(s, -1)) == 3 })

	roles, err := group.Expand("r-{0..2}")
	require.NoError(t, err)
	holders := grouptest.NewHolders()
	grouptest.StartMember(t, c, "w2", "shards", roles, holders)
	r := runOn(t, c, "drain", "--member", "w1")
	requireOK(t, r)
	assert.Equal(t, "member w1 drained: 0 roles held\n", r.Stdout)
	holders.Await(t, roles, map[codec.MemberID]int{"w2": 3})
	select {
	case code := <-done:
		assert.Equal(t, ExitOK, code, "stderr:\n%s", stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("krole run did not exit after its drain; stderr:\n%s", stderr.String())
	}
	assert.Contains(t, stderr.String(), "krole run: drained on request (krole drain): holding no role of shards; leaving\n")
	// Every role gained was lost again, under the same token.
	out := stdout.String()
	for _, m := range gained.FindAllStringSubmatch(out, -1) {
		assert.Contains(t, out, "lost "+m[1]+" "+m[2]+"\n")
	}
	assert.Equal(t, strings.Count(out, "gained "), strings.Count(out, "lost "), "stdout:\n%s", out)
}

// A CMD that exits by itself ends the member of a group, as it ends
// `krole run` of one role: the other roles' CMDs are stopped, and krole
// run exits with that CMD's code.
func TestRunRolesCmdExits(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the watchdog that keeps CMD's tree is Linux's")
	}
	c := testcluster.Start(t, testcluster.Options{})
	mark := filepath.Join(t.TempDir(), "j-0")
	// j-0's CMD runs until stopped; j-1's exits with 3 once j-0's runs.
	script := `if [ "$KROLE_ROLE" = j-0 ]; then touch "$1"; exec sleep 300; fi
while [ ! -e "$1" ]; do sleep 0.05; done; exit 3`
	args := append(append(clusterFlags(c), "run", "jobs", "--roles", "j-{0..1}", "--member", "w1"), testTimingFlags()...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr := newWatchedBuffer(), newWatchedBuffer()
	code := <-startApp(t, ctx, append(args, "--", "sh", "-c", script, "sh", mark), stdout, stderr)
	assert.Equal(t, 3, code, "stderr:\n%s", stderr.String())
	assert.Regexp(t, `(?m)^krole run: CMD for j-1 \(pid \d+\) exited by itself with code 3; leaving the roles of jobs$`, stderr.String())
	assert.Regexp(t, `(?m)^krole run: stopping CMD for j-0 \(pid \d+\): SIGTERM`, stderr.String())
	assert.Regexp(t, `(?m)^krole run: CMD for j-0 \(pid \d+\) stopped with code \d+$`, stderr.String())
}

// Bad input to --roles, --weight and --drain-on-term is a usage error,
// in one line naming what is wrong, before anything connects.
func TestRunRolesUsage(t *testing.T) {
	t.Setenv("KROLE_MEMBER", "")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "shards", "--roles", "s-{0..3}", "--slots", "2"}, "--roles and --slots exclude each other"},
		{[]string{"run", "shards", "--roles", "s-{0..x}"}, `--roles: group pattern "s-{0..x}": the range must be {FROM..TO} with whole numbers`},
		{[]string{"run", "shards", "--roles", "s-{3..1}", "--", "true"}, `--roles: group pattern "s-{3..1}": the range runs backwards`},
		{[]string{"run", "shards", "--roles", "a/b"}, `--roles: invalid role "a/b"`},
		{[]string{"run", "shards", "--roles", "s-{0..1024}"}, "--roles s-{0..1024} names more than 1024 roles"},
		{[]string{"run", "shards", "--roles", "s-{0..600}", "--roles", "t-{0..600}"}, "--roles s-{0..600},t-{0..600} names more than 1024 roles"},
		{[]string{"run", "shards", "--roles", "s-{0..3},s-2"}, `--roles: role s-2 is named twice (by "s-{0..3}" and by "s-2")`},
		{[]string{"run", "shards", "--roles", "s-{0..3}", "--weight", "0"}, "--weight 0: must be 1 to 1000"},
		{[]string{"run", "shards", "--roles", "s-{0..3}", "--weight", "1001"}, "--weight 1001: must be 1 to 1000"},
		{[]string{"run", "shards", "--weight", "2"}, "--weight applies to a member of a group over named roles: use it with --roles"},
		{[]string{"run", "shards", "--slots", "2", "--weight", "2"}, "--weight applies to a member of a group over named roles"},
		{[]string{"run", "shards", "--drain-on-term"}, "--drain-on-term applies to a group (--roles or --slots)"},
		{[]string{"run", "shards", "--roles", "s-{0..3}", "--try"}, "--try does not apply to --roles"},
		{[]string{"run", "shards", "--roles", "s-{0..3}", "--timeout", "1m"}, "--timeout does not apply to --roles"},
	} {
		// 127.0.0.1:1 refuses connections: none of these may get as far
		// as the cluster.
		r := run(t, append([]string{"--brokers", "127.0.0.1:1"}, tc.args...)...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, "krole: "+tc.msg, "%v", tc.args)
	}
}
