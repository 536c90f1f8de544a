package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// A second `krole run controller --member node-3` while node-3 runs
// and holds the role exits 73 with one line naming the other instance;
// it writes nothing (no registration, no tombstone, no lease), and the
// running node-3 keeps the role under the same token and renews on.
func TestRunSecondProcessUnderTheSameMemberIsRefused(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	args := append(append(append(clusterFlags(c), "run", "controller"), testTimingFlags()...), "--member", "node-3")
	a := startBackground(t, args...)
	tok := a.line("the token")
	before := readRole(t, c.Config, "controller")
	var reg *codec.Registration
	for _, r := range before {
		if r.Key.Kind == codec.KindRegistration && r.Key.Member == "node-3" {
			reg = r.Record.Registration
		}
	}
	require.NotNil(t, reg)
	require.NotEmpty(t, reg.Instance, "krole run registers with its instance")

	// Its first heartbeat comes with its first holding, just after the
	// election.
	beatsBefore := readSession(t, c.Config, "node-3")
	require.Eventually(t, func() bool {
		beatsBefore = readSession(t, c.Config, "node-3")
		return len(beatsBefore) > 0
	}, 10*time.Second, 20*time.Millisecond, "node-3's first heartbeat")
	r := run(t, args...)
	assert.Equal(t, ExitRunMemberInUse, r.Code, "stderr: %s", r.Stderr)
	assertOneLineErrorIn(t, r.Stderr)
	// What to do first, the details after.
	assert.Contains(t, r.Stderr,
		"\nkrole: another process runs as member node-3 on role controller; stop it or choose another --member (it is instance "+reg.Instance+": ")
	assert.NotContains(t, r.Stderr, "left controller")
	assert.Empty(t, r.Stdout)

	// Nothing written by the refused process; the holder renews on under
	// its token.
	time.Sleep(2 * testRenew)
	after := readRole(t, c.Config, "controller")
	for _, rec := range after[len(before):] {
		switch rec.Key.Kind {
		case codec.KindRegistration:
			t.Errorf("a registration record was written after the holder's: %+v", rec)
		case codec.KindLease:
			require.NotNil(t, rec.Record.Lease)
			assert.Equal(t, codec.MemberID("node-3"), rec.Record.Lease.Member)
			assert.Equal(t, tok, rec.Record.Lease.Token.String(), "renewed under the same token")
			assert.False(t, rec.Record.Lease.Released())
		}
	}
	beats := readSession(t, c.Config, "node-3")
	require.Greater(t, len(beats), len(beatsBefore), "the holder renewed (its member session's heartbeats)")
	for _, b := range beats[len(beatsBefore):] {
		assert.False(t, b.Record.Heartbeat.End, "the holder's session was not ended")
		assert.Equal(t, beatsBefore[len(beatsBefore)-1].Record.Heartbeat.Session.Nonce, b.Record.Heartbeat.Session.Nonce, "the same incarnation")
	}
	assert.Equal(t, ExitOK, a.stop(), "stderr: %s", a.stderr.String())
	assert.NotContains(t, a.stderr.String(), "registration was removed")
	assert.NotContains(t, a.stderr.String(), "revoked")
}

// `krole run
// controller --member node-3` is SIGKILLed while it holds the role; the
// same command started again, with no manual step between, is not
// refused as a second instance: it takes the id over, holds the role
// under a newer token and starts CMD.
func TestRunRestartedAfterSIGKILLRejoins(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "")
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	out := filepath.Join(t.TempDir(), "out")
	a := startKrole(t, bin, c, "controller", "node-3", out)
	a.waitLine(t, 0, startedRE, 20*time.Second)
	// CMD appends a line to out once it runs (after krole run said it
	// started it): once per holding.
	runs := func(n int) []string {
		t.Helper()
		var got []string
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(out)
			got = lines(string(b))
			return err == nil && strings.Count(string(b), "\n") >= n
		}, 20*time.Second, 20*time.Millisecond, "CMD ran %d times", n)
		return got
	}
	runs(1)
	before := lastLease(readRole(t, c.Config, "controller"))
	require.NotNil(t, before)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-a.exited:
	case <-time.After(time.Minute):
		t.Fatal("the killed krole run's stderr stayed open")
	}
	last := lastLease(readRole(t, c.Config, "controller"))
	require.NotNil(t, last)
	require.False(t, last.Released(), "SIGKILL: no release")

	b := startKrole(t, bin, c, "controller", "node-3", out)
	b.waitLine(t, 0, regexp.MustCompile(`^krole run: elected controller as node-3 \(token \d+/\d+\)$`), time.Minute)
	b.waitLine(t, 0, startedRE, 20*time.Second)
	assert.NotContains(t, b.log(), "in use")
	now := lastLease(readRole(t, c.Config, "controller"))
	require.NotNil(t, now)
	assert.Equal(t, codec.MemberID("node-3"), now.Member)
	assert.True(t, now.Token.Newer(before.Token), "a new holding: %s after %s", now.Token, before.Token)
	ran := runs(2)
	require.Len(t, ran, 2, "CMD ran once per holding: %q", ran)
	assert.True(t, strings.HasPrefix(ran[1], "node-3 "), "%q", ran[1])
}

// assertOneLineErrorIn: stderr holds exactly one "krole: " line.
func assertOneLineErrorIn(t *testing.T, stderr string) {
	t.Helper()
	n := 0
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "krole: ") {
			n++
		}
	}
	assert.Equal(t, 1, n, "one error line in %q", stderr)
}
