package supervise

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// A standby watchdog starts its command with the environment given then,
// over the one given at Prepare, and keeps it as a watchdog started with
// the command does.
func TestStandbyStartsTheCommandWithTheLateEnvironment(t *testing.T) {
	var out testcluster.SyncBuffer
	sb, err := Prepare(Spec{Path: "sh", Args: []string{"-c", `echo "$EARLY $LATE $BOTH"; exec sleep 300`},
		Env: []string{"EARLY=e", "BOTH=early"}, Watchdog: watchdogArgv(), Grace: time.Second, Stdout: &out})
	require.NoError(t, err)
	dog := sb.dog.cmd.Process.Pid
	require.True(t, alive(dog), "the watchdog waits")

	c, err := sb.Start([]string{"LATE=l", "BOTH=late"})
	require.NoError(t, err)
	waitFor(t, func() bool { return out.String() != "" })
	assert.Equal(t, "e l late\n", out.String())
	assert.Equal(t, dog, parentOf(t, c.Pid()), "the command is the standby watchdog's child")
	_, err = sb.Start(nil)
	assert.ErrorContains(t, err, "used or closed")

	killed, err := c.Stop(context.Background(), time.Minute)
	require.NoError(t, err)
	assert.False(t, killed)
	<-c.Done()
	waitFor(t, func() bool { return !alive(dog) })
}

// A standby closed before Start starts nothing, and its watchdog exits.
func TestStandbyClosedStartsNothing(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "ran")
	sb, err := Prepare(Spec{Path: "touch", Args: []string{mark}, Watchdog: watchdogArgv()})
	require.NoError(t, err)
	dog := sb.dog.cmd.Process.Pid
	sb.Close()
	assert.False(t, alive(dog), "Close waits for the watchdog's exit")
	assert.NoFileExists(t, mark)
	_, err = sb.Start(nil)
	assert.ErrorContains(t, err, "used or closed")
}

// A standby whose watchdog died (killed while waiting) still starts the
// command, with a watchdog started then.
func TestStandbyWhoseWatchdogDiedStartsTheCommandCold(t *testing.T) {
	var out testcluster.SyncBuffer
	sb, err := Prepare(Spec{Path: "sh", Args: []string{"-c", `echo "$LATE"; exit 4`}, Watchdog: watchdogArgv(), Stdout: &out})
	require.NoError(t, err)
	dog := sb.dog.cmd.Process.Pid
	require.NoError(t, sb.dog.cmd.Process.Kill())
	waitFor(t, func() bool { return !alive(dog) })

	c, err := sb.Start([]string{"LATE=l"})
	require.NoError(t, err)
	<-c.Done()
	assert.Equal(t, 4, c.ExitCode())
	assert.Equal(t, "l\n", out.String())
	assert.True(t, c.Tree(), "kept by a new watchdog")
}

// A program that cannot run is Start's error, as without a standby.
func TestStandbyStartOfAMissingProgram(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	require.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755))
	sb, err := Prepare(Spec{Path: prog, Watchdog: watchdogArgv()})
	require.NoError(t, err)
	require.NoError(t, os.Remove(prog))
	_, err = sb.Start(nil)
	assert.ErrorContains(t, err, "no such file")
}

// A standby watchdog exits when the process that prepared it is killed.
func TestStandbyDiesWithKilledParent(t *testing.T) {
	pid := startParentAndKillIt(t, "standby")
	waitFor(t, func() bool { return !alive(pid) })
}

// parentOf returns pid's parent, from /proc.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	ppid, err := strconv.Atoi(strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))[1])
	require.NoError(t, err)
	return ppid
}

// BenchmarkCommandStart times Start returning with the command started:
// through a watchdog started then ("cold"), and through one readied ahead
// ("standby"; the Prepare is not timed).
func BenchmarkCommandStart(b *testing.B) {
	spec := Spec{Path: "sleep", Args: []string{"300"}, Watchdog: watchdogArgv()}
	run := func(b *testing.B, start func() (*Child, error)) {
		for b.Loop() {
			c, err := start()
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if _, err := c.Stop(context.Background(), time.Minute); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.Run("cold", func(b *testing.B) { run(b, func() (*Child, error) { return Start(spec) }) })
	b.Run("standby", func(b *testing.B) {
		run(b, func() (*Child, error) {
			b.StopTimer()
			sb, err := Prepare(spec)
			if err != nil {
				return nil, err
			}
			time.Sleep(50 * time.Millisecond) // the watchdog is up and waiting
			b.StartTimer()
			return sb.Start([]string{"KROLE_EPOCH=1"})
		})
	})
}
