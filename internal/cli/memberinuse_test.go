package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// TestRunSecondProcessUnderTheSameMemberIsRefused (issue 19, scenario
// 2): a second `krole run controller --member node-3` while node-3 runs
// and holds the role exits 73 with one line naming the other instance;
// it writes nothing (no registration, no tombstone, no lease), and the
// running node-3 keeps the role under the same token and renews on.
func TestRunSecondProcessUnderTheSameMemberIsRefused(t *testing.T) {
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

	r := run(t, args...)
	assert.Equal(t, ExitRunMemberInUse, r.Code, "stderr: %s", r.Stderr)
	assertOneLineErrorIn(t, r.Stderr)
	assert.Contains(t, r.Stderr, "krole: member id node-3 is in use by instance "+reg.Instance)
	assert.Contains(t, r.Stderr, "give each process its own --member")
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
	require.Greater(t, len(after), len(before), "the holder renewed")
	assert.Equal(t, ExitOK, a.stop(), "stderr: %s", a.stderr.String())
	assert.NotContains(t, a.stderr.String(), "registration was removed")
	assert.NotContains(t, a.stderr.String(), "revoked")
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
