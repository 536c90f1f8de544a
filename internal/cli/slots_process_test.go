package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// slotsScript is the CMD of TestRunSlotsProcesses: it appends "start PID
// MEMBER SLOT" to $KROLE_TEST_OUT when it starts and "stop PID" when it
// is stopped, each line in one append.
const slotsScript = `echo "start $$ $KROLE_MEMBER $KROLE_SLOT $KROLE_ROLE" >> "$KROLE_TEST_OUT"
trap 'echo "stop $$" >> "$KROLE_TEST_OUT"; exit 0' TERM
while :; do sleep 0.1; done`

// slotsEvent is a line of slotsScript's file.
type slotsEvent struct {
	start  bool
	pid    string
	member string // a start's
	slot   string // a start's KROLE_SLOT
	role   string // a start's KROLE_ROLE
}

func readSlotsEvents(t *testing.T, path string) []slotsEvent {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var evs []slotsEvent
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 5 && f[0] == "start":
			evs = append(evs, slotsEvent{start: true, pid: f[1], member: f[2], slot: f[3], role: f[4]})
		case len(f) == 2 && f[0] == "stop":
			evs = append(evs, slotsEvent{pid: f[1]})
		case len(f) == 0:
		default:
			t.Fatalf("a line of %s: %q", path, l)
		}
	}
	return evs
}

// runningSlots replays evs in order: the most CMDs that ran at once, and
// the start of each CMD that runs at the end.
func runningSlots(evs []slotsEvent) (most int, now []slotsEvent) {
	running := map[string]slotsEvent{}
	for _, e := range evs {
		if e.start {
			running[e.pid] = e
		} else {
			delete(running, e.pid)
		}
		most = max(most, len(running))
	}
	for _, e := range running {
		now = append(now, e)
	}
	return most, now
}

// TestRunSlotsProcesses runs five `krole run jobs --slots 3` processes
// against one cluster: three CMDs run, one per slot; SIGKILL of one
// holder's krole (its watchdog stops its CMD) and SIGTERM of another
// (it stops its CMD and releases its slot) leave their slots to the two
// members that waited, and three CMDs run again. The CMDs' own record
// never shows more than three running at once.
func TestRunSlotsProcesses(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "the watchdog that stops a killed krole's CMD is Linux's")
	c := testcluster.Start(t, testcluster.Options{})
	out := filepath.Join(t.TempDir(), "cmds")
	// A kill timeout well above the time the script takes to say it
	// stopped: its "stop" line is written before krole goes on.
	flags := append(testTimingFlags(), "--slots", "3", "--kill-timeout", "5s")
	procs := map[string]*kroleProc{}
	for i := range 5 {
		m := fmt.Sprintf("node-%d", i)
		procs[m] = startKroleScript(t, bin, c, "jobs", m, []string{"KROLE_TEST_OUT=" + out}, flags, slotsScript)
	}
	running := func() []slotsEvent {
		_, now := runningSlots(readSlotsEvents(t, out))
		return now
	}
	require.Eventually(t, func() bool { return len(running()) == 3 }, 30*time.Second, 20*time.Millisecond,
		"three CMDs never ran; the members said:\n%s", procsLog(procs))
	holders := running()
	slots := map[string]bool{}
	for _, e := range holders {
		slots[e.slot] = true
		assert.Equal(t, "jobs-slot-"+e.slot, e.role, "KROLE_ROLE is the slot's role")
	}
	assert.Len(t, slots, 3, "one CMD per slot: %+v", holders)

	// SIGKILL of one holder's krole, SIGTERM of another's.
	killed, termed := procs[holders[0].member], procs[holders[1].member]
	require.NoError(t, killed.cmd.Process.Signal(syscall.SIGKILL))
	require.NoError(t, termed.cmd.Process.Signal(syscall.SIGTERM))
	<-killed.exited
	<-termed.exited
	assert.Equal(t, 0, termed.state.ExitCode(), "SIGTERM: krole run exits 0; stderr:\n%s", termed.stderr())
	assert.Regexp(t, `(?m)^krole run: resigned jobs-slot-\d \(token \d+/\d+\)$`, termed.stderr())

	// The two members that waited take the freed slots.
	require.Eventually(t, func() bool {
		now := running()
		if len(now) != 3 {
			return false
		}
		for _, e := range now {
			if e.member == killed.member || e.member == termed.member {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "three CMDs never ran again; the file says %+v; the members said:\n%s",
		readSlotsEvents(t, out), procsLog(procs))
	most, now := runningSlots(readSlotsEvents(t, out))
	assert.LessOrEqual(t, most, 3, "more CMDs than slots ran at once: %+v", readSlotsEvents(t, out))
	assert.Len(t, now, 3)
	slots = map[string]bool{}
	for _, e := range now {
		slots[e.slot] = true
	}
	assert.Len(t, slots, 3, "one CMD per slot: %+v", now)

	// Everyone leaves: each krole stops its CMD and exits 0.
	for m, p := range procs {
		if p != killed && p != termed {
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM), m)
		}
	}
	for m, p := range procs {
		<-p.exited
		if p != killed {
			assert.Equal(t, 0, p.state.ExitCode(), "%s: stderr:\n%s", m, p.stderr())
		}
	}
	evs := readSlotsEvents(t, out)
	most, now = runningSlots(evs)
	assert.LessOrEqual(t, most, 3, "more CMDs than slots ran at once: %+v", evs)
	assert.Empty(t, now, "every CMD stopped: %+v", evs)
}

// --slots takes 1 to 1024 slots whose names are valid roles; anything
// else is a usage error, in one line.
func TestRunSlotsUsage(t *testing.T) {
	t.Setenv("KROLE_MEMBER", "")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "jobs", "--slots", "0"}, "--slots 0: must be 1 to 1024"},
		{[]string{"run", "jobs", "--slots", "-1", "--", "true"}, "--slots -1: must be 1 to 1024"},
		{[]string{"run", "jobs", "--slots", "1025"}, "--slots 1025: must be 1 to 1024"},
		{[]string{"run", "jobs", "--slots", "x"}, `invalid value "x" for flag --slots`},
		{[]string{"run", strings.Repeat("a", 125), "--slots", "3"}, "--slots 3: the name of slot 0: invalid role"},
	} {
		r := run(t, tc.args...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, tc.msg, "%v", tc.args)
	}
}
